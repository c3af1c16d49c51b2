//! The lab copy of the repository's alert rules. Expressions and thresholds
//! are the repository's, unchanged; only each `for:` is shortened to
//! [`LAB_FOR`], so that an alert that must hold for minutes in production
//! fires within seconds here. The report lists every shortened duration.

use std::path::Path;

use anyhow::Context;

/// The `for:` of every rule in the lab.
pub const LAB_FOR: &str = "3s";

/// One shortened duration: the alert and its `for:` in the repository.
pub struct Shortened {
    /// Alert name.
    pub alert: String,
    /// Its `for:` in `alerts/`.
    pub original: String,
}

/// The lab copy of the rules.
pub struct LabRules {
    /// Every alert in `alerts/*.rules.yml`.
    pub alerts: Vec<String>,
    /// The `for:` durations that were shortened.
    pub shortened: Vec<Shortened>,
}

/// Copies `alerts/*.rules.yml` from `repo` into `dest` with every `for:`
/// replaced by [`LAB_FOR`].
pub fn copy_rules(repo: &Path, dest: &Path) -> anyhow::Result<LabRules> {
    std::fs::create_dir_all(dest)?;
    let mut shortened = Vec::new();
    let mut alerts = Vec::new();
    let alerts_dir = repo.join("alerts");
    let mut files: Vec<_> = std::fs::read_dir(&alerts_dir)
        .with_context(|| format!("reading {}", alerts_dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    for path in files {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !name.ends_with(".rules.yml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        alerts.extend(
            text.lines()
                .filter_map(|l| l.trim_start().strip_prefix("- alert:"))
                .map(|a| a.trim().to_string()),
        );
        let (copy, found) = shorten(&text);
        shortened.extend(found);
        std::fs::write(dest.join(name.as_ref()), copy)?;
    }
    anyhow::ensure!(
        !shortened.is_empty(),
        "no `for:` found in alerts/*.rules.yml"
    );
    Ok(LabRules { alerts, shortened })
}

/// The rule text with each `for: <d>` line set to [`LAB_FOR`], and what was
/// shortened.
fn shorten(text: &str) -> (String, Vec<Shortened>) {
    let mut alert = String::new();
    let mut found = Vec::new();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            alert = name.trim().to_string();
        }
        if let Some(d) = trimmed.strip_prefix("for:") {
            let indent = &line[..line.len() - trimmed.len()];
            found.push(Shortened {
                alert: alert.clone(),
                original: d.trim().to_string(),
            });
            out.push_str(&format!("{indent}for: {LAB_FOR}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    (out, found)
}
