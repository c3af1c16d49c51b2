//! Polling through the system account at scale, on a real 3-node cluster on
//! loopback: S streams x C consumers (default 10 x 10), all R3, in a
//! JetStream account beside the system account. In each round, interleaved
//! and 300 ms apart: the raw
//! `/jsz?accounts=true&streams=true&consumers=true&config=true` fetch of each
//! server alone, the three at once, the same JSZ request as the exporter
//! makes it through the system account (each server alone, the three at
//! once), and a full `/metrics` scrape of three
//! exporter binaries: polling through the system account
//! (`--system-account-polling`, no `--monitor-url`), the same with
//! `--consumer-status-window 0s`, and polling the three servers over HTTP
//! (every `--monitor-url`). Every raw fetch must hold every consumer, or
//! the run stops. A scrape that does not report each consumer once and
//! every source of the three servers up is counted as incomplete, shown,
//! and left out of the medians: an empty scrape is never a fast one.
//!
//! `cargo bench --bench system_scrape`; `BENCH_STREAMS`, `BENCH_CONSUMERS`
//! (the sizes), `BENCH_ROUNDS` (default 5), `BENCH_SETUP_CONCURRENCY`
//! (requests of the set-up at once, default 8); `BENCH_EXPORTER_ARGS` adds
//! flags to every exporter measured; `BENCH_BASELINE_EXPORTER` names
//! another build of the exporter, polled through the system account in the
//! same rounds (before and after a change). At 100 x 100 the servers'
//! stores write thousands of Raft logs: `TMPDIR=/dev/shm` keeps that off
//! the disk.

#[path = "system_scrape/measured.rs"]
mod measured;
#[path = "system_scrape/rounds.rs"]
mod rounds;
#[path = "system_scrape/setup.rs"]
mod setup;
mod support;
#[path = "system_scrape/system_raw.rs"]
mod system_raw;

use std::time::{Duration, Instant};

use measured::{complete, Measured};
use nats_test_server::sample::value;
use nats_test_server::NatsServer;
use rounds::Rounds;
use support::{env_or, median, min, timed_get};

/// The consumers a raw /jsz reply holds.
fn consumers_in(jsz: &[u8]) -> usize {
    let key = b"\"num_ack_pending\"";
    jsz.windows(key.len()).filter(|w| w == key).count()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
}

/// Creates the streams and consumers, prints how long that took; the
/// whole time.
async fn create_streams(servers: &[NatsServer], streams: usize, per_stream: usize) -> Duration {
    let setup = Instant::now();
    let parts = setup::create(servers, streams, per_stream).await;
    let setup_took = setup.elapsed();
    println!(
        "created {streams} R3 streams x {per_stream} R3 consumers in {setup_took:.1?}: cluster ready {:.1?}, streams {:.1?}, consumers {:.1?} ({} requests tried again)",
        parts.cluster_ready, parts.streams, parts.consumers, parts.retries
    );
    setup_took
}

/// Each server's raw /jsz URL, asking for everything the exporter asks.
fn jsz_urls(servers: &[NatsServer]) -> Vec<String> {
    servers
        .iter()
        .map(|s| {
            format!(
                "{}/jsz?accounts=true&streams=true&consumers=true&config=true",
                s.monitor_url()
            )
        })
        .collect()
}

