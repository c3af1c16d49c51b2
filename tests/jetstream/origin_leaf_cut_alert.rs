//! NatsJetStreamOriginInactive (alerts/pressure.rules.yml, as shipped) run
//! by promtool on the contact ages `origin_leaf_cut.rs` was served: before
//! the cut, during it and after the restore, one scrape about a second
//! apart. The rule's threshold (120 s) and `for` (5m) are longer than a test
//! may wait, so the series is dilated: each scrape is laid 30 s after the one
//! before and its age multiplied by 30, the same cut 30 times as long (an
//! age still grows by one second a second). The alert must fire at each
//! step where the dilated age has been over the threshold for `for` and at
//! no other: not before the cut, and not once the copies resumed.
//! NatsJetStreamOriginMessagesRemovedBeforeCopy (alerts/loss.rules.yml), on
//! the removed-before-copy counts served beside them, fires at the end for
//! the copies that skipped messages, with their number, and not before.
use crate::origin_leaf_cut::{ACCOUNT, API, COPIES, PACE};

use nats_test_server::promtool;

const ALERT: &str = "NatsJetStreamOriginInactive";
const AGE: &str = "nats_delivery_stream_origin_contact_age_seconds";
const REMOVED: &str = "nats_delivery_stream_origin_removed_before_copy_messages_total";
const RULES: &str = include_str!("../../alerts/pressure.rules.yml");
const REMOVED_ALERT: &str = "NatsJetStreamOriginMessagesRemovedBeforeCopy";
const LOSS_RULES: &str = include_str!("../../alerts/loss.rules.yml");
/// The dilated scrape interval: a common Prometheus one.
const STEP_SECONDS: u64 = 30;

/// The alert's threshold (seconds) and `for`, read from the rule file.
#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) threshold: f64,
    for_seconds: u64,
}

fn rule() -> Rule {
    let start = format!("- alert: {ALERT}");
    let lines: Vec<&str> = RULES
        .lines()
        .map(str::trim)
        .skip_while(|l| *l != start)
        .take_while(|l| *l != "annotations:")
        .collect();
    let after = |prefix: &str| {
        let line = lines.iter().find(|l| l.starts_with(prefix));
        line.unwrap_or_else(|| panic!("{prefix:?} in {ALERT}: {lines:?}"))[prefix.len()..].trim()
    };
    let minutes = after("for:").strip_suffix('m').expect("`for` in minutes");
    Rule {
        threshold: after(") >").parse().expect("a threshold"),
        for_seconds: 60 * minutes.parse::<u64>().expect("minutes"),
    }
}

/// The ages served, each scrape's four (in the order of `COPIES`), by
/// phase, and the removed-before-copy counts of every scrape.
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) healthy: Vec<[f64; 4]>,
    pub(crate) cut: Vec<[f64; 4]>,
    pub(crate) back: Vec<[f64; 4]>,
    pub(crate) removed: Vec<[Option<f64>; 4]>,
    pub(crate) rule: Rule,
}

impl Default for Served {
    fn default() -> Self {
        Served {
            healthy: Vec::new(),
            cut: Vec::new(),
            back: Vec::new(),
            removed: Vec::new(),
            rule: rule(),
        }
    }
}

impl Served {
    /// How many times longer the dilated series is than the scrapes.
    pub(crate) fn dilation(&self) -> f64 {
        STEP_SECONDS as f64 / PACE.as_secs_f64()
    }

    /// Steps of `for`.
    fn for_steps(&self) -> usize {
        (self.rule.for_seconds / STEP_SECONDS) as usize
    }

    /// Every copy's dilated age was over the threshold at the last
    /// `for_steps() + 1` scrapes of the cut: the alert fires for each.
    pub(crate) fn fires_during_cut(&self) -> bool {
        let n = self.for_steps() + 1;
        self.cut.len() >= n
            && self.cut[self.cut.len() - n..].iter().all(|ages| {
                ages.iter()
                    .all(|a| a * self.dilation() > self.rule.threshold)
            })
    }

