//! What an on-call needs from the dashboards beyond valid queries: the
//! deployment (`namespace`, `cluster`) chosen on every panel, "not
//! collected" told apart from "nothing lost", a way to the runbook, an
//! import into Grafana 10.4, and a consumer dashboard that does not draw
//! every consumer at once.

use crate::dashboards::{dashboards, selectors_without};
use crate::promql_check::{dashboard_queries, files, metric_names, read};

use serde_json::Value;

/// Grafana 10.4's dashboard schema version: a newer one is refused there.
const GRAFANA_10_4_SCHEMA: u64 = 39;

/// The deployment matchers a selector of `metric` needs: applications are
/// in namespaces of their own, so their series keep only the cluster.
fn deployment_matchers(metric: &str) -> Vec<&'static str> {
    if metric.starts_with("nats_delivery_client_") {
        vec![r#"cluster=~"$cluster""#]
    } else {
        vec![r#"namespace=~"$namespace""#, r#"cluster=~"$cluster""#]
    }
}

fn variable<'a>(dash: &'a Value, name: &str) -> Option<&'a Value> {
    dash["templating"]["list"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

#[test]
fn every_query_selects_the_deployment_from_namespace_and_cluster_variables() {
    let mut problems = Vec::new();
    for (name, dash) in dashboards() {
        for var in ["namespace", "cluster"] {
            match variable(&dash, var) {
                Some(v) if v["includeAll"] == true && v["allValue"] == ".*" => {}
                _ => problems.push(format!("{name}: no {var} variable with All as .*")),
            }
        }
        for q in dashboard_queries(&name, &dash) {
            // The cluster variable lists every cluster, the namespace
            // variable the chosen clusters' namespaces.
            if q.place.ends_with(r#"variable "cluster""#) {
                continue;
            }
            let wanted = |metric: &str| {
                let mut w = deployment_matchers(metric);
                if q.place.ends_with(r#"variable "namespace""#) {
                    w.retain(|m| m.starts_with("cluster"));
                }
                w
            };
            for metric in selectors_without(&q.expr, wanted) {
                problems.push(format!("{}: {metric} without namespace/cluster", q.place));
            }
            // (A variable's query is checked as `count by (label)`.)
            let panel = !q.place.contains("variable \"");
            let dropped = q
                .expr
                .split(" by (")
                .skip(1)
                .any(|rest| !rest.starts_with("namespace, cluster"));
            if panel && dropped {
                problems.push(format!("{}: an aggregation drops the deployment", q.place));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The anchors of the alerts' runbook entries, with the metrics each reads.
fn alert_metrics() -> Vec<(String, std::collections::BTreeSet<String>)> {
    let mut out = Vec::new();
    for file in files("alerts", ".rules.yml") {
        let doc: serde_norway::Value = serde_norway::from_str(&read(&file)).unwrap();
        for group in doc["groups"].as_sequence().unwrap() {
            for rule in group["rules"].as_sequence().unwrap() {
                if let Some(alert) = rule["alert"].as_str() {
                    let expr = rule["expr"].as_str().unwrap();
                    out.push((alert.to_lowercase(), metric_names(expr)));
                }
            }
        }
    }
    out
}

#[test]
fn panels_say_not_collected_link_their_runbook_entries_and_import_into_grafana_10_4() {
    let alerts = alert_metrics();
    let mut problems = Vec::new();
    for (name, dash) in dashboards() {
        let version = dash["schemaVersion"].as_u64().unwrap_or(u64::MAX);
        if version > GRAFANA_10_4_SCHEMA {
            problems.push(format!(
                "{name}: schemaVersion {version} > {GRAFANA_10_4_SCHEMA}"
            ));
        }
        for p in dash["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap_or("?");
            if p["type"] == "stat" && p["fieldConfig"]["defaults"]["noValue"].as_str().is_none() {
                problems.push(format!("{name} {title:?}: a stat panel without noValue"));
            }
            let exprs: String = p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["expr"].as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let used = metric_names(&exprs);
            let links: Vec<&str> = p["links"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["url"].as_str())
                .collect();
            for (anchor, read_by_alert) in &alerts {
                let url = format!("docs/runbook.md#{anchor}");
                let linked = links.iter().any(|l| l.ends_with(&url));
                if linked && read_by_alert.is_disjoint(&used) {
                    problems.push(format!(
                        "{name} {title:?}: links {anchor}, reads none of it"
                    ));
                }
            }
            let any_alert = alerts.iter().any(|(_, m)| !m.is_disjoint(&used));
            if any_alert && links.is_empty() {
                problems.push(format!("{name} {title:?}: no link to its runbook entry"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// At 10,000 consumers, "All" draws every one of them: the consumer
/// variable offers no All and starts from one consumer.
#[test]
fn the_consumer_dashboard_does_not_default_to_every_consumer() {
    let (name, dash) = dashboards()
        .into_iter()
        .find(|(n, _)| n.ends_with("nats-delivery-consumer.json"))
        .expect("the consumer dashboard");
    let v = variable(&dash, "consumer").expect("a consumer variable");
    assert_eq!(
        v["includeAll"], false,
        "{name}: consumer variable offers All"
    );
}
