//! Passwords written into URLs (`--monitor-url`, `--nats-servers`) never
//! appear in the binary's log, at any level, nor in what it serves: the
//! client library's own debug lines included.
use crate::common;

use std::process::{Command, Stdio};

use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

#[tokio::test]
async fn passwords_in_urls_stay_out_of_the_log_and_pages() {
    let server = NatsServer::builder()
        .config("authorization { user: watcher, password: s3cretNATS }")
        .start();
    let closed = common::fake_endpoint::ClosedPort::new();
    let closed_port = closed.addr.port();
    let port = nats_test_server::free_port();
    let nats_url = server
        .client_url()
        .replace("nats://", "nats://watcher:s3cretNATS@");
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args([
            "--monitor-url",
            &format!("http://admin:s3cretMON@127.0.0.1:{closed_port}"),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--nats-servers",
            &nats_url,
            "--advisories",
        ])
        .env("NATS_DELIVERY_LOG", "debug")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the log as it comes: a full pipe would stall the exporter.
    let mut child = child;
    let mut stderr = child.stderr.take().unwrap();
    let log_reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut log);
        log
    });
    let guard = Killed(Some(child));
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    // The password reached the server: the listener logged in with it.
    let text = Wait::secs("the advisory listener", 20)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async {
            let text = http
                .get(format!("{base}/metrics"))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            (value(
                &text,
                "nats_delivery_advisory_listener_up",
                &[("account", "$G")],
            ) == Some(1.0))
            .then_some(text)
        })
        .await;
    let landing = http.get(&base).send().await.unwrap().text().await.unwrap();
    guard.stop();
    let log = log_reader.join().unwrap();
    assert!(log.contains("serving /metrics"), "{log}");
    assert!(log.contains("xxxxx"), "{log}");
    for secret in ["s3cretNATS", "s3cretMON"] {
        for (what, seen) in [
            ("log", &*log),
            ("metrics", &text),
            ("landing page", &landing),
        ] {
            assert!(!seen.contains(secret), "{secret} in the {what}");
        }
    }
}

struct Killed(Option<std::process::Child>);

impl Killed {
    fn stop(mut self) {
        let mut child = self.0.take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
