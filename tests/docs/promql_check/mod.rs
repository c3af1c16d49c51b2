//! Shared by the tests that read `dashboards/` and `alerts/`: where the
//! repository is, the metric names a PromQL query uses, and a check of
//! queries against `promtool` and `METRICS.md`.
// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root directory.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file's text; panics with the path when it cannot be read.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Files in `dir` whose names end with `suffix`, sorted.
pub fn files(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("listing {dir}: {e}"))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    out
}

/// One query and where it came from, for error messages.
pub struct Query {
    /// Where the query is, for error messages.
    pub place: String,
    /// The query as written.
    pub expr: String,
}

/// Replaces Grafana's variables with values that keep the query valid PromQL:
/// time ranges become durations, every dashboard variable becomes `.*` (so a
/// variable is only valid inside a regex matcher, where dashboards must put it).
pub fn substitute(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        let (name, len) = if let Some(body) = rest.strip_prefix('{') {
            let end = body.find('}').expect("unclosed ${ in query");
            (body[..end].split(':').next().unwrap_or(""), end + 2)
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (&rest[..end], end)
        };
        out.push_str(match name {
            "__rate_interval" => "5m",
            "__interval" => "1m",
            "__range" => "1h",
            "__range_s" => "3600",
            "" => "$",
            _ => ".*",
        });
        rest = &rest[len..];
    }
    out.push_str(rest);
    out
}

/// A PromQL token, as far as these checks need one.
#[derive(Debug, PartialEq)]
enum Token {
    /// A name, keyword, number or duration.
    Word(String),
    /// A quoted string (its text is not needed).
    Text,
    /// Any other character.
    Mark(char),
}

fn tokens(expr: &str) -> Vec<Token> {
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Token::Text);
        } else if word_char(c) {
            let start = i;
            while i < chars.len() && word_char(chars[i]) {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            if !c.is_whitespace() {
                out.push(Token::Mark(c));
            }
            i += 1;
        }
    }
    out
}

/// The metric names (`nats_delivery_...`) a query uses, string literals skipped.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    tokens(expr)
        .into_iter()
        .filter_map(|t| match t {
            Token::Word(w) if w.starts_with("nats_delivery_") => Some(w),
            _ => None,
        })
        .collect()
}

/// Labels Prometheus adds to every scraped series: `job` and `instance`
/// always, `namespace` and `cluster` where service discovery or external
/// labels set them (prometheus-operator's PodMonitors, Thanos, Mimir).
pub const TARGET_LABELS: [&str; 4] = ["job", "instance", "namespace", "cluster"];

/// Every label the metrics of `expr` can carry, by `METRICS.md`, plus the
/// target labels.
pub fn labels_of(expr: &str, documented: &Documented) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    for name in metric_names(expr) {
        out.extend(documented.get(&name).into_iter().flatten().cloned());
    }
    out
}

/// Labels that `expr` uses but its metrics do not have: in a selector
/// (`metric{label=...}`, checked against that metric) or in a grouping
/// (`by`, `without`, `on`, `ignoring`, `group_left/right`, checked against
/// all metrics of the query).
pub fn label_problems(expr: &str, documented: &Documented) -> Vec<String> {
    let toks = tokens(expr);
    let all = labels_of(expr, documented);
    let mut problems = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let Token::Word(w) = &toks[i] else {
            i += 1;
            continue;
        };
        let grouping = [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ];
        let allowed: Option<BTreeSet<String>> = if w.starts_with("nats_delivery_") {
            documented.get(w).map(|l| {
                l.iter()
                    .cloned()
                    .chain(TARGET_LABELS.iter().map(|t| t.to_string()))
                    .collect()
            })
        } else if grouping.contains(&w.as_str()) {
            Some(all.clone())
        } else {
            None
        };
        let close = match toks.get(i + 1) {
            Some(Token::Mark('{')) if w.starts_with("nats_delivery_") => '}',
            Some(Token::Mark('(')) if !w.starts_with("nats_delivery_") => ')',
            _ => {
                i += 1;
                continue;
            }
        };
        let mut j = i + 2;
        let mut expect_label = true;
        while j < toks.len() && toks[j] != Token::Mark(close) {
            match &toks[j] {
                Token::Word(label) if expect_label => {
                    if allowed.as_ref().is_some_and(|a| !a.contains(label)) {
                        problems.push(if close == '}' {
                            format!("label {label} is not a label of {w}")
                        } else {
                            format!(
                                "label {label} in {w} (...) is not a label of the query's metrics"
                            )
                        });
                    }
                    expect_label = false;
                }
                Token::Mark(',') => expect_label = true,
                _ => {}
            }
            j += 1;
        }
        i = j;
    }
    problems
}

