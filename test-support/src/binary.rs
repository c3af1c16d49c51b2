//! Where the `nats-server` binary of a version is, and versions compared.

use std::path::{Path, PathBuf};

/// The server version used when none is asked for.
pub const DEFAULT_VERSION: &str = "2.15.1";

/// Set (to anything) for the tests that `scripts/test.sh` runs once instead
/// of once per server version: a test among them that asks for a server or
/// for the version under test fails, so none is run once by mistake.
pub const NO_SERVER_ENV: &str = "NATS_TEST_NO_SERVER";

/// Panics when [`NO_SERVER_ENV`] is set.
fn refuse_when_no_server(what: &str) {
    if std::env::var_os(NO_SERVER_ENV).is_some() {
        panic!(
            "{NO_SERVER_ENV} is set, but this test asks for {what}: it depends on the server \
             version and must run once per version (remove it from scripts/test.sh's no_server)"
        );
    }
}

/// The server version the suites run against: `$NATS_SERVER_VERSION` (a
/// `.tools/` name such as "2.12.8", or "debian"), else [`DEFAULT_VERSION`].
/// `scripts/test.sh` runs the real-server suites once per supported version.
pub fn version_under_test() -> String {
    refuse_when_no_server("the server version under test");
    std::env::var("NATS_SERVER_VERSION").unwrap_or_else(|_| DEFAULT_VERSION.to_string())
}

/// Path of the workspace root (where `.tools/` lives).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support lives one level below the workspace root")
        .to_path_buf()
}

/// Finds the nats-server binary for `version` ("debian" means Debian's 2.9.10).
///
/// Panics with the install command when nothing is found: a test that needs a
/// server must not pass without one.
pub fn binary(version: Option<&str>) -> PathBuf {
    refuse_when_no_server("a nats-server");
    if version.is_none() {
        if let Ok(p) = std::env::var("NATS_SERVER_BIN") {
            return PathBuf::from(p);
        }
    }
    let env_version = std::env::var("NATS_SERVER_VERSION").ok();
    let v = version
        .or(env_version.as_deref())
        .unwrap_or(DEFAULT_VERSION);
    let tools = workspace_root().join(".tools");
    let candidate = if v == "debian" {
        tools.join("nats-server-debian")
    } else {
        tools.join(format!("nats-server-{v}/bin/nats-server"))
    };
    if candidate.exists() {
        return candidate;
    }
    if version.is_none() {
        if let Some(p) = find_on_path("nats-server") {
            return p;
        }
    }
    panic!(
        "nats-server {v} not found at {}; run scripts/install-deps.sh (or set NATS_SERVER_BIN)",
        candidate.display()
    );
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// A server version ("2.10.4", "2.12.0-RC.1") as numbers, for comparing
/// with `>=`: `[2, 10, 4]`; a part that is not a number counts as 0.
pub fn version_numbers(version: &str) -> Vec<u64> {
    version.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}
