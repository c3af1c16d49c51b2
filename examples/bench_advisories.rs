//! Advisory burst benchmark against a real server: N max-deliveries
//! advisories (default 100,000) counted by the listener, live and durable.
//!
//! The advisories are synthetic, in the exact server format
//! (`io.nats.jetstream.advisory.v1.max_deliver` with `stream`, `consumer`,
//! `stream_seq`, `deliveries`), published on the real advisory subjects;
//! producing 100,000 real dead messages would measure the server, not the
//! exporter. The listener runs in a child process (this program, re-run) so
//! its peak resident memory is its own.
//!
//! Durable mode commits the totals to the account's key-value bucket before
//! it acknowledges; the run without that commit (a plain pull, parse and
//! acknowledge of the same stream) shows the commit's share of the cost.
//!
//! `cargo run --release --example bench_advisories` (env BENCH_ADVISORIES=N;
//! BENCH_CONSUMERS=C spreads them over C consumers, default 100, each a
//! series with its own stored totals; BENCH_REAL=1 adds a run where N
//! messages really die on the server).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nats_delivery_exporter::{AccountListener, AdvisoryArgs, AdvisoryMetrics, NatsArgs};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

const ACCOUNTS: &str =
    "accounts { APP { jetstream: enabled, users: [ { user: app, password: app } ] } }";
