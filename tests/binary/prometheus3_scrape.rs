//! Prometheus 3 (`.tools/prometheus`, built by scripts/install-deps.sh)
//! scrapes the exporter binary with README's scrape block, as written but for
//! the target's address and the rules' path, once with its default
//! `scrape_protocols` (it asks for OpenMetrics first) and once text only
//! (`[PrometheusText0.0.4]`). Prometheus 3 refuses a reply whose
//! Content-Type it cannot read, and reads OpenMetrics' `_created` lines as
//! no samples. Between the two stands a recording proxy, so the test sees
//! what Prometheus asked for and the very reply it got: the target is up
//! with no scrape error, the format is the one asked for, and the samples
//! Prometheus says it scraped and holds equal the reply's own count.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, HeaderMap};
use nats_test_server::wait::Wait;
use nats_test_server::{sample, NatsServer};

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README's Prometheus configuration: its YAML block with the scrape job.
fn readme_scrape_block() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find("```yaml\nscrape_configs:\n  - job_name: nats-delivery-exporter")
        .expect("README's scrape block")
        + "```yaml\n".len();
    readme[start..start + readme[start..].find("```").unwrap()].to_string()
}

/// One scrape as the proxy saw it.
#[derive(Debug, Clone)]
struct Seen {
    accept: String,
    content_type: String,
    samples: usize,
}

