//! Scrape cost at scale, measured in one run against a real server:
//! S streams x C consumers (default 100 x 100), then, interleaved, the raw
//! `/jsz` fetch the exporter makes and a full `/metrics` scrape of the
//! exporter binary; CPU time per scrape and peak resident memory of the
//! exporter process from /proc.
//!
//! `cargo bench --bench scrape` measures the curve at 10k, 30k, 60k and 100k
//! consumers (100 per stream, a fresh server each) and ends with one table;
//! `BENCH_SIZES=10000,30000` picks the totals, `BENCH_STREAMS` and
//! `BENCH_CONSUMERS` one size, `BENCH_ROUNDS` the rounds per size.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::stream::{self as fstream, StreamExt};
use nats_test_server::NatsServer;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0 // USER_HZ is 100 on Linux
}

/// A /proc/<pid>/status field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn timed_get(http: &reqwest::Client, url: &str) -> (f64, bytes::Bytes) {
    let start = Instant::now();
    let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
    (start.elapsed().as_secs_f64(), body)
}

/// One size's figures, for the closing table.
struct Row {
    consumers: usize,
    raw: f64,
    scrape: f64,
    ratio_median: f64,
    ratio_min: f64,
    peak_mb: f64,
    text_mb: f64,
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sizes: Vec<(usize, usize)> = match (
        std::env::var("BENCH_STREAMS").ok(),
        std::env::var("BENCH_CONSUMERS").ok(),
    ) {
        (None, None) => std::env::var("BENCH_SIZES")
            .unwrap_or_else(|_| "10000,30000,60000,100000".into())
            .split(',')
            .map(|t| {
                (
                    t.trim().parse::<usize>().expect("BENCH_SIZES: totals") / 100,
                    100,
                )
            })
            .collect(),
        _ => vec![(env_or("BENCH_STREAMS", 100), env_or("BENCH_CONSUMERS", 100))],
    };
    let rounds = env_or("BENCH_ROUNDS", if sizes.len() > 1 { 5 } else { 9 });
    let mut rows = Vec::new();
    for (streams, consumers) in sizes {
        rows.push(measure(streams, consumers, rounds).await);
    }
    println!();
    println!("consumers   raw /jsz   scrape    scrape/raw (median, min)   peak RSS   text");
    for r in rows {
        println!(
            "{:>9}   {:>6.3} s  {:>6.3} s  {:>5.2}x  {:>5.2}x              {:>5.1} MB  {:>5.1} MB",
            r.consumers, r.raw, r.scrape, r.ratio_median, r.ratio_min, r.peak_mb, r.text_mb
        );
    }
}

/// Creates `streams` x `consumers` on a fresh server and measures `rounds`
/// alternating raw fetches and scrapes.
async fn measure(streams: usize, consumers: usize, rounds: usize) -> Row {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    let setup = Instant::now();
    fstream::iter(0..streams)
        .for_each_concurrent(8, |s| {
            let js = js.clone();
            async move {
                let st = js
                    .create_stream(stream::Config {
                        name: format!("S{s}"),
                        subjects: vec![format!("s{s}.>")],
                        storage: stream::StorageType::Memory,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                js.publish(format!("s{s}.x"), "x".into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                for c in 0..consumers {
                    st.create_consumer(pull::Config {
                        durable_name: Some(format!("C{c}")),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                }
            }
        })
        .await;
    eprintln!(
        "created {streams} streams x {consumers} consumers in {:.1?}",
        setup.elapsed()
    );

    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut exporter = std::process::Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args([
            "--monitor-url",
            &server.monitor_url(),
            "--listen",
            &listen.to_string(),
            "--timeout",
            "60s",
        ])
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    let pid = exporter.id();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let metrics_url = format!("http://{listen}/metrics");
    let jsz_url = format!(
        "{}/jsz?accounts=true&streams=true&consumers=true&config=true&offset=0&limit=1024",
        server.monitor_url()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while http
        .get(format!("http://{listen}/healthz"))
        .send()
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "exporter did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One warm-up of each; the first scrape also reads the closed-connection ring.
    let _ = timed_get(&http, &jsz_url).await;
    let _ = timed_get(&http, &metrics_url).await;
    let rss_idle_kib = status_kib(pid, "VmRSS:");
    let (mut raw, mut scrape, mut cpu, mut jsz_poll) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut raw_bytes, mut scrape_bytes) = (0, 0);
    // The order alternates and each request starts after a pause: the
    // server's garbage collection after one 11 MB reply must not fall on
    // whichever request happens to come next.
    let settle = Duration::from_millis(300);
    for round in 0..rounds {
        for which in [round % 2, 1 - round % 2] {
            tokio::time::sleep(settle).await;
            if which == 0 {
                let (t, n) = timed_get(&http, &jsz_url).await;
                raw.push(t);
                raw_bytes = n.len();
                continue;
            }
            let before = cpu_seconds(pid);
            let (t, n) = timed_get(&http, &metrics_url).await;
            cpu.push(cpu_seconds(pid) - before);
            scrape.push(t);
            scrape_bytes = n.len();
            let text = String::from_utf8_lossy(&n);
            let polled = nats_test_server::sample::value(
                &text,
                "nats_delivery_scrape_duration_seconds",
                &[("source", "jsz")],
            );
            jsz_poll.push(polled.expect("the scrape reports its /jsz poll"));
        }
    }
    let peak_kib = status_kib(pid, "VmHWM:");
    let _ = exporter.kill();
    let _ = exporter.wait();
    println!("streams x consumers        {streams} x {consumers}");
    println!("rounds                     {rounds}, alternating, 300 ms apart (median / min)");
    let row = |what: &str, v: &[f64], note: String| {
        println!("{what:<26} {:.3} s / {:.3} s  {note}", median(v), min(v));
    };
    row(
        "raw /jsz fetch",
        &raw,
        format!("({:.1} MB)", raw_bytes as f64 / 1e6),
    );
    row(
        "exporter scrape",
        &scrape,
        format!("({:.1} MB of text)", scrape_bytes as f64 / 1e6),
    );
    row(
        "  of which /jsz poll",
        &jsz_poll,
        "(fetch and parse, as the exporter reports it)".into(),
    );
    row("exporter CPU per scrape", &cpu, String::new());
    println!(
        "scrape / raw fetch         {:.2}x / {:.2}x  (target <= 1.5x)",
        median(&scrape) / median(&raw),
        min(&scrape) / min(&raw)
    );
    println!(
        "exporter RSS idle / peak   {:.1} MB / {:.1} MB  (target peak < 64 MB)",
        rss_idle_kib as f64 / 1024.0,
        peak_kib as f64 / 1024.0
    );
    Row {
        consumers: streams * consumers,
        raw: median(&raw),
        scrape: median(&scrape),
        ratio_median: median(&scrape) / median(&raw),
        ratio_min: min(&scrape) / min(&raw),
        peak_mb: peak_kib as f64 / 1024.0,
        text_mb: scrape_bytes as f64 / 1e6,
    }
}
