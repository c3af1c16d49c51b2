//! The alerting policy at the head of `docs/runbook.md`, held against the
//! rules in `alerts/` and their promtool tests: what pages, what keeps its
//! deployment, what a healthy default install shows, what only opt-in flags
//! can feed. (promtool itself runs the tests in scripts/test.sh.)

use crate::promql_check::{files, read, root};

use std::collections::{BTreeMap, BTreeSet};

use serde_norway::Value;

/// One alert rule: its file, name, expression, `for` in minutes, labels and
/// description.
struct Rule {
    file: String,
    name: String,
    expr: String,
    for_minutes: u64,
    labels: BTreeMap<String, String>,
    description: String,
}

fn yaml(path: &std::path::Path) -> Value {
    serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Minutes of a Prometheus duration written as `Nm` or `Nh` (the forms the
/// rules use).
fn minutes(d: &str) -> u64 {
    if let Some(m) = d.strip_suffix('m') {
        m.parse().unwrap()
    } else if let Some(h) = d.strip_suffix('h') {
        h.parse::<u64>().unwrap() * 60
    } else {
        panic!("unexpected duration {d}")
    }
}

fn rules() -> Vec<Rule> {
    let mut out = Vec::new();
    for path in files("alerts", ".rules.yml") {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for group in yaml(&path)["groups"].as_sequence().unwrap() {
            for r in group["rules"].as_sequence().unwrap() {
                let Some(name) = r["alert"].as_str() else {
                    continue;
                };
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                out.push(Rule {
                    file: file.clone(),
                    name: name.to_string(),
                    expr: text(&r["expr"]),
                    for_minutes: r["for"].as_str().map_or(0, minutes),
                    labels: r["labels"]
                        .as_mapping()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (text(k), text(v)))
                        .collect(),
                    description: text(&r["annotations"]["description"]),
                });
            }
        }
    }
    assert!(out.len() >= 30, "only {} alerts read", out.len());
    out
}

/// The windows, in minutes, of every `increase(...[W])` in an expression.
fn increase_windows(expr: &str) -> Vec<u64> {
    expr.split("increase(")
        .skip(1)
        .map(|rest| {
            let close = rest.find("])").expect("increase(...[W])");
            let open = rest[..close].rfind('[').unwrap();
            minutes(&rest[open + 1..close])
        })
        .collect()
}

/// One past event never pages; a sustained loss does. A page (`critical`)
/// always has a `for`, and one that reads a counter's increase over W holds
/// for at least 3 W, which a single event (an increase above 0 for W and a
/// scrape interval) cannot. Every single-loss alert is a ticket labelled
/// `category="loss_event"`, the label the documented opt-in routes.
#[test]
fn one_past_event_never_pages_and_sustained_loss_does() {
    let mut problems = Vec::new();
    for r in rules() {
        let n = &r.name;
        let severity = r.labels.get("severity").map(String::as_str);
        if severity == Some("critical") {
            if r.for_minutes == 0 {
                problems.push(format!("{n}: a page without `for` fires on one evaluation"));
            }
            for w in increase_windows(&r.expr) {
                if r.for_minutes < 3 * w {
                    problems.push(format!(
                        "{n}: pages on increase over {w}m held only {}m: one event can page",
                        r.for_minutes
                    ));
                }
            }
        }
        let loss_event = r.labels.get("category").map(String::as_str) == Some("loss_event");
        if loss_event && severity != Some("warning") {
            problems.push(format!("{n}: a single loss is a ticket (warning)"));
        }
        if r.file == "loss.rules.yml" && n != "NatsDeliveryLossSustained" && !loss_event {
            problems.push(format!(
                "{n}: a single-loss alert needs category: loss_event"
            ));
        }
    }
    let sustained = rules()
        .into_iter()
        .find(|r| r.name == "NatsDeliveryLossSustained")
        .expect("the sustained-loss page");
    assert_eq!(sustained.labels["severity"], "critical");
    for counter in [
        "nats_delivery_client_dropped_messages_total",
        "nats_delivery_app_dropped_messages_total",
        "nats_delivery_client_slow_consumer_events_total",
        "nats_delivery_server_slow_consumers_total",
        "nats_delivery_jetstream_max_deliveries_total",
        "nats_delivery_jetstream_terminated_total",
        "nats_delivery_consumer_removed_before_delivery_messages_total",
        "nats_delivery_client_jetstream_publish_failures_total",
    ] {
        if !sustained.expr.contains(&format!("increase({counter}")) {
            problems.push(format!("NatsDeliveryLossSustained does not read {counter}"));
        }
    }
    let runbook = read(&root().join("docs/runbook.md"));
    for words in [
        "## Alerting policy",
        "One past event of any kind never pages",
        "matchers: ['category=\"loss_event\"']",
    ] {
        if !runbook.contains(words) {
            problems.push(format!("docs/runbook.md lacks {words:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every aggregation and every vector match keeps `namespace` and `cluster`,
/// so two deployments never merge into one alert.
#[test]
fn every_aggregation_keeps_namespace_and_cluster() {
    let mut problems = Vec::new();
    for r in rules() {
        let squeezed: String = r.expr.split_whitespace().collect::<Vec<_>>().join(" ");
        for keyword in ["by (", "on ("] {
            for rest in squeezed.split(keyword).skip(1) {
                let list = &rest[..rest.find(')').unwrap()];
                if !list.starts_with("namespace, cluster") {
                    problems.push(format!("{}: `{keyword}{list})`", r.name));
                }
            }
        }
        if squeezed.contains("without (") || squeezed.contains("ignoring (") {
            problems.push(format!("{}: write `by`/`on` with the labels kept", r.name));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The alerts each case of a promtool test file expects, by alert name.
fn expected(file: &str) -> BTreeMap<String, Vec<Vec<Value>>> {
    let mut out: BTreeMap<String, Vec<Vec<Value>>> = BTreeMap::new();
    let doc = yaml(&root().join(file));
    for test in doc["tests"].as_sequence().unwrap() {
        for case in test["alert_rule_test"].as_sequence().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let alerts = case["exp_alerts"]
                .as_sequence()
                .cloned()
                .unwrap_or_default();
            out.entry(name).or_default().push(alerts);
        }
    }
    out
}

/// alerts/tests/namespaces.test.yml holds every alert (but the one built on
/// absent(), which has no namespace to keep) in two namespaces, and expects
/// it once in each, with its namespace.
#[test]
fn every_alert_fires_once_per_namespace() {
    let cases = expected("alerts/tests/namespaces.test.yml");
    let mut problems = Vec::new();
    for r in rules() {
        if r.name == "NatsDeliveryExporterAbsent" {
            continue;
        }
        let Some(runs) = cases.get(&r.name) else {
            problems.push(format!("{}: not in namespaces.test.yml", r.name));
            continue;
        };
        for alerts in runs {
            let namespaces: Vec<&str> = alerts
                .iter()
                .filter_map(|a| a["exp_labels"]["namespace"].as_str())
                .collect();
            if namespaces != ["nats-a", "nats-b"] || alerts.len() != 2 {
                problems.push(format!("{}: expected in {namespaces:?}", r.name));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The metrics that only flags beyond the defaults produce, and the flag
/// each alert reading them must name. The default `--sources` leave out
/// routez and gatewayz (docs/configuration.md), `--stream-lost-reads` is 0,
/// the canary is off.
const OPT_IN_METRICS: [(&str, &str); 4] = [
    ("nats_delivery_route_", "--sources includes routez"),
    ("nats_delivery_gateway_", "--sources includes gatewayz"),
    ("nats_delivery_stream_lost_", "--stream-lost-reads"),
    ("nats_delivery_canary_", "--canary"),
];

/// Nothing in the default groups reads what the defaults cannot feed; the
/// opt-in group's alerts each say which flag they need.
#[test]
fn alerts_the_defaults_cannot_fire_are_opt_in_and_name_their_flag() {
    let mut problems = Vec::new();
    let mut opt_in = 0;
    for r in rules() {
        let needs: Vec<&str> = OPT_IN_METRICS
            .iter()
            .filter(|(prefix, _)| r.expr.contains(prefix))
            .map(|(_, flag)| *flag)
            .collect();
        match (r.file == "opt-in.rules.yml", needs.as_slice()) {
            (false, []) => {}
            (false, _) => problems.push(format!("{}: needs {needs:?}: opt-in", r.name)),
            (true, []) => problems.push(format!("{}: the defaults feed it", r.name)),
            (true, flags) => {
                opt_in += 1;
                for flag in flags {
                    if !r.description.contains(flag) {
                        problems.push(format!("{}: description must name {flag}", r.name));
                    }
                }
            }
        }
    }
    let configuration = read(&root().join("docs/configuration.md"));
    let sources = configuration
        .lines()
        .find(|l| l.starts_with("| `--sources`"))
        .expect("--sources in docs/configuration.md");
    let default = sources.split('|').nth(3).unwrap();
    assert!(
        default.contains("varz"),
        "{default}: the default of --sources"
    );
    for source in ["routez", "gatewayz"] {
        if default.contains(source) {
            problems.push(format!(
                "{source} is a default source now: move its alert back"
            ));
        }
    }
    assert_eq!(opt_in, 5, "the opt-in group's alerts");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The target labels the quiet test gives every scraped series.
const QUIET_TARGET: &str = r#"job="nats-delivery-exporter",instance="exporter:7777""#;

/// A sample line of the exposition as promtool's series: its name and
/// labels, with the scrape target's labels in front.
fn scraped_series(line: &str) -> String {
    let series = &line[..line.rfind(' ').expect("a sample line")];
    match series.split_once('{') {
        Some((name, labels)) => format!("{name}{{{QUIET_TARGET},{labels}"),
        None => format!("{series}{{{QUIET_TARGET}}}"),
    }
}

/// alerts/tests/quiet.test.yml is a real default-flags scrape of a healthy
/// server held for an hour (tests/docs/fixtures/quiet-scrape.prom, every
/// series of it), and expects every alert silent at its end.
#[test]
fn a_healthy_default_install_is_quiet() {
    let doc = yaml(&root().join("alerts/tests/quiet.test.yml"));
    let test = &doc["tests"][0];
    let held: BTreeSet<String> = test["input_series"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|s| !s["series"].as_str().unwrap().starts_with("up{"))
        .map(|s| {
            let values = s["values"].as_str().unwrap();
            assert!(values.ends_with("x60"), "{values}: held an hour");
            s["series"].as_str().unwrap().to_string()
        })
        .collect();
    let scraped: BTreeSet<String> = read(&root().join("tests/docs/fixtures/quiet-scrape.prom"))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(scraped_series)
        .collect();
    assert!(scraped.len() > 20, "{} series scraped", scraped.len());
    assert_eq!(held, scraped, "quiet.test.yml is not the fixture's scrape");
    let cases = expected("alerts/tests/quiet.test.yml");
    let silent: BTreeSet<&str> = cases
        .iter()
        .filter(|(_, runs)| runs.iter().all(Vec::is_empty))
        .map(|(n, _)| n.as_str())
        .collect();
    let all: BTreeSet<String> = rules().into_iter().map(|r| r.name).collect();
    let missing: Vec<&String> = all
        .iter()
        .filter(|n| !silent.contains(n.as_str()))
        .collect();
    assert!(missing.is_empty(), "not checked silent: {missing:?}");
}