    /// Every scrape's dilated ages, as written for promtool.
    fn dilated(&self) -> Vec<[String; 4]> {
        let all = self.healthy.iter().chain(&self.cut).chain(&self.back);
        all.map(|ages| ages.map(|a| format!("{:.3}", a * self.dilation())))
            .collect()
    }
}

/// Prometheus' `humanizeDuration` for a value of a minute or more.
fn humanize(v: f64) -> String {
    let s = v as u64;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    assert!(
        v >= 60.0 && h < 24,
        "humanize only what the alert shows: {v}"
    );
    if h > 0 {
        format!("{h}h {m}m {s}s")
    } else {
        format!("{m}m {s}s")
    }
}

/// The labels of copy `i`'s series as served, as PromQL writes them.
fn series(name: &str, i: usize) -> String {
    let (stream, kind, origin) = COPIES[i];
    let series = format!(
        "{name}{{job=\"nats-delivery-exporter\",instance=\"exporter:7777\",account=\"{ACCOUNT}\",stream=\"{stream}\",kind=\"{kind}\",origin_stream=\"{origin}\",origin_api=\"{API}\"}}"
    );
    json(&series)
}

fn json(s: &str) -> String {
    serde_json::to_string(s).expect("a string encodes")
}

/// The labels an alert of copy `i` carries, as promtool expects them.
fn alert_labels(i: usize, extra: &str) -> String {
    let (stream, kind, origin) = COPIES[i];
    let labels = [
        ("severity", "warning"),
        ("account", ACCOUNT),
        ("stream", stream),
        ("kind", kind),
        ("origin_stream", origin),
        ("origin_api", API),
    ];
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}: {}", json(v)))
        .collect();
    format!("{{{}{extra}}}", labels.join(", "))
}

/// The alert promtool must show for copy `i` at dilated age `v`.
fn firing_alert(i: usize, v: f64) -> String {
    let (stream, kind, origin) = COPIES[i];
    let ago = humanize(v);
    let summary = format!("The {kind} {stream} has not heard from {origin} for {ago}");
    let description = format!(
        "Stream {stream} (account {ACCOUNT}) is a {kind} of {origin} (through {API}) and last heard from it {ago} ago: it copies nothing, and what the origin's limits remove meanwhile it will never get."
    );
    let runbook = "https://github.com/nats-delivery-exporter/nats-delivery-exporter/blob/main/docs/runbook.md#natsjetstreamorigininactive";
    format!(
        "          - exp_labels: {}\n            exp_annotations: {{summary: {}, description: {}, runbook_url: {}}}\n",
        alert_labels(i, ""),
        json(&summary),
        json(&description),
        json(runbook)
    )
}

/// The alert promtool must show for copy `i` that skipped `n` messages.
fn skipped(i: usize, n: f64) -> String {
    let (stream, kind, origin) = COPIES[i];
    let summary = format!("The {kind} {stream} never got messages {origin} removed");
    let description = format!(
        "Stream {stream} (account {ACCOUNT}), a {kind} of {origin}, skipped about {n} origin messages in the last 10 minutes: the origin had removed them (limits or a purge) before it copied them. It will never hold them."
    );
    let runbook = "https://github.com/nats-delivery-exporter/nats-delivery-exporter/blob/main/docs/runbook.md#natsjetstreamoriginmessagesremovedbeforecopy";
    format!(
        "          - exp_labels: {}\n            exp_annotations: {{summary: {}, description: {}, runbook_url: {}}}\n",
        alert_labels(i, ", category: loss_event"),
        json(&summary),
        json(&description),
        json(runbook)
    )
}

