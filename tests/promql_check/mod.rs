//! Shared by the tests that read `dashboards/` and `alerts/`: where the
//! repository is, the metric names a PromQL query uses, and a check of
//! queries against `promtool` and `METRICS.md`.
// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;
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

/// The metric names (`nats_delivery_...`) a query uses, string literals skipped.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if word.starts_with("nats_delivery_") {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
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

/// Problems with `queries`: PromQL that does not parse, and metric names not
/// in `documented`. Empty when all is well.
pub fn check_queries(queries: &[Query], documented: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut rules = String::from("groups:\n  - name: dashboard_queries\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let expr = substitute(&q.expr);
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {}\n",
            serde_json::to_string(&expr).expect("a string encodes")
        ));
        for name in metric_names(&expr) {
            if !documented.contains(&name) {
                problems.push(format!("{}: {name} is not listed in METRICS.md", q.place));
            }
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

/// The metric names `METRICS.md` lists (counters with `_total`).
pub fn documented_names() -> BTreeSet<String> {
    nats_test_server::reference::documented()
        .into_keys()
        .collect()
}
