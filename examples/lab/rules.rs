//! The lab copy of the repository's alert rules. Thresholds are the
//! repository's, unchanged, but for one: each `for:` is shortened to
//! [`LAB_FOR`], so that an alert that must hold for minutes in production
//! fires within seconds here, the few alerts whose expressions themselves
//! look minutes back get those windows scaled down ([`LAB_WINDOWS`]), and
//! the one threshold in seconds of lag no lab run reaches is scaled the same
//! way ([`LAB_THRESHOLDS`]). The report lists every shortened duration,
//! window and threshold.

use std::path::Path;

use anyhow::Context;

/// The `for:` of every rule in the lab.
pub const LAB_FOR: &str = "3s";

/// Range windows and offsets scaled down in the lab, for alerts whose
/// expressions need more history than a lab run has: (alert, production
/// window, lab window). Every `[<production>]` and `offset <production>` in
/// the alert's expression becomes the lab window; the lab stops with an
/// error if the alert no longer has such a window.
pub const LAB_WINDOWS: &[(&str, &str, &str)] = &[("NatsJetStreamConsumerStuck", "10m", "20s")];

/// Thresholds in seconds of time that a lab run cannot reach in production
/// size, scaled like the windows: (alert, production text, lab text) in the
/// alert's expression. A consumer 5 minutes behind takes 5 minutes to make;
/// the lab's lagging consumer is 10 s behind within seconds, and the lab's
/// stream runs out of room in 15 s, not 30 minutes.
pub const LAB_THRESHOLDS: &[(&str, &str, &str)] = &[
    (
        "NatsJetStreamConsumerDeliveryLagHigh",
        "* 0 + 300",
        "* 0 + 10",
    ),
    ("NatsJetStreamRemovalForecast", ") < 1800", ") < 20"),
];

/// Alerts whose `for:` the lab keeps as it is: the page for loss that goes
/// on must not fire on the lab's single events (its `for` is what tells a
/// sustained loss from one event, alerts/tests/loss.test.yml tests that),
/// so in the lab it never fires.
pub const LAB_KEEPS_FOR: &[&str] = &["NatsDeliveryLossSustained"];

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
    /// The [`LAB_WINDOWS`] and [`LAB_THRESHOLDS`] applied: (alert,
    /// production text, lab text).
    pub windows: Vec<(String, String, String)>,
}

/// Copies `alerts/*.rules.yml` from `repo` into `dest` with every `for:`
/// replaced by [`LAB_FOR`] and the [`LAB_WINDOWS`] scaled down.
pub fn copy_rules(repo: &Path, dest: &Path) -> anyhow::Result<LabRules> {
    std::fs::create_dir_all(dest)?;
    let mut shortened = Vec::new();
    let mut windows = Vec::new();
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
        let (copy, found, scaled) = shorten(&text);
        shortened.extend(found);
        windows.extend(scaled);
        std::fs::write(dest.join(name.as_ref()), copy)?;
    }
    anyhow::ensure!(
        !shortened.is_empty(),
        "no `for:` found in alerts/*.rules.yml"
    );
    for (alert, from, _) in LAB_WINDOWS {
        anyhow::ensure!(
            windows.iter().any(|(a, _, _)| a == alert),
            "alert {alert} has no [{from}] window or offset {from} any more: update LAB_WINDOWS in examples/lab/rules.rs"
        );
    }
    for (alert, from, _) in LAB_THRESHOLDS {
        anyhow::ensure!(
            windows.iter().any(|(a, f, _)| a == alert && f == from),
            "alert {alert} has no `{from}` any more: update LAB_THRESHOLDS in examples/lab/rules.rs"
        );
    }
    Ok(LabRules {
        alerts,
        shortened,
        windows,
    })
}