/// One check of `alert` at `step`: the alerts expected, as written.
fn check(step: usize, alert: &str, alerts: String) -> String {
    let alerts = if alerts.is_empty() {
        " []\n".to_string()
    } else {
        format!("\n{alerts}")
    };
    format!(
        "      - eval_time: {}s\n        alertname: {alert}\n        exp_alerts:{alerts}",
        step as u64 * STEP_SECONDS
    )
}

/// The removed-before-copy counts of each copy that has them, one a scrape
/// (every scrape, or none: a version without them for sources).
fn counts(served: &Served) -> Vec<(usize, Vec<f64>)> {
    (0..4)
        .filter_map(|i| {
            let column: Vec<Option<f64>> = served.removed.iter().map(|r| r[i]).collect();
            let present: Vec<f64> = column.iter().flatten().copied().collect();
            match present.len() {
                0 => None,
                n if n == column.len() => Some((i, present)),
                _ => panic!("{}'s count in some scrapes only: {column:?}", COPIES[i].0),
            }
        })
        .collect()
}

/// Runs both alerts on the served series. NatsJetStreamOriginInactive: at
/// each step, the alerts of the copies whose dilated age was over the
/// threshold for `for`; none before the cut, all four at its end, none at
/// the last scrape after it. NatsJetStreamOriginMessagesRemovedBeforeCopy:
/// nothing counted until the copies resume, then an alert for each copy
/// whose count grew, with the growth.
pub(crate) fn alerts_fire_and_resolve(served: &Served) {
    let values = served.dilated();
    let parsed = |step: usize, i: usize| values[step][i].parse::<f64>().expect("a number");
    let over = |step: usize, i: usize| parsed(step, i) > served.rule.threshold;
    let fires = |step: usize, i: usize| {
        step >= served.for_steps() && (step - served.for_steps()..=step).all(|s| over(s, i))
    };
    let (last_cut, last) = (
        served.healthy.len() + served.cut.len() - 1,
        values.len() - 1,
    );
    let none = |step: usize| (0..4).all(|i| !fires(step, i));
    assert!((0..served.healthy.len()).all(none), "{served:?}");
    assert!((0..4).all(|i| fires(last_cut, i)), "{served:?}");
    assert!(none(last), "{served:?}");
    let counts = counts(served);
    for (i, c) in &counts {
        assert_eq!(
            c[last_cut], c[0],
            "{}: nothing counted while cut",
            COPIES[*i].0
        );
    }

    let mut test = format!(
        "rule_files: [pressure.rules.yml, loss.rules.yml]\nevaluation_interval: {STEP_SECONDS}s\ntests:\n  - interval: {STEP_SECONDS}s\n    input_series:\n"
    );
    let mut input = |name: &str, i: usize, column: Vec<String>| {
        test.push_str(&format!(
            "      - series: {}\n        values: '{}'\n",
            series(name, i),
            column.join(" ")
        ));
    };
    for i in 0..4 {
        input(AGE, i, values.iter().map(|v| v[i].clone()).collect());
    }
    for (i, c) in &counts {
        input(REMOVED, *i, c.iter().map(f64::to_string).collect());
    }
    test.push_str("    alert_rule_test:\n");
    for step in 0..values.len() {
        let firing = (0..4).filter(|i| fires(step, *i));
        test.push_str(&check(
            step,
            ALERT,
            firing.map(|i| firing_alert(i, parsed(step, i))).collect(),
        ));
    }
    let grown = counts.iter().filter(|(_, c)| c[last] > c[0]);
    let lost: String = grown.map(|(i, c)| skipped(*i, c[last] - c[0])).collect();
    test.push_str(&check(last_cut, REMOVED_ALERT, String::new()));
    test.push_str(&check(last, REMOVED_ALERT, lost));
    let rules = [
        ("pressure.rules.yml", RULES),
        ("loss.rules.yml", LOSS_RULES),
    ];
    let (passed, said) = promtool::test_rules(&rules, &test);
    assert!(passed, "promtool on the served series:\n{said}\n{test}");
}