fn consumers() -> u64 {
    std::env::var("BENCH_CONSUMERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

fn advisory(seq: u64) -> (String, Vec<u8>) {
    let consumer = format!("C{}", seq % consumers());
    let subject = format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORDERS.{consumer}");
    let payload = format!(
        r#"{{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"bench{seq}","timestamp":"2026-11-29T21:00:00.000000000Z","stream":"ORDERS","consumer":"{consumer}","stream_seq":{seq},"deliveries":5}}"#
    );
    (subject, payload.into_bytes())
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn sum_samples(text: &str, name: &str) -> f64 {
    let samples = nats_test_server::sample::samples(text, name, &[]);
    samples.iter().map(|(_, v)| v).sum()
}

/// Child: run one listener until it has seen N advisories, then report.
async fn child(url: String, n: u64, durable: bool) {
    let mut registry = Registry::default();
    let metrics = AdvisoryMetrics::register(&mut registry);
    let mut flags = vec!["--advisories", "--advisories-max-series", "10000000"];
    if durable {
        flags.extend(["--advisories-stream", "ADV"]);
    }
    let listener = AccountListener {
        nats: NatsArgs::from_flags(["--nats-servers", url.as_str()]).unwrap(),
        account: "APP".into(),
        auth: "user:app:app".parse().unwrap(),
        args: AdvisoryArgs::from_flags(flags).unwrap(),
        metrics: metrics.clone(),
    };
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let start_mem = vm_hwm_kib();
    tokio::spawn(listener.run(rx));
    let account = nats_delivery_exporter::AccountLabels {
        account: "APP".into(),
    };
    while metrics.listener_up.get_or_create(&account).get() != 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("ready");
    let mut first: Option<Instant> = None;
    loop {
        let received = metrics.received.get_or_create(&account).get();
        let dropped = metrics.dropped.get_or_create(&account).get();
        if received > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if received + dropped >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = first.unwrap().elapsed();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let counted = sum_samples(&text, "nats_delivery_jetstream_max_deliveries_total");
    let dropped = metrics.dropped.get_or_create(&account).get();
    println!(
        "done counted={counted} dropped={dropped} seconds={:.3} peak_rss_kib={} rss_before_kib={start_mem}",
        elapsed.as_secs_f64(),
        vm_hwm_kib()
    );
}

fn spawn_child(url: &str, n: u64, durable: bool) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .env("BENCH_CHILD_URL", url)
        .env("BENCH_ADVISORIES", n.to_string())
        .env("BENCH_DURABLE", if durable { "1" } else { "0" })
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn read_line(r: &mut impl BufRead) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    line.trim().to_string()
}

fn field(line: &str, k: &str) -> String {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{k}=")))
        .unwrap()
        .to_string()
}

/// The same stream read the way durable mode reads it, minus the totals
/// bucket: batches of 1,000 pulled, each advisory parsed and acknowledged.
async fn pull_parse_ack(js: &async_nats::jetstream::Context, n: u64) -> f64 {
    use async_nats::jetstream::consumer;
    use futures::StreamExt;
    let stream = js.get_stream("ADV").await.unwrap();
    let c: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("plain".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = c
        .stream()
        .max_messages_per_batch(1000)
        .messages()
        .await
        .unwrap()
        .ready_chunks(1000);
    let t = Instant::now();
    let mut done = 0;
    while done < n {
        let chunk = messages.next().await.unwrap();
        for m in chunk {
            let m = m.unwrap();
            let a = nats_delivery_exporter::parse_advisory_on(&m.subject, &m.payload);
            assert!(a.is_ok());
            m.ack().await.unwrap();
            done += 1;
        }
    }
    t.elapsed().as_secs_f64()
}

fn report(mode: &str, n: u64, line: &str, publish_secs: Option<f64>) {
    let field = |k: &str| field(line, k);
    let secs: f64 = field("seconds").parse().unwrap();
    let counted: f64 = field("counted").parse().unwrap();
    assert_eq!(
        counted as u64, n,
        "{mode}: not every advisory was counted: {line}"
    );
    println!(
        "{mode:8} {n} advisories counted={counted} dropped={} in {secs:.3} s = {:.0} advisories/s; listener peak RSS {} MiB (before listening {} MiB){}",
        field("dropped"),
        n as f64 / secs,
        field("peak_rss_kib").parse::<u64>().unwrap() / 1024,
        field("rss_before_kib").parse::<u64>().unwrap() / 1024,
        publish_secs.map_or(String::new(), |p| format!("; publishing took {p:.3} s")),
    );
}

#[tokio::main]
async fn main() {
    let n: u64 = std::env::var("BENCH_ADVISORIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    if let Ok(url) = std::env::var("BENCH_CHILD_URL") {
        let durable = std::env::var("BENCH_DURABLE").as_deref() == Ok("1");
        return child(url, n, durable).await;
    }
    let server = NatsServer::builder().jetstream().config(ACCOUNTS).start();
    let url = server.client_url();
    let client = async_nats::ConnectOptions::with_user_and_password("app".into(), "app".into())
        .connect(&url)
        .await
        .unwrap();

    // Live: the burst arrives while the listener runs.
    let mut live = spawn_child(&url, n, false);
    let mut out = BufReader::new(live.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "ready");
    let t = Instant::now();
    for seq in 1..=n {
        let (subject, payload) = advisory(seq);
        client.publish(subject, payload.into()).await.unwrap();
    }
    client.flush().await.unwrap();
    let publish_secs = t.elapsed().as_secs_f64();
    let line = read_line(&mut out);
    live.wait().unwrap();
    report("live", n, &line, Some(publish_secs));

    // Durable: the burst is already in the advisory stream when the listener starts.
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ADV".into(),
        subjects: nats_delivery_exporter::ADVISORY_SUBJECTS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut acks = Vec::new();
    for seq in 1..=n {
        let (subject, payload) = advisory(seq);
        acks.push(js.publish(subject, payload.into()).await.unwrap());
        if acks.len() == 1000 {
            for a in acks.drain(..) {
                a.await.unwrap();
            }
        }
    }
    for a in acks.drain(..) {
        a.await.unwrap();
    }
    let mut durable = spawn_child(&url, n, true);
    let mut out = BufReader::new(durable.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "ready");
    let line = read_line(&mut out);
    durable.wait().unwrap();
    report("durable", n, &line, None);
    let durable_secs = field(&line, "seconds").parse::<f64>().unwrap();
    let plain = pull_parse_ack(&js, n).await;
    println!(
        "plain    {n} advisories pulled, parsed and acknowledged without the commit in {plain:.3} s = {:.0} advisories/s; the commit's share of durable counting: {:.0} %",
        n as f64 / plain,
        100.0 * (1.0 - plain / durable_secs).max(0.0)
    );
    js.delete_stream("ADV").await.unwrap();

    // Real: N messages really die (max_deliver 1); the server emits the
    // burst at its own pace, so this measures the server as much as us.
    if std::env::var("BENCH_REAL").as_deref() == Ok("1") {
        real(&js, &url, n).await;
    }
}

async fn real(js: &async_nats::jetstream::Context, url: &str, n: u64) {
    use async_nats::jetstream::consumer;
    use futures::StreamExt;
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let c: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("C0".into()),
            max_deliver: 1,
            ack_wait: Duration::from_secs(1),
            max_ack_pending: -1,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut acks = Vec::new();
    for i in 0..n {
        acks.push(js.publish(format!("orders.{i}"), "x".into()).await.unwrap());
        if acks.len() == 1000 {
            for a in acks.drain(..) {
                a.await.unwrap();
            }
        }
    }
    for a in acks.drain(..) {
        a.await.unwrap();
    }
    let mut child = spawn_child(url, n, false);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "ready");
    // One delivery each, never acknowledged; then keep pulling so the server
    // notices, message by message, that max_deliver is exhausted.
    let t = Instant::now();
    let puller = tokio::spawn(async move {
        loop {
            let mut batch = c
                .fetch()
                .max_messages(1000)
                .expires(Duration::from_millis(500))
                .messages()
                .await
                .unwrap();
            while let Some(m) = batch.next().await {
                m.unwrap();
            }
        }
    });
    let line = read_line(&mut out);
    puller.abort();
    child.wait().unwrap();
    report("real", n, &line, None);
    println!(
        "real     first delivery to last advisory counted: {:.3} s",
        t.elapsed().as_secs_f64()
    );
}
