//! Runs `promtool` (Debian's prometheus package; scripts/install-deps.sh installs it).

use std::io::Write;
use std::process::{Command, Stdio};

/// Asserts that `promtool check metrics` accepts `exposition` without a
/// single remark. Panics with promtool's words and the text otherwise, and
/// when promtool is missing: a check that cannot run must not pass.
pub fn assert_metrics_clean(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool on PATH (scripts/install-deps.sh installs it)");
    child
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool output");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics:\n{said}\non:\n{exposition}"
    );
}

/// Runs `promtool test rules` (from PATH) on the unit-test file `test`,
/// written beside the rule files `rules` (name, text) in a temporary
/// directory; its success and what it said. Panics when promtool is
/// missing: a check that cannot run must not pass.
pub fn test_rules(rules: &[(&str, &str)], test: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, text) in rules {
        std::fs::write(dir.path().join(name), text).expect("writing a rule file");
    }
    std::fs::write(dir.path().join("made.test.yml"), test).expect("writing the test");
    let out = Command::new("promtool")
        .args(["test", "rules", "made.test.yml"])
        .current_dir(dir.path())
        .output()
        .expect("promtool on PATH (scripts/install-deps.sh installs it)");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}
