//! Records the commit and the compiler the exporter is built from, for
//! `nats_delivery_exporter_build_info` and `--version`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=NATS_DELIVERY_REVISION");
    let given = std::env::var("NATS_DELIVERY_REVISION")
        .ok()
        .filter(|r| !r.is_empty());
    // Rebuild when the checkout's HEAD or its branch moves (also in a
    // worktree, whose git files are elsewhere), unless the revision is
    // given: then git's files do not matter, and a build of the same
    // sources elsewhere (the Dockerfile's builder) finds this one fresh.
    let branch = output("git", &["symbolic-ref", "-q", "HEAD"]);
    let git_files = ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref());
    for name in git_files.filter(|_| given.is_none()) {
        if let Some(path) = output("git", &["rev-parse", "--git-path", name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let revision = given
        .or_else(|| output("git", &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let rustc_version = output(&rustc, &["--version"])
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=NATS_DELIVERY_REVISION={revision}");
    println!("cargo:rustc-env=NATS_DELIVERY_RUSTC_VERSION={rustc_version}");
}

/// The trimmed standard output of a command that succeeded.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}