/// The rule text with each `for: <d>` line set to [`LAB_FOR`] and the
/// [`LAB_WINDOWS`] of its alerts scaled; what was shortened, and the windows
/// that were scaled.
fn shorten(text: &str) -> (String, Vec<Shortened>, Vec<(String, String, String)>) {
    let mut alert = String::new();
    let mut found = Vec::new();
    let mut scaled: Vec<(String, String, String)> = Vec::new();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            alert = name.trim().to_string();
        }
        let kept = LAB_KEEPS_FOR.contains(&alert.as_str());
        if let (Some(d), false) = (trimmed.strip_prefix("for:"), kept) {
            let indent = &line[..line.len() - trimmed.len()];
            found.push(Shortened {
                alert: alert.clone(),
                original: d.trim().to_string(),
            });
            out.push_str(&format!("{indent}for: {LAB_FOR}\n"));
            continue;
        }
        let mut line = line.to_string();
        // Comments keep the production numbers; only the expression changes.
        if !trimmed.starts_with('#') {
            for (_, from, to) in LAB_THRESHOLDS.iter().filter(|(a, _, _)| *a == alert) {
                let scaled_line = line.replace(from, to);
                if scaled_line != line {
                    scaled.push((alert.clone(), from.to_string(), to.to_string()));
                }
                line = scaled_line;
            }
            for (_, from, to) in LAB_WINDOWS.iter().filter(|(a, _, _)| *a == alert) {
                let scaled_line = line
                    .replace(&format!("[{from}]"), &format!("[{to}]"))
                    .replace(&format!("offset {from}"), &format!("offset {to}"));
                if scaled_line != line && !scaled.iter().any(|(a, _, _)| *a == alert) {
                    scaled.push((alert.clone(), from.to_string(), to.to_string()));
                }
                line = scaled_line;
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    (out, found, scaled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lab copy differs from the repository's rules only in the `for:`
    /// lines and the listed windows: put those back and the texts are equal.
    #[test]
    fn the_lab_copy_differs_only_in_durations_and_listed_windows() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dest = tempfile::tempdir().unwrap();
        let rules = copy_rules(repo, dest.path()).unwrap();
        assert_eq!(
            rules.windows.len(),
            LAB_WINDOWS.len() + LAB_THRESHOLDS.len()
        );
        for entry in std::fs::read_dir(repo.join("alerts")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if !name.ends_with(".rules.yml") {
                continue;
            }
            let original = std::fs::read_to_string(&path).unwrap();
            let copy = std::fs::read_to_string(dest.path().join(&name)).unwrap();
            let mut alert = String::new();
            let mut restored = String::new();
            for line in copy.lines() {
                let trimmed = line.trim_start();
                if let Some(a) = trimmed.strip_prefix("- alert:") {
                    alert = a.trim().to_string();
                }
                let mut line = line.to_string();
                if trimmed.starts_with("for:") && !LAB_KEEPS_FOR.contains(&alert.as_str()) {
                    let s = rules.shortened.iter().find(|s| s.alert == alert).unwrap();
                    line = line.replace(LAB_FOR, &s.original);
                }
                for (_, from, to) in LAB_THRESHOLDS.iter().filter(|(a, _, _)| *a == alert) {
                    line = line.replace(to, from);
                }
                for (_, from, to) in LAB_WINDOWS.iter().filter(|(a, _, _)| *a == alert) {
                    line = line
                        .replace(&format!("[{to}]"), &format!("[{from}]"))
                        .replace(&format!("offset {to}"), &format!("offset {from}"));
                }
                restored.push_str(&line);
                restored.push('\n');
            }
            assert_eq!(restored, original, "{name}");
        }
        let stuck = std::fs::read_to_string(dest.path().join("pressure.rules.yml")).unwrap();
        assert!(
            stuck.contains("[20s]") && stuck.contains("offset 20s"),
            "{stuck}"
        );
    }

    #[test]
    fn a_listed_window_that_is_gone_stops_the_lab() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join("alerts")).unwrap();
        let rule = "groups:\n  - name: g\n    rules:\n      - alert: NatsJetStreamConsumerStuck\n        expr: changes(x[15m]) == 0\n        for: 5m\n";
        std::fs::write(repo.path().join("alerts/p.rules.yml"), rule).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = copy_rules(repo.path(), dest.path()).err().unwrap();
        assert!(err.to_string().contains("update LAB_WINDOWS"), "{err}");
    }

    #[test]
    fn a_listed_threshold_that_is_gone_stops_the_lab() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join("alerts")).unwrap();
        let rule = "groups:\n  - name: g\n    rules:\n      - alert: NatsJetStreamConsumerStuck\n        expr: changes(x[10m]) == 0 unless x offset 10m\n        for: 5m\n      - alert: NatsJetStreamConsumerDeliveryLagHigh\n        expr: max(lag) > 600\n        for: 5m\n";
        std::fs::write(repo.path().join("alerts/p.rules.yml"), rule).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = copy_rules(repo.path(), dest.path()).err().unwrap();
        assert!(err.to_string().contains("update LAB_THRESHOLDS"), "{err}");
    }
}
