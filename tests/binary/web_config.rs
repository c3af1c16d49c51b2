//! `--web.config.file` (node_exporter's format): /metrics over TLS, mutual
//! TLS, basic authentication with bcrypt hashes, and a real Prometheus
//! scraping over TLS with basic auth.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The exporter with `web_config` written to a file in `dir`; its port.
fn exporter(server: &NatsServer, dir: &Path, web_config: &str) -> (Running, u16) {
    let file = dir.join("web.yml");
    std::fs::write(&file, web_config).unwrap();
    let port = nats_test_server::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", &server.monitor_url(), "--sources", "varz"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--web.config.file", file.to_str().unwrap()])
        .env("NATS_DELIVERY_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = Running(child);
    Wait::secs("the exporter to listen", 20)
        .until_blocking(|| std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.kind()));
    (running, port)
}

fn client(dir: &Path, with_cert: bool) -> reqwest::Client {
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    let mut b = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .timeout(Duration::from_secs(10));
    if with_cert {
        let mut pem = std::fs::read(dir.join("client.pem")).unwrap();
        pem.extend(std::fs::read(dir.join("client.key")).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_and_basic_auth() {
    let server = NatsServer::builder().start();
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let (_e, port) = exporter(
        &server,
        dir.path(),
        &format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_ca_file: ca.pem\n  client_auth_type: RequireAndVerifyClientCert\nbasic_auth_users:\n  prometheus: {hash}\n"
        ),
    );
    let url = format!("https://127.0.0.1:{port}/metrics");
    let good = client(dir.path(), true);
    let r = good
        .get(&url)
        .basic_auth("prometheus", Some("s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("nats_delivery_up"));
    for (user, password) in [("prometheus", "wrong"), ("nobody", "s3cret")] {
        let r = good
            .get(&url)
            .basic_auth(user, Some(password))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{user}:{password}");
    }
    assert_eq!(good.get(&url).send().await.unwrap().status(), 401);
    // Without a client certificate the handshake is refused.
    let no_cert = client(dir.path(), false);
    assert!(no_cert
        .get(&url)
        .basic_auth("prometheus", Some("s3cret"))
        .send()
        .await
        .is_err());
    // Plain HTTP gets no answer.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let answered = plain
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    assert!(!answered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_over_tls_with_basic_auth() {
    let server = NatsServer::builder().start();
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let hash = bcrypt::hash("scrape-pw", 4).unwrap();
    let (_e, port) = exporter(
        &server,
        dir.path(),
        &format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  prom: {hash}\n",
            dir.path().join("server.pem").display(),
            dir.path().join("server.key").display()
        ),
    );
    let prom_port = nats_test_server::free_port();
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: nats-delivery\n    scheme: https\n    tls_config:\n      ca_file: {}\n    basic_auth:\n      username: prom\n      password: scrape-pw\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
        dir.path().join("ca.pem").display()
    );
    let prom_dir = tempfile::tempdir().unwrap();
    let file = prom_dir.path().join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let _prometheus = Running(
        Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                prom_dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg("--log.level=warn")
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (scripts/install-deps.sh installs it)"),
    );
    let query = format!(
        "http://127.0.0.1:{prom_port}/api/v1/query?query=nats_delivery_up%7Bsource%3D%22varz%22%7D"
    );
    Wait::secs("Prometheus to scrape the exporter over TLS", 60)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            let body: serde_json::Value = reqwest::get(&query).await.ok()?.json().await.ok()?;
            let result = body["data"]["result"].as_array()?;
            (result.len() == 1 && result[0]["value"][1] == "1").then_some(())
        })
        .await;
}