/// promtool from PATH; panics with the install hint when it is missing.
fn promtool() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("promtool"))
                .find(|p| p.is_file())
        })
        .expect(
            "promtool is not on PATH: run scripts/install-deps.sh (Debian's prometheus package)",
        )
}

/// Metric names `METRICS.md` lists (counters with `_total`), with their labels.
pub type Documented = BTreeMap<String, BTreeSet<String>>;

/// Problems with `queries`: PromQL that does not parse, and metric or label
/// names not in `documented`. Empty when all is well.
pub fn check_queries(queries: &[Query], documented: &Documented) -> Vec<String> {
    let mut problems = Vec::new();
    let mut rules = String::from("groups:\n  - name: dashboard_queries\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let expr = substitute(&q.expr);
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {}\n",
            serde_json::to_string(&expr).expect("a string encodes")
        ));
        for name in metric_names(&expr) {
            if !documented.contains_key(&name) {
                problems.push(format!("{}: {name} is not listed in METRICS.md", q.place));
            }
        }
        for p in label_problems(&expr, documented) {
            problems.push(format!("{}: {p}", q.place));
        }
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("queries.rules.yml");
    std::fs::write(&file, rules).expect("writing the rule file");
    let out = Command::new(promtool())
        .arg("check")
        .arg("rules")
        .arg(&file)
        .output()
        .expect("running promtool");
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        for (i, q) in queries.iter().enumerate() {
            if text.contains(&format!("\"dashboard:query_{i}\"")) {
                problems.push(format!("{}: does not parse as PromQL: {}", q.place, q.expr));
            }
        }
        problems.push(format!("promtool check rules failed:\n{text}"));
    }
    problems
}

/// Every query of a dashboard: panel targets (rows included) and the
/// selector inside each `label_values(selector, label)` variable (as
/// `count by (label) (selector)`). Shared with the lab (`examples/lab`),
/// which runs these queries against a real Prometheus.
pub fn dashboard_queries(file: &str, dash: &serde_json::Value) -> Vec<Query> {
    fn walk(file: &str, panels: &[serde_json::Value], out: &mut Vec<Query>) {
        for p in panels {
            let title = p["title"].as_str().unwrap_or("?");
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{file}: panel {title:?} has a target without expr"));
                let place = format!("{file}: panel {title:?} query {}", t["refId"]);
                out.push(Query {
                    place,
                    expr: expr.to_string(),
                });
            }
            walk(file, p["panels"].as_array().map_or(&[], |v| v), out);
        }
    }
    let mut out = Vec::new();
    walk(file, dash["panels"].as_array().expect("panels"), &mut out);
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let q = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .expect("variable query");
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or_else(|| {
                panic!(
                    "{file}: variable {} is not label_values(...): {q}",
                    v["name"]
                )
            });
        if let Some((selector, label)) = inner.rsplit_once(',') {
            // Checked as a grouping so that the label must be one of the
            // selected metric's labels, too.
            let place = format!("{file}: variable {}", v["name"]);
            out.push(Query {
                place,
                expr: format!("count by ({}) ({})", label.trim(), selector.trim()),
            });
        }
    }
    out
}

/// The metrics `METRICS.md` lists, with their labels.
pub fn documented() -> Documented {
    nats_test_server::reference::documented()
        .into_iter()
        .map(|(name, doc)| (name, doc.labels.into_iter().collect()))
        .collect()
}
