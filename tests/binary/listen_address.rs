//! `--web.listen-address` as exporter-toolkit reads it: `:PORT` (the
//! default's form) serves IPv6 and IPv4 alike, an address only itself.

use nats_test_server::wait::Wait;
use std::process::{Child, Command, Stdio};

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary listening on `listen`, polling nothing reachable.
fn start(listen: &str) -> Running {
    Running(
        Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args(["--monitor-url", "http://127.0.0.1:9", "--sources", "varz"])
            .args(["--web.listen-address", listen])
            .env("NATS_DELIVERY_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `/healthz` at `host` (`127.0.0.1`, `[::1]`), waiting up to 20 s for the
/// exporter to listen there when `wait`; whether it answered 200.
async fn healthz(host: &str, port: u16, wait: bool) -> bool {
    let url = format!("http://{host}:{port}/healthz");
    Wait::secs(format!("{url} to answer"), if wait { 20 } else { 0 })
        .try_until_async(async || reqwest::get(&url).await.map(|r| r.status() == 200))
        .await
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_alone_serves_ipv6_and_ipv4_and_an_address_only_itself() {
    for listen in [":{port}", "[::]:{port}"] {
        let port = nats_test_server::free_port();
        let _e = start(&listen.replace("{port}", &port.to_string()));
        assert!(healthz("[::1]", port, true).await, "{listen} over ::1");
        assert!(
            healthz("127.0.0.1", port, false).await,
            "{listen} over 127.0.0.1"
        );
    }
    let port = nats_test_server::free_port();
    let _e = start(&format!("127.0.0.1:{port}"));
    assert!(healthz("127.0.0.1", port, true).await);
    assert!(!healthz("[::1]", port, false).await, "127.0.0.1 is not ::1");
}

/// The default, as `--help` shows it, is the every-address form.
#[test]
fn the_default_is_every_address() {
    let help = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("[default: :7778]"), "{help}");
}
