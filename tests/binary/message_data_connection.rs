//! The connection to `--nats-servers` for message data (timestamp reads,
//! a stream's lost data) is opened only when something reads over it: with
//! only system-account credentials it would be an anonymous connection, the
//! one the cluster Deployment must not open.
use std::process::{Child, Command};
use std::time::Duration;

use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The exporter with `--nats-servers` and `extra`, once its first scrape
/// has polled the server (it connects before it serves).
async fn started(server: &NatsServer, extra: &[&str]) -> Exporter {
    let port = nats_test_server::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", &server.monitor_url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--nats-servers", &server.client_url()])
        .args(extra)
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    let exporter = Exporter(child);
    let url = format!("http://127.0.0.1:{port}/metrics");
    Wait::secs("the exporter's first scrape", 20)
        .every(Duration::from_millis(100))
        .until_async(|| async {
            let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
            text.contains("nats_delivery_up{").then_some(())
        })
        .await;
    exporter
}

fn connections(server: &NatsServer) -> u64 {
    let connz = nats_test_server::http_get(&format!("{}/connz", server.monitor_url()));
    let v: serde_json::Value = serde_json::from_str(&connz).unwrap();
    v["num_connections"].as_u64().unwrap()
}

#[tokio::test]
async fn no_connection_without_message_reads_and_one_with_them() {
    let server = NatsServer::builder().jetstream().start();
    {
        let _off = started(&server, &["--consumer-timestamp-reads", "0"]).await;
        assert_eq!(connections(&server), 0, "reads off: no connection");
    }
    let _on = started(&server, &[]).await;
    Wait::secs("the timestamp reader's connection", 20)
        .every(Duration::from_millis(100))
        .until(|| (connections(&server) == 1).then_some(()))
        .await;
}
