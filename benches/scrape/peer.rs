//! A peer exporter measured in the same rounds as this one: `PEER_CMD`, a
//! shell command that starts prometheus-nats-exporter or nats-surveyor
//! (built by whoever runs the benchmark; no peer's code is in this
//! repository), with `{monitor_url}`, `{nats_url}` and `{port}` replaced by
//! the server's monitoring URL, its client URL and a free port on which the
//! peer serves `PEER_METRICS_PATH` (default `/metrics`). For example:
//!
//! ```text
//! PEER_CMD='prometheus-nats-exporter -jsz=all -port {port} {monitor_url}'
//! PEER_CMD='nats-surveyor -s {nats_url} --creds sys.creds -p {port}'
//! ```

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nats_test_server::NatsServer;

/// The peer's process and where it serves.
pub(crate) struct Peer {
    child: Child,
    /// Its process id (the command is run with `exec`, so the shell's).
    pub(crate) pid: u32,
    /// Its metrics URL.
    pub(crate) url: String,
    /// The command as run.
    pub(crate) command: String,
}

impl Peer {
    /// Starts the peer of `PEER_CMD` against `server`; `None` without one.
    pub(crate) fn start(server: &NatsServer) -> Option<Peer> {
        let template = std::env::var("PEER_CMD").ok()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let command = template
            .replace("{monitor_url}", &server.monitor_url())
            .replace("{nats_url}", &server.client_url())
            .replace("{port}", &port.to_string());
        let child = Command::new("sh")
            .args(["-c", &format!("exec {command}")])
            .spawn()
            .unwrap_or_else(|e| panic!("PEER_CMD {command}: {e}"));
        let path = std::env::var("PEER_METRICS_PATH").unwrap_or_else(|_| "/metrics".into());
        Some(Peer {
            pid: child.id(),
            child,
            url: format!("http://127.0.0.1:{port}{path}"),
            command,
        })
    }

    /// Waits up to 60 s for the peer's first answer.
    pub(crate) async fn wait_up(&self, http: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answered = http.get(&self.url).send().await;
            if answered.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the peer ({}) did not answer {} within 60 s",
                self.command,
                self.url
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the peer.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
