//! The ways the exporter is deployed: the container image, the .deb with its
//! systemd unit, and the Kubernetes objects under deploy/kubernetes; and
//! scripts/install-deps.sh, which prepares a machine.
//!
//! The tests marked `#[ignore]` exercise built artifacts and need root
//! (rootful podman, dpkg): `scripts/test-deploy.sh` builds the image and the
//! .deb and runs them (`cargo nextest run --test deploy --run-ignored only`),
//! naming the artifacts in `DEPLOY_IMAGE` and `DEPLOY_DEB`. The others check
//! the repository's files and run with the rest of the suite.
#[path = "../common/mod.rs"]
mod common;
mod container;
mod debian;
mod dns;
mod image_build;
mod install_deps;
mod kubernetes;
mod losses;
mod no_ipv6;
mod release;

use std::path::{Path, PathBuf};

/// The repository's root.
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the repository, read whole.
fn read(relative: &str) -> String {
    let path: PathBuf = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the repository's files in `dir` ending with `suffix`, sorted.
fn repo_files(dir: &str, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    names.sort();
    names
}

/// A built artifact named by `variable`; an ignored test run without it
/// fails rather than passing unexercised.
fn artifact(variable: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is not set: scripts/test-deploy.sh builds the artifacts and runs these tests")
    })
}

/// One scrape of an exporter's `/metrics`, or None while it does not answer.
async fn scrape(url: &str) -> Option<String> {
    let reply = reqwest::get(url).await.ok()?;
    reply.error_for_status().ok()?.text().await.ok()
}
