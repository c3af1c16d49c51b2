//! `podman build .` from the repository root (the Dockerfile's two stages,
//! its builder stood in for by an image made on this machine) and
//! scripts/build-image.sh (a static binary built beforehand in place of the
//! first stage) give the same image: the same files with the same modes and
//! owners, the same settings and labels, and a binary that reports the same
//! version, revision and compiler.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::artifact;
use crate::container::podman_text;

/// An image's root directory, mounted until dropped.
struct Mounted(String, PathBuf);

impl Mounted {
    fn new(image: &str) -> Mounted {
        let root = podman_text(&["image", "mount", image]);
        Mounted(image.to_string(), PathBuf::from(root))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = crate::container::podman_command()
            .args(["image", "unmount", &self.0])
            .output();
    }
}

/// Every entry under `root`: its kind and mode, owner, and for a symlink
/// its target, for a file its size (the binary's size is left out: two
/// builds of one source differ in it).
fn entries(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.permissions().mode();
            let what = if meta.is_dir() {
                pending.push(path.clone());
                "dir".to_string()
            } else if meta.file_type().is_symlink() {
                format!("link to {}", std::fs::read_link(&path).unwrap().display())
            } else if name == "usr/bin/nats-delivery-exporter" {
                "file".to_string()
            } else {
                format!("file of {} bytes", meta.len())
            };
            out.insert(
                name,
                format!("{what}, mode {mode:o}, {}:{}", meta.uid(), meta.gid()),
            );
        }
    }
    out
}

/// The settings a container takes from the image.
fn config(image: &str) -> serde_json::Value {
    let inspect = podman_text(&["image", "inspect", "--format", "{{json .Config}}", image]);
    let mut config: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    // podman's record of the build's own steps, not a setting.
    config.as_object_mut().unwrap().remove("History");
    config
}

fn version(binary: &Path) -> String {
    let out = Command::new(binary).arg("--version").output().unwrap();
    assert!(out.status.success(), "{}", binary.display());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs both images: scripts/test-deploy.sh"]
fn the_root_build_and_build_image_sh_give_the_same_image() {
    let (scripted, root) = (artifact("DEPLOY_IMAGE"), artifact("DEPLOY_ROOT_IMAGE"));
    let config_of_root = config(&root);
    assert_eq!(config_of_root, config(&scripted));
    let label = |name: &str| {
        config_of_root["Labels"][format!("org.opencontainers.image.{name}")]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // `created` as RFC 3339 in UTC (2026-12-05T06:00:00Z).
    let created = label("created");
    assert!(
        created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "created: {created:?}"
    );
    let (a, b) = (Mounted::new(&scripted), Mounted::new(&root));
    assert_eq!(entries(&a.1), entries(&b.1));
    let bundle = "etc/ssl/certs/ca-certificates.crt";
    assert_eq!(
        std::fs::read(a.1.join(bundle)).unwrap(),
        std::fs::read(b.1.join(bundle)).unwrap()
    );
    let binary = "usr/bin/nats-delivery-exporter";
    let reported = version(&a.1.join(binary));
    assert_eq!(reported, version(&b.1.join(binary)));
    // `nats-delivery-exporter 0.1.0 (revision <revision>, rustc ...)`.
    let revision = label("revision");
    assert!(
        !revision.is_empty() && reported.contains(&format!("(revision {revision},")),
        "label {revision:?}, binary {reported:?}"
    );
    // Both static: no loader named.
    for root in [&a.1, &b.1] {
        let headers = Command::new("readelf")
            .args(["-lW"])
            .arg(root.join(binary))
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&headers.stdout).contains("INTERP"));
    }
}
