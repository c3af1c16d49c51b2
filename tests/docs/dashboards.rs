//! Checks the Grafana dashboards in `dashboards/` against what the project
//! documents.
//!
//! Every dashboard query (panel targets and `label_values` variables) must
//! parse as PromQL once Grafana's variables are substituted, and may only use
//! metric names that `METRICS.md` lists. Parsing is left to `promtool`, the
//! same parser Prometheus uses: each query becomes a recording rule in a
//! temporary rule file that `promtool check rules` reads. Without promtool
//! these tests fail; they never skip.

use crate::promql_check;

use std::collections::{BTreeMap, BTreeSet};

use promql_check::{
    check_queries, dashboard_queries, documented, files, labels_of, metric_names, read, substitute,
    Documented, Query,
};
use serde_json::Value;

pub fn dashboards() -> Vec<(String, Value)> {
    let found: Vec<(String, Value)> = files("dashboards", ".json")
        .into_iter()
        .map(|p| {
            let name = format!("dashboards/{}", p.file_name().unwrap().to_string_lossy());
            let v = serde_json::from_str(&read(&p))
                .unwrap_or_else(|e| panic!("{name}: invalid JSON: {e}"));
            (name, v)
        })
        .collect();
    assert_eq!(
        found.len(),
        2,
        "expected the overview and the consumer dashboard"
    );
    found
}

#[test]
fn substitution_keeps_queries_valid_and_names_are_found() {
    assert_eq!(
        substitute(
            r#"sum(rate(nats_delivery_x_total{server=~"$server",a=~"${account:regex}"}[$__rate_interval]))"#
        ),
        r#"sum(rate(nats_delivery_x_total{server=~".*",a=~".*"}[5m]))"#
    );
    assert_eq!(
        substitute("increase(x[$__range]) / $__range_s"),
        "increase(x[1h]) / 3600"
    );
    let names = metric_names(
        r#"a{l="nats_delivery_in_a_string"} / on(x) nats_delivery_b_total + nats_delivery_c"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["nats_delivery_b_total", "nats_delivery_c"]
    );
}

#[test]
fn the_query_check_rejects_bad_promql_and_undocumented_names() {
    let documented: Documented = [(
        "nats_delivery_known_total".to_string(),
        ["server".to_string()].into(),
    )]
    .into();
    let query = |place: &str, expr: &str| Query {
        place: place.into(),
        expr: expr.into(),
    };
    let ok = query(
        "ok",
        r#"sum by (server, job) (rate(nats_delivery_known_total{server=~"$server"}[$__rate_interval]))"#,
    );
    assert_eq!(check_queries(&[ok], &documented), Vec::<String>::new());
    let problems = check_queries(
        &[
            query("unknown", "nats_delivery_made_up"),
            query(
                "selector",
                r#"nats_delivery_known_total{serv="a",server="b"}"#,
            ),
            query("grouping", "sum by (account) (nats_delivery_known_total)"),
            query("broken", "sum(rate(nats_delivery_known_total[5m])"),
        ],
        &documented,
    );
    assert_eq!(
        problems[..4],
        [
            "unknown: nats_delivery_made_up is not listed in METRICS.md",
            "selector: label serv is not a label of nats_delivery_known_total",
            "grouping: label account in by (...) is not a label of the query's metrics",
            "broken: does not parse as PromQL: sum(rate(nats_delivery_known_total[5m])",
        ]
    );
    assert_eq!(problems.len(), 5, "{problems:#?}");
}

