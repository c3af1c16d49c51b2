//! A local demonstration: starts a nats-server and the exporter on free
//! loopback ports, then makes the server cut a slow consumer and leaves a
//! JetStream consumer with unacknowledged, redelivered messages, and shows
//! what the exporter reports before and after.
//!
//! Run it through `scripts/demo.sh`, which installs the server and builds the
//! exporter first. It reads `NATS_SERVER_BIN` and `EXPORTER_BIN`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn metrics(http: &reqwest::Client, url: &str, wanted: &[&str]) -> Vec<String> {
    let text = http.get(url).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && wanted.iter().any(|w| l.starts_with(w)))
        .map(str::to_string)
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let nats_bin = std::env::var("NATS_SERVER_BIN").unwrap_or_else(|_| "nats-server".into());
    let exporter_bin = std::env::var("EXPORTER_BIN")
        .unwrap_or_else(|_| "target/release/nats-delivery-exporter".into());
    let (client_port, monitor_port, exporter_port) = (free_port(), free_port(), free_port());
    let store = tempfile::tempdir()?;
    println!("starting nats-server on 127.0.0.1:{client_port} (monitoring :{monitor_port}), max_pending 512 KiB");
    let _server = Killed(
        Command::new(&nats_bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &client_port.to_string(),
                "-m",
                &monitor_port.to_string(),
            ])
            .args(["-js", "-sd", store.path().to_str().unwrap(), "-n", "demo"])
            .args(["-c", &write_config(store.path())?])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let monitor = format!("http://127.0.0.1:{monitor_port}");
    let exporter_url = format!("http://127.0.0.1:{exporter_port}/metrics");
    println!("starting the exporter on 127.0.0.1:{exporter_port}");
    let _exporter = Killed(
        Command::new(&exporter_bin)
            .args([
                "--monitor-url",
                &monitor,
                "--listen",
                &format!("127.0.0.1:{exporter_port}"),
            ])
            .env("NATS_DELIVERY_LOG", "error")
            .spawn()?,
    );
    let http = reqwest::Client::new();
    let start = Instant::now();
    while http.get(&exporter_url).send().await.is_err()
        || reqwest::get(format!("{monitor}/healthz")).await.is_err()
    {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(20),
            "server or exporter did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wanted = [
        "nats_delivery_up",
        "nats_delivery_server_slow_consumers_total",
        "nats_delivery_slow_consumer_closed_connections_total",
        "nats_delivery_consumer_ack_pending_messages",
        "nats_delivery_consumer_redelivered_messages",
        "nats_delivery_consumer_pending_messages",
    ];
    println!("\n--- before ---");
    for l in metrics(&http, &exporter_url, &wanted).await {
        println!("{l}");
    }

    // 1. A subscriber that stops reading: the server cuts it.
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", client_port)).await?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    reader
        .get_mut()
        .write_all(b"CONNECT {\"verbose\":false,\"name\":\"stuck-reader\",\"protocol\":1}\r\nSUB demo.events 1\r\nPING\r\n")
        .await?;
    line.clear();
    reader.read_line(&mut line).await?;
    let client = async_nats::ConnectOptions::new()
        .name("demo-publisher")
        .connect(format!("nats://127.0.0.1:{client_port}"))
        .await?;
    let payload = bytes::Bytes::from(vec![b'x'; 1024]);
    let mut published = 0u64;
    loop {
        let varz: serde_json::Value = http
            .get(format!("{monitor}/varz"))
            .send()
            .await?
            .json()
            .await?;
        if varz["slow_consumers"].as_u64() > Some(0) {
            break;
        }
        for _ in 0..256 {
            client.publish("demo.events", payload.clone()).await?;
        }
        client.flush().await?;
        published += 256;
    }
    println!("\npublished {published} messages of 1 KiB to a subscriber that stopped reading: the server cut it");

    // 2. A JetStream consumer: 10 delivered, 3 acknowledged, 7 redelivered after ack_wait.
    let js = jetstream::new(client.clone());
    let orders = js
        .create_stream(stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await?;
    let consumer = orders
        .create_consumer(pull::Config {
            durable_name: Some("billing".into()),
            ack_wait: Duration::from_secs(1),
            max_deliver: 5,
            ..Default::default()
        })
        .await?;
    for i in 0..12 {
        js.publish(format!("orders.{i}"), "order".into())
            .await?
            .await?;
    }
    let mut batch = consumer.fetch().max_messages(10).messages().await?;
    let mut n = 0;
    while let Some(m) = batch.next().await {
        n += 1;
        if n <= 3 {
            m.map_err(|e| anyhow::anyhow!(e))?
                .double_ack()
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Redeliveries come first: these 7 are the unacknowledged ones again.
    let mut batch = consumer.fetch().max_messages(7).messages().await?;
    while batch.next().await.is_some() {}
    println!("JetStream: 12 published, 10 delivered, 3 acknowledged, 7 redelivered and still unacknowledged");

    println!("\n--- after ---");
    for l in metrics(&http, &exporter_url, &wanted).await {
        println!("{l}");
    }
    println!("\nexpected: slow consumers 1, the closed connection named stuck-reader, ack pending 7, redelivered 7, backlog 2");
    Ok(())
}

fn write_config(dir: &std::path::Path) -> anyhow::Result<String> {
    let path = dir.join("demo.conf");
    std::fs::write(&path, "max_pending: 524288\nmax_payload: 65536\n")?;
    Ok(path.to_string_lossy().into_owned())
}
