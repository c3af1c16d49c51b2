//! Scrape time at its worst, against a real server that grows: the
//! exporter binary (default flags and timeout, but for
//! `--jsz-config-interval`, 30s here so that the window holds a
//! configuration refresh) runs at `BENCH_BEFORE` consumers (10,000), then
//! `BENCH_AFTER` (100,000) are made, 100 per stream, and `BENCH_ROUNDS`
//! (21) rounds follow, 2 s apart: in each, one scrape of that exporter and
//! one full `/jsz` fetch (`config=true`, what a second scraper or a peer
//! exporter asks) at the same moment. The first round is the first scrape
//! after the jump; a refresh falls in the window. Then a new exporter is
//! started against the server as it now is and its first scrape is taken,
//! with a full fetch beside it too.
//!
//! Printed: the median, p95 and maximum scrape time, the scrapes without
//! `/jsz` (`nats_delivery_up{source="jsz"}` 0, or no answer within the
//! timeout), the full fetch's median, the ratios, the configuration reads
//! and failed ones, and the exporter's peak resident memory (`VmHWM`).
//! `BENCH_EXPORTER_ARGS` adds flags to both exporters.
//!
//! `cargo bench --bench scrape_worst`

mod support;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nats_test_server::sample::value;
use nats_test_server::NatsServer;
use support::{create_consumers, env_args, env_or, median, status_kib, timed_read, wait_until_up};

/// The first bytes of a scrape kept: the exporter's own families come first.
const HEAD_KEPT: usize = 16 << 20;

/// One scrape: its time, whether it had `/jsz`, and whether its poll read
/// configuration (of every account or some) and how many reads failed.
struct Scrape {
    seconds: f64,
    jsz: bool,
    config_read: bool,
    failures: f64,
}

/// The exporter binary polling `url` with default flags but `extra`.
fn spawn(url: &str, extra: &[String]) -> (Child, std::net::SocketAddr) {
    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let child = Command::new(support::EXPORTER)
        .args(["--listen", &listen.to_string(), "--monitor-url", url])
        .args(extra)
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    (child, listen)
}

/// A scrape of `metrics` and a full fetch of `jsz` at once.
async fn round(http: &reqwest::Client, metrics: &str, jsz: &str) -> (Scrape, f64) {
    let (scrape, full) = tokio::join!(timed_read(http, metrics, HEAD_KEPT), async {
        timed_read(http, jsz, 0).await.seconds
    });
    let text = String::from_utf8_lossy(&scrape.head);
    let of = |name: &str, labels: &[(&str, &str)]| value(&text, name, labels);
    let scrape = Scrape {
        seconds: scrape.seconds,
        jsz: of("nats_delivery_up", &[("source", "jsz")]) == Some(1.0),
        config_read: of("nats_delivery_jsz_config_read", &[]) == Some(1.0),
        failures: of("nats_delivery_jsz_config_read_failures_total", &[]).unwrap_or(0.0),
    };
    (scrape, full)
}

/// The value at fraction `q` of the sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let before = env_or("BENCH_BEFORE", 10_000) / 100;
    let after = env_or("BENCH_AFTER", 100_000) / 100;
    let rounds = env_or("BENCH_ROUNDS", 21);
    let mut extra = vec!["--jsz-config-interval".to_string(), "30s".into()];
    extra.extend(env_args("BENCH_EXPORTER_ARGS"));
    let server = NatsServer::builder().jetstream().start();
    create_consumers(&server, before, 100).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let url = server.monitor_url();
    let jsz = format!("{url}/jsz?accounts=true&streams=true&consumers=true&config=true");
    let (mut exporter, listen) = spawn(&url, &extra);
    wait_until_up(&http, listen).await;
    let metrics = format!("http://{listen}/metrics");
    for _ in 0..2 {
        let (s, _) = round(&http, &metrics, &jsz).await;
        assert!(s.jsz, "the exporter reads /jsz before the jump");
    }
    support::create_more_consumers(&server, before, after, 100).await;
    let mut scrapes = Vec::new();
    let mut fulls = Vec::new();
    let started = Instant::now();
    for r in 0..rounds {
        let next = started + Duration::from_secs(2 * r as u64);
        tokio::time::sleep_until(next.into()).await;
        let (s, full) = round(&http, &metrics, &jsz).await;
        println!(
            "round {r:>2}: scrape {:.3} s{}{}, full fetch {full:.3} s, load {}",
            s.seconds,
            if s.jsz { "" } else { " WITHOUT /jsz" },
            if s.config_read {
                ", configuration read"
            } else {
                ""
            },
            load_average()
        );
        scrapes.push(s);
        fulls.push(full);
    }
    let peak = status_kib(exporter.id(), "VmHWM:");
    let _ = exporter.kill();
    let _ = exporter.wait();
    // A new exporter's first scrape of the server as it now is.
    let (mut fresh, listen) = spawn(&url, &extra);
    wait_until_up(&http, listen).await;
    let (first, full) = round(&http, &format!("http://{listen}/metrics"), &jsz).await;
    let fresh_peak = status_kib(fresh.id(), "VmHWM:");
    let _ = fresh.kill();
    let _ = fresh.wait();
    report(
        &scrapes,
        &fulls,
        peak,
        (first, full, fresh_peak),
        (before, after),
    );
}

fn report(
    scrapes: &[Scrape],
    fulls: &[f64],
    peak_kib: u64,
    (first, first_full, fresh_peak_kib): (Scrape, f64, u64),
    (before, after): (usize, usize),
) {
    let times: Vec<f64> = scrapes.iter().map(|s| s.seconds).collect();
    let failed = scrapes.iter().filter(|s| !s.jsz).count();
    let reads = scrapes.iter().filter(|s| s.config_read).count();
    let read_failures = scrapes.last().map_or(0.0, |s| s.failures);
    let full = median(fulls);
    let (med, p95, max) = (
        median(&times),
        quantile(&times, 0.95),
        quantile(&times, 1.0),
    );
    println!();
    println!(
        "jump               {} to {} consumers",
        before * 100,
        after * 100
    );
    println!(
        "rounds             {}, 2 s apart, a full fetch beside each scrape",
        times.len()
    );
    println!("scrape             median {med:.3} s, p95 {p95:.3} s, max {max:.3} s");
    println!("scrapes without /jsz {failed} of {}", times.len());
    println!("configuration      read in {reads} rounds, {read_failures} failed reads");
    println!(
        "full /jsz fetch    median {full:.3} s, max {:.3} s",
        quantile(fulls, 1.0)
    );
    println!(
        "ratios             median scrape / full {:.2}x (goal <= 0.6x), max scrape / full {:.2}x (goal <= 2x)",
        med / full,
        max / full
    );
    println!(
        "first scrape of a new exporter {:.3} s{} (full fetch beside it {first_full:.3} s)",
        first.seconds,
        if first.jsz { "" } else { " WITHOUT /jsz" }
    );
    println!(
        "peak RSS           {:.1} MB running through the jump, {:.1} MB new (goal <= 96 MB)",
        peak_kib as f64 / 1024.0,
        fresh_peak_kib as f64 / 1024.0
    );
    println!("load average       {}", load_average());
}