/// A proxy in front of the exporter that records each scrape; its port.
async fn recording_proxy(exporter_port: u16, seen: Arc<Mutex<Vec<Seen>>>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = reqwest::Client::new();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: HeaderMap| {
            let (http, seen) = (http.clone(), seen.clone());
            async move {
                let accept = headers
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let reply = http
                    .get(format!("http://127.0.0.1:{exporter_port}/metrics"))
                    .header(header::ACCEPT, &accept)
                    .send()
                    .await
                    .expect("the exporter answers the proxy");
                let content_type = reply.headers()[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .to_string();
                let body = reply.text().await.unwrap();
                seen.lock().unwrap().push(Seen {
                    accept,
                    content_type: content_type.clone(),
                    samples: sample::all(&body).len(),
                });
                ([(header::CONTENT_TYPE, content_type)], body)
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// Prometheus 3 from `.tools/prometheus`, with `config`, on a free port.
fn start_prometheus(config: &str, dir: &Path) -> (Running, u16) {
    let binary = repo().join(".tools/prometheus/bin/prometheus");
    assert!(
        binary.is_file(),
        "{} is missing: run scripts/install-deps.sh",
        binary.display()
    );
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let port = nats_test_server::free_port();
    let child = Command::new(binary)
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Running(child), port)
}

async fn query(prom_port: u16, path: &str, expr: Option<&str>) -> Option<serde_json::Value> {
    let url = match expr {
        Some(expr) => url::Url::parse_with_params(
            &format!("http://127.0.0.1:{prom_port}{path}"),
            [("query", expr)],
        )
        .ok()?,
        None => url::Url::parse(&format!("http://127.0.0.1:{prom_port}{path}")).ok()?,
    };
    let body: serde_json::Value = reqwest::get(url).await.ok()?.json().await.ok()?;
    (body["status"] == "success").then(|| body["data"].clone())
}

/// One number from an instant query, `None` when it returns no sample.
async fn number(prom_port: u16, expr: &str) -> Option<usize> {
    let data = query(prom_port, "/api/v1/query", Some(expr)).await?;
    data["result"][0]["value"][1].as_str()?.parse().ok()
}

/// What Prometheus says of its one target and its last scrape.
#[derive(Debug, PartialEq)]
struct Target {
    health: String,
    last_error: String,
    scraped: Option<usize>,
    stored: Option<usize>,
}

async fn target(prom_port: u16) -> Option<Target> {
    let data = query(prom_port, "/api/v1/targets", None).await?;
    let targets = data["activeTargets"].as_array()?;
    // None until the scrape pool has its one target.
    if targets.len() != 1 {
        return None;
    }
    let job = r#"job="nats-delivery-exporter""#;
    Some(Target {
        health: targets[0]["health"].as_str()?.to_string(),
        last_error: targets[0]["lastError"].as_str()?.to_string(),
        scraped: number(prom_port, &format!("scrape_samples_scraped{{{job}}}")).await,
        // Every series of the job's last scrape, but those Prometheus adds.
        stored: number(
            prom_port,
            &format!(r#"count({{{job}, __name__!~"up|scrape_.+"}})"#),
        )
        .await,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_scrapes_every_sample_in_both_formats() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.create_consumer_on_stream(
        async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("billing".into()),
            ..Default::default()
        },
        "ORDERS",
    )
    .await
    .unwrap();
    let subjects = (0..5).map(|i| format!("orders.{i}"));
    crate::common::publish_acked(&js, subjects, "order").await;

    let exporter_port = nats_test_server::free_port();
    let _exporter = Running(
        Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args(["--monitor-url", &server.monitor_url()])
            .args([
                "--web.listen-address",
                &format!("127.0.0.1:{exporter_port}"),
            ])
            .env("NATS_DELIVERY_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    Wait::secs("the exporter to listen", 20).until_blocking(|| {
        std::net::TcpStream::connect(("127.0.0.1", exporter_port)).map_err(|e| e.kind())
    });

    let block = readme_scrape_block();
    let rules = repo().join("alerts");
    for (protocols, asked, answered) in [
        (
            None,
            "application/openmetrics-text;version=1.0.0",
            "application/openmetrics-text",
        ),
        (
            Some("[PrometheusText0.0.4]"),
            "text/plain;version=0.0.4",
            "text/plain",
        ),
    ] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let proxy_port = recording_proxy(exporter_port, seen.clone()).await;
        let mut config = block
            .replace("exporter-host:7778", &format!("127.0.0.1:{proxy_port}"))
            .replace(
                "/path/to/nats-delivery-exporter/alerts",
                rules.to_str().unwrap(),
            );
        assert_ne!(config, block, "README's target and rules path");
        if let Some(protocols) = protocols {
            config = config.replace(
                "    honor_labels: true",
                &format!("    scrape_protocols: {protocols}\n    honor_labels: true"),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let (_prometheus, prom_port) = start_prometheus(&config, dir.path());
        let version = Wait::secs("Prometheus to answer", 30)
            .until_async(|| async {
                let data = query(prom_port, "/api/v1/status/buildinfo", None).await?;
                Some(data["version"].as_str()?.to_string())
            })
            .await;
        assert!(version.starts_with("3."), "Prometheus {version}");
        // README's 15 s interval: the first scrape comes within 15 s, at an
        // offset of Prometheus' choosing. A query between the proxy's record
        // of a scrape and Prometheus' append of it sees the scrape before:
        // the check waits for the same scrape on both sides.
        let (last, at_prometheus) = Wait::secs(
            format!("Prometheus {version} ({protocols:?}) to hold the reply's samples"),
            60,
        )
        .every(Duration::from_millis(250))
        .until_async(|| async {
            let last = seen.lock().unwrap().last().cloned();
            let at_prometheus = target(prom_port).await;
            match (&last, &at_prometheus) {
                (Some(l), Some(t))
                    if t.health == "up"
                        && t.scraped == Some(l.samples)
                        && t.stored == Some(l.samples) =>
                {
                    Ok((l.clone(), at_prometheus.unwrap()))
                }
                _ => Err(format!("proxy: {last:?}, Prometheus: {at_prometheus:?}")),
            }
        })
        .await;
        assert_eq!(at_prometheus.last_error, "", "{at_prometheus:?}");
        assert!(last.accept.starts_with(asked), "{last:?}");
        assert!(last.content_type.starts_with(answered), "{last:?}");
        assert!(last.samples > 50, "{last:?}");
        println!("Prometheus {version}, {protocols:?}: {last:?}, {at_prometheus:?}");
    }
}