#[test]
fn dashboard_queries_parse_and_use_only_documented_metrics_and_labels() {
    let documented = documented();
    let mut queries = Vec::new();
    for (name, dash) in dashboards() {
        queries.extend(dashboard_queries(&name, &dash));
    }
    // A legend may only name labels the query's metrics carry.
    let mut problems = Vec::new();
    for (name, dash) in dashboards() {
        for p in dash["panels"].as_array().expect("panels") {
            for t in p["targets"].as_array().into_iter().flatten() {
                let known = labels_of(t["expr"].as_str().unwrap(), &documented);
                let legend = t["legendFormat"].as_str().unwrap_or("");
                for label in legend
                    .split("{{")
                    .skip(1)
                    .filter_map(|s| s.split_once("}}"))
                {
                    if !known.contains(label.0.trim()) {
                        problems.push(format!("{name}: {}: legend uses {}", p["title"], label.0));
                    }
                }
            }
        }
    }
    assert!(queries.len() >= 40, "only {} queries found", queries.len());
    problems.extend(check_queries(&queries, &documented));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn dashboards_have_variables_descriptions_units_and_rate_intervals() {
    let mut uids = BTreeSet::new();
    for (name, dash) in dashboards() {
        assert!(
            dash["schemaVersion"].as_u64().unwrap_or(0) >= 39,
            "{name}: old schemaVersion"
        );
        assert!(
            uids.insert(dash["uid"].as_str().expect("uid").to_string()),
            "{name}: duplicate uid"
        );
        check_variables(&name, &dash);
        let mut ids = BTreeSet::new();
        let mut placed: Vec<(String, Rect)> = Vec::new();
        for p in dash["panels"].as_array().expect("panels") {
            let title = p["title"].as_str().unwrap_or("?");
            assert!(
                ids.insert(p["id"].as_u64().expect("panel id")),
                "{name}: duplicate id at {title:?}"
            );
            check_placement(&name, p, &mut placed);
            if p["type"] != "row" {
                check_panel(&name, p);
            }
        }
    }
}

/// The data source and the selection variables every query uses.
fn check_variables(name: &str, dash: &Value) {
    let vars: BTreeMap<&str, &Value> = dash["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .map(|v| (v["name"].as_str().expect("variable name"), v))
        .collect();
    assert_eq!(vars["datasource"]["type"], "datasource", "{name}");
    assert_eq!(vars["datasource"]["query"], "prometheus", "{name}");
    for v in [
        "cluster",
        "namespace",
        "job",
        "server",
        "account",
        "stream",
        "consumer",
    ] {
        let var = vars
            .get(v)
            .unwrap_or_else(|| panic!("{name}: no ${v} variable"));
        assert_eq!(var["datasource"]["uid"], "${datasource}", "{name}: ${v}");
    }
}

/// A panel's place on the grid: x, y, width, height.
type Rect = (u64, u64, u64, u64);

/// A panel within the 24 columns, overlapping none placed before it.
fn check_placement(name: &str, p: &Value, placed: &mut Vec<(String, Rect)>) {
    let title = p["title"].as_str().unwrap_or("?");
    let g = &p["gridPos"];
    let cell = |k: &str| {
        g[k].as_u64()
            .unwrap_or_else(|| panic!("{name}: {title:?} gridPos.{k}"))
    };
    let rect = (cell("x"), cell("y"), cell("w"), cell("h"));
    assert!(rect.0 + rect.2 <= 24, "{name}: {title:?} too wide");
    for (other, r) in placed.iter() {
        let apart = rect.0 + rect.2 <= r.0
            || r.0 + r.2 <= rect.0
            || rect.1 + rect.3 <= r.1
            || r.1 + r.3 <= rect.1;
        assert!(apart, "{name}: {title:?} overlaps {other:?}");
    }
    placed.push((title.to_string(), rect));
}

/// A panel's description, data source, unit and query windows.
fn check_panel(name: &str, p: &Value) {
    let title = p["title"].as_str().unwrap_or("?");
    let desc = p["description"].as_str().unwrap_or("");
    assert!(
        desc.len() >= 40,
        "{name}: panel {title:?} needs a plain description"
    );
    let Some(targets) = p["targets"].as_array() else {
        return;
    };
    assert_eq!(p["datasource"]["uid"], "${datasource}", "{name}: {title:?}");
    let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
    assert!(!unit.is_empty(), "{name}: panel {title:?} has no unit");
    for t in targets {
        assert_eq!(t["datasource"]["uid"], "${datasource}", "{name}: {title:?}");
        let expr = t["expr"].as_str().unwrap();
        // Every range selector uses Grafana's interval: rates follow
        // the scrape interval, totals the chosen time range.
        for window in expr
            .split('[')
            .skip(1)
            .map(|s| s.split(']').next().unwrap())
        {
            assert!(
                window == "$__rate_interval" || window == "$__range",
                "{name}: {title:?} has a fixed window [{window}]: {expr}"
            );
        }
        if expr.contains("rate(") {
            assert!(
                expr.contains("[$__rate_interval]"),
                "{name}: {title:?}: rate without $__rate_interval"
            );
        }
        if expr.contains("[$__range]") {
            assert_eq!(
                t["instant"], true,
                "{name}: {title:?}: a total over the range is an instant query"
            );
        }
    }
}

/// The job matcher every selector of `metric` carries: the applications'
/// own series (`nats_delivery_client_*`, from their `/metrics`) are scraped
/// under the applications' jobs, every other series under the exporter's.
fn job_matcher(metric: &str) -> &'static str {
    if metric.starts_with("nats_delivery_client_") {
        r#"job=~"$app_job""#
    } else {
        r#"job=~"$job""#
    }
}

/// The `nats_delivery_*` selectors of `expr` without their job matcher, so
/// that two deployments in one Prometheus never mix on a panel.
fn selectors_without_job(expr: &str) -> Vec<String> {
    selectors_without(expr, |name| vec![job_matcher(name)])
}

/// The `nats_delivery_*` selectors of `expr` that lack one of the matchers
/// `wanted` names for their metric.
pub fn selectors_without(expr: &str, wanted: impl Fn(&str) -> Vec<&'static str>) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut missing = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if !word(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && word(chars[i]) {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        if !name.starts_with("nats_delivery_") {
            continue;
        }
        // The matchers between braces, split at commas outside quotes.
        let mut matchers = Vec::new();
        if chars.get(i) == Some(&'{') {
            let (mut current, mut quoted) = (String::new(), false);
            i += 1;
            while let Some(&c) = chars.get(i) {
                i += 1;
                match c {
                    '\\' if quoted => {
                        current.push(c);
                        current.extend(chars.get(i));
                        i += 1;
                    }
                    '"' => {
                        quoted = !quoted;
                        current.push(c);
                    }
                    ',' | '}' if !quoted => {
                        matchers.push(current.trim().to_string());
                        current.clear();
                        if c == '}' {
                            break;
                        }
                    }
                    _ => current.push(c),
                }
            }
        }
        if !wanted(&name)
            .iter()
            .all(|w| matchers.iter().any(|m| m == w))
        {
            missing.push(name);
        }
    }
    missing
}

