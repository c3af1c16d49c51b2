//! Every Prometheus scrape configuration in README.md and docs/*.md that
//! scrapes the exporter uses the job name the alert rules select and
//! `honor_labels: true` (the application reports it re-exports carry their
//! own `instance`): a configuration copied from the docs must not fire
//! `NatsDeliveryExporterAbsent` forever, nor rename the applications'
//! `instance` to `exported_instance`.
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The job the exporter's own alert rules select (`up{job="..."}`).
fn job_the_rules_select() -> String {
    let rules = std::fs::read_to_string(root().join("alerts/exporter.rules.yml")).unwrap();
    let start = rules.find("up{job=\"").expect("an up{job=...} selector") + "up{job=\"".len();
    rules[start..rules[start..].find('"').unwrap() + start].to_string()
}

/// The YAML code blocks of a Markdown file.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => current = Some(String::new()),
            (Some(block), l) if l.starts_with("```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// Each scrape job of a YAML block (a fragment of `scrape_configs` too):
/// its `job_name` and the lines that belong to it.
fn jobs(block: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>, usize)> = Vec::new();
    for line in block.lines() {
        let indent = line.len() - line.trim_start().len();
        // A comment is not part of a value.
        let line = line.split(" #").next().unwrap_or_default();
        if let Some(name) = line.trim_start().strip_prefix("- job_name:") {
            out.push((
                name.trim().trim_matches('"').to_string(),
                Vec::new(),
                indent,
            ));
        } else if let Some((_, lines, job_indent)) = out.last_mut() {
            if line.trim().is_empty() || indent > *job_indent {
                lines.push(line.trim().to_string());
            } else {
                // The block has moved on past the job's entry.
                out.push((String::new(), Vec::new(), usize::MAX));
            }
        }
    }
    out.into_iter()
        .filter(|(name, _, _)| !name.is_empty())
        .map(|(name, lines, _)| (name, lines))
        .collect()
}

/// Whether a job scrapes the exporter: its name says so, or a target is on
/// the exporter's port.
fn scrapes_the_exporter(name: &str, lines: &[String]) -> bool {
    name.contains("nats-delivery") || lines.iter().any(|l| l.contains(":7778"))
}

#[test]
fn every_scrape_of_the_exporter_matches_the_rules_and_honours_labels() {
    let job = job_the_rules_select();
    let mut files = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut seen = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for block in yaml_blocks(&text) {
            for (name, lines) in jobs(&block) {
                if !scrapes_the_exporter(&name, &lines) {
                    continue;
                }
                seen += 1;
                let place = format!("{}: job {name}", file.display());
                assert_eq!(name, job, "{place}: the alert rules select job=\"{job}\"");
                assert!(
                    lines.iter().any(|l| l == "honor_labels: true"),
                    "{place}: needs honor_labels: true"
                );
            }
        }
    }
    // README's and the operators' guide's configurations at least.
    assert!(
        seen >= 3,
        "only {seen} scrape configurations of the exporter found"
    );
}

#[test]
fn jobs_are_read_with_their_own_lines_only() {
    let block = "scrape_configs:\n  - job_name: a\n    honor_labels: true\n  - job_name: b\n    static_configs:\n      - targets: [\"x:7778\"]\nrule_files:\n  - r.yml\n";
    let found = jobs(block);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].0, "a");
    assert!(found[0].1.contains(&"honor_labels: true".to_string()));
    assert_eq!(found[1].0, "b");
    assert!(!found[1].1.contains(&"honor_labels: true".to_string()));
    assert!(!found[1].1.iter().any(|l| l.contains("r.yml")));
    assert!(scrapes_the_exporter(&found[1].0, &found[1].1));
}