/// Waits until every replica holds every consumer.
async fn wait_for_every_consumer(http: &reqwest::Client, jsz_urls: &[String], total: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    for url in jsz_urls {
        while consumers_in(&timed_get(http, url).await.1) != total {
            assert!(Instant::now() < deadline, "{url}: not every consumer");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The exporters measured: through the system account, the same with
/// `--consumer-status-window 0s`, over HTTP, and the `baseline` binary if
/// one is named.
async fn start_exporters(
    servers: &[NatsServer],
    http: &reqwest::Client,
    baseline: Option<&str>,
) -> Vec<Measured> {
    let system = |extra: &[&str]| setup::system_account_args(servers, extra);
    let monitor_urls: Vec<String> = servers
        .iter()
        .flat_map(|s| ["--monitor-url".to_string(), s.monitor_url()])
        .collect();
    let mut exporters = vec![
        Measured::start("system account", support::EXPORTER, system(&[]), http).await,
        Measured::start(
            "system account, --consumer-status-window 0s",
            support::EXPORTER,
            system(&["--consumer-status-window", "0s"]),
            http,
        )
        .await,
        Measured::start(
            "HTTP, 3 --monitor-url",
            support::EXPORTER,
            monitor_urls,
            http,
        )
        .await,
    ];
    if let Some(binary) = baseline {
        let e = Measured::start("system account, baseline binary", binary, system(&[]), http);
        exporters.push(e.await);
    }
    exporters
}

/// Waits until the exporter's scrape is complete: the first survey waits
/// out its gap, and leaders may still be settling. After 120 s it prints
/// the exporter's survey figures and the servers' warnings, and panics.
async fn warm_up(e: &Measured, servers: &[NatsServer], http: &reqwest::Client, total: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = String::from_utf8_lossy(&timed_get(http, &e.url).await.1).into_owned();
        match complete(&text, total) {
            Ok(()) => break,
            Err(why) if Instant::now() > deadline => {
                print_why_incomplete(&text, servers);
                panic!("{}: {why}", e.name)
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The survey's series of a scrape, and each server's first warnings and
/// errors.
fn print_why_incomplete(text: &str, servers: &[NatsServer]) {
    for line in text
        .lines()
        .filter(|l| l.starts_with("nats_delivery_survey_"))
    {
        eprintln!("{line}");
    }
    for server in servers {
        eprintln!("{} warnings and errors:", server.name);
        let log = server.log();
        let notable = log
            .lines()
            .filter(|l| l.contains("[WRN]") || l.contains("[ERR]"));
        for line in notable.take(20) {
            eprintln!("  {line}");
        }
    }
}

/// One summary line: the median and the minimum of `v`, and `note`.
fn row(what: &str, v: &[f64], note: String) {
    println!("{what:<46} {:.3} s ({:.3} s)  {note}", median(v), min(v));
}

/// The medians (and minimums) of every fetch and every exporter's scrape,
/// with the incomplete scrapes named.
fn print_medians(measured: &Rounds, exporters: &[Measured], rounds: usize) {
    for (n, r) in measured.raw.iter().enumerate() {
        row(&format!("raw /jsz of n{n}"), r, String::new());
    }
    row(
        "raw /jsz, slowest of the three",
        &measured.slowest,
        format!("({:.1} MB each)", measured.raw_bytes as f64 / 1e6),
    );
    row(
        "raw /jsz, three at once",
        &measured.all_at_once,
        String::new(),
    );
    for (n, r) in measured.nats.iter().enumerate() {
        row(&format!("system request JSZ of n{n}"), r, String::new());
    }
    let nats_slowest: Vec<f64> = (0..rounds).map(|r| measured.nats_slowest(r)).collect();
    row(
        "system request JSZ, slowest of the three",
        &nats_slowest,
        format!("({:.1} MB each)", measured.nats_bytes as f64 / 1e6),
    );
    row(
        "system request JSZ, three at once",
        &measured.nats_all,
        String::new(),
    );
    row(
        "survey (VARZ, until 3 replies)",
        &measured.surveys,
        String::new(),
    );
    for e in exporters {
        for (round, why) in &e.incomplete {
            println!("INCOMPLETE scrape, {}, round {round}: {why}", e.name);
        }
        row(
            &format!("scrape: {}", e.name),
            &e.complete_times(),
            format!(
                "CPU {:.3} s, slowest /jsz poll {:.3} s, {:.1} MB text, peak RSS {:.1} MB",
                median(&e.cpu),
                median(&e.jsz_poll),
                e.text_bytes as f64 / 1e6,
                e.peak_mb()
            ),
        );
    }
}

/// The system-account scrape against the slowest raw fetch (the target).
fn print_system_against_raw(system: &Measured, slowest: &[f64], rounds: usize) {
    let ratios: Vec<f64> = system
        .took
        .iter()
        .zip(slowest)
        .filter_map(|(s, r)| Some((*s)? / r))
        .collect();
    println!(
        "system scrape / slowest raw fetch              {:.2}x median of rounds, {:.2}x of medians (target <= 1.5x, every scrape complete: {} of {rounds} were)",
        median(&ratios),
        median(&system.complete_times()) / median(slowest),
        rounds - system.incomplete.len(),
    );
}

/// The survey's figures, from one more scrape of the system-account
/// exporter.
async fn print_survey(http: &reqwest::Client, system: &Measured) {
    let text = String::from_utf8_lossy(&timed_get(http, &system.url).await.1).into_owned();
    let survey = |name: &str| value(&text, name, &[]).unwrap_or(f64::NAN);
    println!(
        "survey: {} of {} servers answered, {} late replies so far",
        survey("nats_delivery_survey_servers_answered"),
        survey("nats_delivery_survey_servers_expected"),
        survey("nats_delivery_survey_late_replies_total"),
    );
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let streams = env_or("BENCH_STREAMS", 10);
    let per_stream = env_or("BENCH_CONSUMERS", 10);
    let rounds = env_or("BENCH_ROUNDS", 5);
    let total = streams * per_stream;
    let servers = nats_test_server::cluster(3, setup::ACCOUNTS);
    let setup_took = create_streams(&servers, streams, per_stream).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let jsz_urls = jsz_urls(&servers);
    wait_for_every_consumer(&http, &jsz_urls, total).await;
    let baseline = std::env::var("BENCH_BASELINE_EXPORTER").ok();
    let mut exporters = start_exporters(&servers, &http, baseline.as_deref()).await;
    for e in &exporters {
        warm_up(e, &servers, &http, total).await;
    }
    println!("load before rounds: {}", loadavg().trim());

    let system_raw = system_raw::SystemRaw::connect(&servers, &http).await;
    let mut measured = Rounds::new(http.clone(), jsz_urls, total, system_raw);
    Rounds::print_header(baseline.is_some());
    for round in 0..rounds {
        measured.run(round, &mut exporters).await;
        measured.print_row(round, &exporters);
    }
    println!("load after rounds: {}", loadavg().trim());
    println!();
    println!("{streams} x {per_stream} R3 on 3 servers; setup {setup_took:.1?}; {rounds} rounds, medians (min)");
    print_medians(&measured, &exporters, rounds);
    print_system_against_raw(&exporters[0], &measured.slowest, rounds);
    print_survey(&http, &exporters[0]).await;
}
