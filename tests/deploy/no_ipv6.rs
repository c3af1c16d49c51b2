//! The image on a machine without IPv6: a seccomp filter makes every IPv6
//! socket fail as a kernel booted with `ipv6.disable=1` does (EAFNOSUPPORT),
//! and `:PORT`, the default's form, listens on IPv4 alone, saying so once.

use nats_test_server::free_port;
use nats_test_server::wait::Wait;

use crate::artifact;
use crate::container::{podman, podman_command, RUN_OPTIONS};

/// Allows every system call but `socket(AF_INET6, ...)`, which fails with
/// EAFNOSUPPORT (97 on Linux; AF_INET6 is 10).
const NO_IPV6: &str = r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
  {"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": 97,
   "args": [{"index": 0, "value": 10, "op": "SCMP_CMP_EQ"}]}]}"#;

/// The container, removed when dropped.
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = podman_command().args(["rm", "-f", &self.0]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image and root: scripts/test-deploy.sh"]
async fn without_ipv6_every_address_is_every_ipv4_address_and_the_log_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("no-ipv6.json");
    std::fs::write(&profile, NO_IPV6).unwrap();
    let port = free_port();
    let name = format!(
        "nats-delivery-exporter-no-ipv6-{}-{port}",
        std::process::id()
    );
    let mut args = vec!["run", "-d", "--name", &name];
    args.extend(RUN_OPTIONS);
    let seccomp = format!("seccomp={}", profile.display());
    let listen = format!("NATS_DELIVERY_LISTEN=:{port}");
    let image = artifact("DEPLOY_IMAGE");
    args.extend(["--security-opt", &seccomp, "-e", &listen]);
    args.extend(["-e", "NATS_DELIVERY_MONITOR_URL=http://127.0.0.1:9", &image]);
    podman(&args);
    let _removed = Removed(name.clone());
    let url = format!("http://127.0.0.1:{port}/healthz");
    Wait::secs("the container's /healthz over IPv4", 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async {
            let r = reqwest::get(&url).await.ok()?;
            (r.status() == 200).then_some(())
        })
        .await;
    let logs = podman(&["logs", &name]);
    let log = String::from_utf8_lossy(&logs.stderr).into_owned();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("no IPv6 on this machine: listening on IPv4 only"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].contains(&format!("port={port}")), "{log}");
}