#[test]
fn the_job_check_finds_selectors_without_their_job() {
    let selected = r#"sum(rate(nats_delivery_a_total{server=~"$server",job=~"$job"}[5m])) / on (x) nats_delivery_client_b{job=~"$app_job"} + label_replace(vector(0), "a", "nats_delivery_c", "", "")"#;
    assert_eq!(selectors_without_job(selected), Vec::<String>::new());
    let unselected = r#"nats_delivery_a / nats_delivery_b{server=~"$server"} + nats_delivery_c{job=~"$jobs",x="a,}"} + nats_delivery_client_d{job=~"$job"} + nats_delivery_e{job="$job"} offset 1h"#;
    assert_eq!(
        selectors_without_job(unselected),
        [
            "nats_delivery_a",
            "nats_delivery_b",
            "nats_delivery_c",
            "nats_delivery_client_d",
            "nats_delivery_e"
        ]
    );
}

#[test]
fn every_dashboard_query_selects_its_job() {
    let mut problems = Vec::new();
    for (name, dash) in dashboards() {
        let vars: BTreeSet<&str> = dash["templating"]["list"]
            .as_array()
            .expect("templating")
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        for q in dashboard_queries(&name, &dash) {
            // The job variables themselves list every job, and the
            // deployment variables before them every cluster and namespace.
            let lists_all = ["job", "app_job", "cluster", "namespace"]
                .iter()
                .any(|v| q.place.ends_with(&format!("variable \"{v}\"")));
            if lists_all {
                continue;
            }
            for metric in selectors_without_job(&q.expr) {
                problems.push(format!(
                    "{}: {metric} without {}",
                    q.place,
                    job_matcher(&metric)
                ));
            }
            for var in ["job", "app_job"] {
                if q.expr.contains(&format!("\"${var}\"")) && !vars.contains(var) {
                    problems.push(format!("{}: uses ${var}, which is not defined", q.place));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
