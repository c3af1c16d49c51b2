//! Keeps `METRICS.md` in step with real exposition output.
//!
//! `METRICS.md` lists every metric in tables whose first four columns are
//! `| name | type | labels | help |` (more columns may follow). `name` is what
//! a query uses (a counter's name ends in `_total`), `labels` is a
//! comma-separated list in backticks or plain, `help` is the exact help text.

use std::collections::BTreeMap;

/// One documented metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricDoc {
    /// Name as queried (`..._total` for counters).
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `info`.
    pub kind: String,
    /// Label names, sorted.
    pub labels: Vec<String>,
    /// The exact help text.
    pub help: String,
}

fn cell(s: &str) -> String {
    s.trim().trim_matches('`').trim().to_string()
}

/// Parses every metric row of `METRICS.md` at the workspace root.
pub fn documented() -> BTreeMap<String, MetricDoc> {
    let path = crate::workspace_root().join("METRICS.md");
    let text = std::fs::read_to_string(&path).expect("METRICS.md at the workspace root");
    parse(&text)
}

/// The metric rows of `METRICS.md` under the `## ` headings named in `sections`.
pub fn documented_in(sections: &[&str]) -> BTreeMap<String, MetricDoc> {
    let path = crate::workspace_root().join("METRICS.md");
    let text = std::fs::read_to_string(&path).expect("METRICS.md at the workspace root");
    let mut wanted = String::new();
    let mut keep = false;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            keep = sections.contains(&heading.trim());
        }
        if keep {
            wanted.push_str(line);
            wanted.push('\n');
        }
    }
    parse(&wanted)
}

/// Parses metric rows out of Markdown text.
pub fn parse(text: &str) -> BTreeMap<String, MetricDoc> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with("| `nats_delivery_") && !line.starts_with("| `process_") {
            continue;
        }
        let cols: Vec<&str> = line.trim_matches('|').split('|').collect();
        assert!(
            cols.len() >= 4,
            "METRICS.md row with fewer than 4 columns: {line}"
        );
        let mut labels: Vec<String> = cell(cols[2])
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_string())
            .filter(|l| !l.is_empty() && l != "-")
            .collect();
        labels.sort();
        let doc = MetricDoc {
            name: cell(cols[0]),
            kind: cell(cols[1]),
            labels,
            help: cols[3].trim().to_string(),
        };
        assert!(
            out.insert(doc.name.clone(), doc).is_none(),
            "METRICS.md lists {} twice",
            cell(cols[0])
        );
    }
    out
}

/// Reads the metrics out of classic Prometheus text exposition: for every
/// sample name, its family's type, help and the union of label names seen.
pub fn exposed(text: &str) -> BTreeMap<String, MetricDoc> {
    let mut family_kind = BTreeMap::new();
    let mut family_help = BTreeMap::new();
    let mut out: BTreeMap<String, MetricDoc> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (n, k) = rest.split_once(' ').expect("TYPE line");
            family_kind.insert(n.to_string(), k.to_string());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (n, h) = rest.split_once(' ').unwrap_or((rest, ""));
            family_help.insert(
                n.to_string(),
                h.trim_end_matches('.').to_string() + if h.ends_with('.') { "." } else { "" },
            );
        } else if !line.starts_with('#') && !line.is_empty() {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = &line[..name_end];
            let family = family_kind
                .keys()
                .filter(|f| name.starts_with(f.as_str()))
                .max_by_key(|f| f.len())
                .cloned()
                .unwrap_or_else(|| name.to_string());
            let mut labels = Vec::new();
            if line[name_end..].starts_with('{') {
                let body = &line[name_end + 1..line.rfind('}').expect("closing brace")];
                let mut rest = body;
                while let Some(eq) = rest.find("=\"") {
                    labels.push(rest[..eq].trim_start_matches(',').to_string());
                    // skip the quoted value, honouring escapes
                    let mut chars = rest[eq + 2..].char_indices();
                    let mut end = 0;
                    while let Some((i, c)) = chars.next() {
                        if c == '\\' {
                            chars.next();
                        } else if c == '"' {
                            end = eq + 2 + i + 1;
                            break;
                        }
                    }
                    rest = &rest[end..];
                }
            }
            let entry = out.entry(name.to_string()).or_insert_with(|| MetricDoc {
                name: name.to_string(),
                kind: family_kind.get(&family).cloned().unwrap_or_default(),
                labels: Vec::new(),
                help: family_help.get(&family).cloned().unwrap_or_default(),
            });
            for l in labels {
                if !entry.labels.contains(&l) {
                    entry.labels.push(l);
                }
            }
            entry.labels.sort();
        }
    }
    out
}

/// Asserts that every metric in `exposition` is listed in `METRICS.md` with
/// the same type, label names and help text. Returns the names checked.
pub fn assert_documented(exposition: &str) -> Vec<String> {
    let docs = documented();
    let mut problems = Vec::new();
    let seen = exposed(exposition);
    for (name, got) in &seen {
        if name.ends_with("_created") {
            continue;
        }
        match docs.get(name) {
            None => problems.push(format!("{name}: not in METRICS.md ({got:?})")),
            Some(doc) if doc != got => problems.push(format!(
                "{name}: METRICS.md says {doc:?}, output says {got:?}"
            )),
            Some(_) => {}
        }
    }
    assert!(
        problems.is_empty(),
        "METRICS.md out of step:\n{}",
        problems.join("\n")
    );
    seen.into_keys().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_and_exposition_alike() {
        let md = "| name | type | labels | help |\n|---|---|---|---|\n| `nats_delivery_x_total` | counter | `server`, `kind` | Things seen. |\n";
        let text = "# HELP nats_delivery_x Things seen.\n# TYPE nats_delivery_x counter\nnats_delivery_x_total{server=\"a\\\"b\",kind=\"c\"} 3\n";
        let d = parse(md);
        let e = exposed(text);
        assert_eq!(d["nats_delivery_x_total"], e["nats_delivery_x_total"]);
        assert_eq!(e["nats_delivery_x_total"].labels, vec!["kind", "server"]);
    }
}
