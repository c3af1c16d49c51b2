//! One version everywhere: the crate's, the binary's `--version`, the
//! CHANGELOG's first release section, and the image and .deb names the
//! README's Install section gives (the image's label is checked on the
//! built image, in `container`).

use std::process::Command;

use crate::read;

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[test]
fn the_binary_reports_the_crate_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    // Then the revision and compiler, in parentheses.
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with(&format!("nats-delivery-exporter {VERSION} (revision ")),
        "{stdout}"
    );
}

/// `docker build .` without build arguments labels the image with the
/// Dockerfile's default version (scripts/build-image.sh passes the binary's).
#[test]
fn the_dockerfile_s_default_version_is_this_version() {
    let dockerfile = read("Dockerfile");
    let defaults: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("ARG VERSION="))
        .collect();
    assert_eq!(defaults, [VERSION]);
}

#[test]
fn the_changelog_s_first_release_section_is_this_version() {
    let changelog = read("CHANGELOG.md");
    let first = changelog
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .find(|heading| heading.starts_with(|c: char| c.is_ascii_digit()))
        .expect("a `## <version>` section in CHANGELOG.md");
    let version = first.split_whitespace().next().unwrap();
    assert_eq!(version, VERSION, "CHANGELOG.md: {first}");
}

/// Versions written after `nats-delivery-exporter:` (an image) or
/// `nats-delivery-exporter_` (a .deb) in `text`.
fn named_versions(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for marker in ["nats-delivery-exporter:", "nats-delivery-exporter_"] {
        for (at, _) in text.match_indices(marker) {
            let rest = &text[at + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let version = rest[..end].trim_end_matches('.');
            if !version.is_empty() {
                out.push(version);
            }
        }
    }
    out
}

#[test]
fn the_install_instructions_name_this_version() {
    let readme = read("README.md");
    let start = readme.find("\n## Install\n").expect("an Install section");
    let end = readme[start + 1..]
        .find("\n## ")
        .map_or(readme.len(), |e| start + 1 + e);
    let install = &readme[start..end];
    let end_of_install = readme.find("\n## Running the exporter\n").unwrap();
    assert!(
        start < end_of_install,
        "Install comes before Running the exporter"
    );
    let deploy = read("deploy/README.md");
    for (file, text) in [
        ("README.md", install),
        ("deploy/README.md", deploy.as_str()),
    ] {
        let versions = named_versions(text);
        assert!(!versions.is_empty(), "{file} names no image or package");
        for v in versions {
            assert_eq!(v, VERSION, "{file} names version {v}");
        }
    }
}
