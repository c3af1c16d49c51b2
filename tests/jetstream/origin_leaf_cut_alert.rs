//! NatsJetStreamOriginInactive (alerts/pressure.rules.yml, as shipped) run
//! by promtool on the contact ages `origin_leaf_cut.rs` was served: before
//! the cut, during it and after the restore, one scrape about a second
//! apart. The rule's threshold (120 s) and `for` (5m) are longer than a test
//! may wait, so the series is dilated: each scrape is laid 30 s after the one
//! before and its age multiplied by 30, the same cut 30 times as long (an
//! age still grows by one second a second). The alert must fire at each
//! step where the dilated age has been over the threshold for `for` and at
//! no other: not before the cut, and not once the copies resumed.
use crate::origin_leaf_cut::{ACCOUNT, API, COPIES, PACE};

use nats_test_server::promtool;

const ALERT: &str = "NatsJetStreamOriginInactive";
const RULES: &str = include_str!("../../alerts/pressure.rules.yml");
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

/// The ages served, each scrape's four (in the order of `COPIES`).
#[derive(Debug)]
pub(crate) struct Inactive {
    pub(crate) healthy: Vec<[f64; 4]>,
    pub(crate) cut: Vec<[f64; 4]>,
    pub(crate) back: Vec<[f64; 4]>,
    pub(crate) rule: Rule,
}

impl Default for Inactive {
    fn default() -> Self {
        Inactive {
            healthy: Vec::new(),
            cut: Vec::new(),
            back: Vec::new(),
            rule: rule(),
        }
    }
}

impl Inactive {
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

/// The alert promtool must show for copy `i` at dilated age `v`.
fn firing(i: usize, v: f64) -> String {
    let (stream, kind, origin) = COPIES[i];
    let ago = humanize(v);
    let labels = [
        ("severity", "warning"),
        ("account", ACCOUNT),
        ("stream", stream),
        ("kind", kind),
        ("origin_stream", origin),
        ("origin_api", API),
    ];
    let summary = format!("The {kind} {stream} has not heard from {origin} for {ago}");
    let description = format!(
        "Stream {stream} (account {ACCOUNT}) is a {kind} of {origin} (through {API}) and last heard from it {ago} ago: it copies nothing, and what the origin's limits remove meanwhile it will never get."
    );
    let runbook = "https://github.com/nats-delivery-exporter/nats-delivery-exporter/blob/main/docs/runbook.md#natsjetstreamorigininactive";
    let json = |s: &str| serde_json::to_string(s).expect("a string encodes");
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}: {}", json(v)))
        .collect();
    format!(
        "          - exp_labels: {{{}}}\n            exp_annotations: {{summary: {}, description: {}, runbook_url: {}}}\n",
        labels.join(", "),
        json(&summary),
        json(&description),
        json(runbook)
    )
}

/// Runs the alert on the served series: at each step, the alerts of the
/// copies whose dilated age was over the threshold for `for`; none before
/// the cut, all four at its end, none at the last scrape after it.
pub(crate) fn alert_fires_and_resolves(served: &Inactive) {
    let values = served.dilated();
    let parsed = |step: usize, i: usize| values[step][i].parse::<f64>().expect("a number");
    let over = |step: usize, i: usize| parsed(step, i) > served.rule.threshold;
    let fires = |step: usize, i: usize| {
        step >= served.for_steps() && (step - served.for_steps()..=step).all(|s| over(s, i))
    };
    let last_cut = served.healthy.len() + served.cut.len() - 1;
    let none = |step: usize| (0..4).all(|i| !fires(step, i));
    assert!((0..served.healthy.len()).all(none), "{served:?}");
    assert!((0..4).all(|i| fires(last_cut, i)), "{served:?}");
    assert!(none(values.len() - 1), "{served:?}");

    let mut test = format!(
        "rule_files: [pressure.rules.yml]\nevaluation_interval: {STEP_SECONDS}s\ntests:\n  - interval: {STEP_SECONDS}s\n    input_series:\n"
    );
    for (i, (stream, kind, origin)) in COPIES.iter().enumerate() {
        let series = format!(
            "nats_delivery_stream_origin_contact_age_seconds{{job=\"nats-delivery-exporter\",instance=\"exporter:7777\",account=\"{ACCOUNT}\",stream=\"{stream}\",kind=\"{kind}\",origin_stream=\"{origin}\",origin_api=\"{API}\"}}"
        );
        let column: Vec<&str> = values.iter().map(|v| v[i].as_str()).collect();
        test.push_str(&format!(
            "      - series: {}\n        values: '{}'\n",
            serde_json::to_string(&series).expect("a string encodes"),
            column.join(" ")
        ));
    }
    test.push_str("    alert_rule_test:\n");
    for step in 0..values.len() {
        let alerts: String = (0..4)
            .filter(|i| fires(step, *i))
            .map(|i| firing(i, parsed(step, i)))
            .collect();
        let alerts = if alerts.is_empty() {
            " []\n".to_string()
        } else {
            format!("\n{alerts}")
        };
        test.push_str(&format!(
            "      - eval_time: {}s\n        alertname: {ALERT}\n        exp_alerts:{alerts}",
            step as u64 * STEP_SECONDS
        ));
    }
    let (passed, said) = promtool::test_rules(&[("pressure.rules.yml", RULES)], &test);
    assert!(passed, "promtool on the served ages:\n{said}\n{test}");
}
