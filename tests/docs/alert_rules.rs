//! Checks the alert rules in `alerts/` for what a reader of an alert needs:
//! a severity, a summary and a description, an absolute runbook link to an
//! entry that exists in `docs/runbook.md`, metric names that `METRICS.md` lists, and unit
//! tests in `alerts/tests/` that both fire and stay silent. (`promtool check
//! rules` and `promtool test rules` themselves run in scripts/test.sh.)

use crate::promql_check;

use std::collections::{BTreeMap, BTreeSet};

use promql_check::{documented, files, label_problems, metric_names, read, root};

/// One alert as read from a rule file.
#[derive(Default, Debug)]
struct Alert {
    name: String,
    expr: String,
    fields: BTreeMap<String, String>,
}

/// Reads the alerts of a rule file written in this repository's layout
/// (`- alert:` items with `expr:` inline or as a `|` block).
fn alerts_in(text: &str) -> Vec<Alert> {
    let mut out: Vec<Alert> = Vec::new();
    let mut in_expr: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if let Some(min) = in_expr {
            if trimmed.is_empty() || indent >= min {
                out.last_mut()
                    .unwrap()
                    .expr
                    .push_str(&format!("{trimmed}\n"));
                continue;
            }
            in_expr = None;
        }
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            out.push(Alert {
                name: name.to_string(),
                ..Default::default()
            });
        } else if let (Some(a), Some((key, value))) = (out.last_mut(), trimmed.split_once(": ")) {
            if key == "expr" && value == "|" {
                in_expr = Some(indent + 1);
            } else if key == "expr" {
                a.expr = value.to_string();
            } else {
                a.fields
                    .insert(key.to_string(), value.trim_matches('"').to_string());
            }
        } else if let (Some(a), Some(key)) = (out.last_mut(), trimmed.strip_suffix(": >-")) {
            a.fields.insert(key.to_string(), "(folded)".to_string());
        }
    }
    out
}

/// GitHub's anchor for a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of docs/runbook.md's alert entries (`### <alert>`).
fn runbook_anchors() -> BTreeSet<String> {
    read(&root().join("docs/runbook.md"))
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(anchor)
        .collect()
}

/// The runbook's base URL, set once in scripts/generate-kubernetes.sh, which
/// writes it into every `runbook_url`: absolute, so that Alertmanager and
/// Grafana can open it, and naming `docs/runbook.md`.
fn runbook_base() -> String {
    let script = read(&root().join("scripts/generate-kubernetes.sh"));
    let base = script
        .lines()
        .find_map(|l| l.strip_prefix("runbook_base=${RUNBOOK_BASE_URL:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .expect("runbook_base=${RUNBOOK_BASE_URL:-...} in scripts/generate-kubernetes.sh");
    let host = base
        .strip_prefix("https://")
        .map(|r| r.split('/').next().unwrap());
    assert!(
        host.is_some_and(|h| h.contains('.')),
        "the runbook's base URL is not an absolute https URL: {base}"
    );
    assert!(base.ends_with("/docs/runbook.md"), "{base}");
    base.to_string()
}

/// Every `runbook_url` written anywhere (the rules, their unit tests, the
/// PrometheusRule) is the base URL and an anchor docs/runbook.md has.
#[test]
fn every_runbook_url_is_absolute_on_one_base_and_its_anchor_exists() {
    let base = runbook_base();
    let anchors = runbook_anchors();
    let mut sources = files("alerts", ".rules.yml");
    sources.extend(files("alerts/tests", ".yml"));
    sources.push(root().join("deploy/kubernetes/prometheus-rule.yaml"));
    sources.push(root().join("deploy/kubernetes/prometheus-rule-opt-in.yaml"));
    let mut problems = Vec::new();
    let mut count = 0;
    for file in &sources {
        for url in read(file)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
        {
            count += 1;
            let url = url.trim_matches('"');
            match url.strip_prefix(&format!("{base}#")) {
                Some(a) if anchors.contains(a) => {}
                Some(a) => {
                    problems.push(format!("{}: docs/runbook.md has no #{a}", file.display()))
                }
                None => problems.push(format!("{}: {url} is not on {base}", file.display())),
            }
        }
    }
    assert!(count >= 29 * 2, "only {count} runbook_url found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn alerts_have_severity_text_runbook_entry_tests_and_documented_metrics() {
    let documented = documented();
    let anchors = runbook_anchors();
    let tests: String = files("alerts/tests", ".yml")
        .iter()
        .map(|p| read(p))
        .collect();
    let mut problems = Vec::new();
    let mut count = 0;
    for file in files("alerts", ".rules.yml") {
        for a in alerts_in(&read(&file)) {
            count += 1;
            let n = &a.name;
            if !matches!(
                a.fields.get("severity").map(String::as_str),
                Some("critical" | "warning")
            ) {
                problems.push(format!("{n}: severity must be critical or warning"));
            }
            for key in ["summary", "description"] {
                if a.fields.get(key).is_none_or(|v| v.is_empty()) {
                    problems.push(format!("{n}: no {key}"));
                }
            }
            let want = format!("{}#{}", runbook_base(), n.to_lowercase());
            if a.fields.get("runbook_url") != Some(&want) {
                problems.push(format!("{n}: runbook_url should be {want}"));
            }
            if !anchors.contains(&n.to_lowercase()) {
                problems.push(format!("{n}: docs/runbook.md has no '### {n}' entry"));
            }
            if metric_names(&a.expr).is_empty() && !a.expr.contains("up{") {
                problems.push(format!("{n}: no expression read: {a:?}"));
            }
            for name in metric_names(&a.expr) {
                if !documented.contains_key(&name) {
                    problems.push(format!("{n}: {name} is not listed in METRICS.md"));
                }
            }
            for p in label_problems(&a.expr, &documented) {
                problems.push(format!("{n}: {p}"));
            }
            // A unit test case is `alertname: X` followed by its exp_alerts:
            // `[]` for a case that must stay silent, a list for one that fires.
            let cases: Vec<&str> = tests.split(&format!("alertname: {n}\n")).skip(1).collect();
            let silent = cases
                .iter()
                .any(|c| c.trim_start().starts_with("exp_alerts: []"));
            let fires = cases.iter().any(|c| {
                let c = c.trim_start();
                c.starts_with("exp_alerts:\n")
                    && c.split("alertname:")
                        .next()
                        .unwrap()
                        .contains("exp_annotations:")
            });
            if !silent || !fires {
                problems.push(format!(
                    "{n}: alerts/tests needs a firing case (with annotations) and a silent one"
                ));
            }
        }
    }
    assert!(count >= 15, "only {count} alerts read");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
