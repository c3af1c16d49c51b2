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
//! (consumers created at once, default 32); `BENCH_EXPORTER_ARGS` adds
//! flags to every exporter measured; `BENCH_BASELINE_EXPORTER` names
//! another build of the exporter, polled through the system account in the
//! same rounds (before and after a change). At 100 x 100 the servers'
//! stores write thousands of Raft logs: `TMPDIR=/dev/shm` keeps that off
//! the disk.

#[path = "system_scrape/measured.rs"]
mod measured;
#[path = "system_scrape/setup.rs"]
mod setup;
mod support;
#[path = "system_scrape/system_raw.rs"]
mod system_raw;

use std::time::{Duration, Instant};

use measured::{complete, Measured};
use nats_test_server::sample::value;
use support::{env_or, median, min, timed_get};

/// The consumers a raw /jsz reply holds.
fn consumers_in(jsz: &[u8]) -> usize {
    let key = b"\"num_ack_pending\"";
    jsz.windows(key.len()).filter(|w| w == key).count()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
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
    let setup = Instant::now();
    let parts = setup::create(&servers, streams, per_stream).await;
    let setup_took = setup.elapsed();
    println!(
        "created {streams} R3 streams x {per_stream} R3 consumers in {setup_took:.1?}: cluster ready {:.1?}, streams {:.1?}, consumers {:.1?} ({} requests tried again)",
        parts.cluster_ready, parts.streams, parts.consumers, parts.retries
    );

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let jsz_urls: Vec<String> = servers
        .iter()
        .map(|s| {
            format!(
                "{}/jsz?accounts=true&streams=true&consumers=true&config=true",
                s.monitor_url()
            )
        })
        .collect();
    // Every replica holds every consumer before anything is measured.
    let deadline = Instant::now() + Duration::from_secs(300);
    for url in &jsz_urls {
        while consumers_in(&timed_get(&http, url).await.1) != total {
            assert!(Instant::now() < deadline, "{url}: not every consumer");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let system = |extra: &[&str]| {
        let mut args: Vec<String> = [
            "--system-account-polling",
            "--system-account",
            "user:sys:sys-secret",
            "--nats-servers",
            &servers[0].client_url(),
            // Message timestamps (consumer status) are read in the
            // JetStream account.
            "--nats-user",
            "app",
            "--nats-password",
            "app-secret",
        ]
        .map(str::to_string)
        .to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    let monitor_urls: Vec<String> = servers
        .iter()
        .flat_map(|s| ["--monitor-url".to_string(), s.monitor_url()])
        .collect();
    let mut exporters = vec![
        Measured::start("system account", support::EXPORTER, system(&[]), &http).await,
        Measured::start(
            "system account, --consumer-status-window 0s",
            support::EXPORTER,
            system(&["--consumer-status-window", "0s"]),
            &http,
        )
        .await,
        Measured::start(
            "HTTP, 3 --monitor-url",
            support::EXPORTER,
            monitor_urls,
            &http,
        )
        .await,
    ];
    let baseline = std::env::var("BENCH_BASELINE_EXPORTER").ok();
    if let Some(binary) = &baseline {
        let e = Measured::start(
            "system account, baseline binary",
            binary,
            system(&[]),
            &http,
        );
        exporters.push(e.await);
    }
    // Warm-up: the first survey waits out its gap, and leaders may still
    // be settling; each exporter's scrape is complete before measuring.
    for e in &mut exporters {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let text = String::from_utf8_lossy(&timed_get(&http, &e.url).await.1).into_owned();
            match complete(&text, total) {
                Ok(()) => break,
                Err(why) if Instant::now() > deadline => {
                    for line in text
                        .lines()
                        .filter(|l| l.starts_with("nats_delivery_survey_"))
                    {
                        eprintln!("{line}");
                    }
                    for server in &servers {
                        eprintln!("{} warnings and errors:", server.name);
                        let log = server.log();
                        let notable = log
                            .lines()
                            .filter(|l| l.contains("[WRN]") || l.contains("[ERR]"));
                        for line in notable.take(20) {
                            eprintln!("  {line}");
                        }
                    }
                    panic!("{}: {why}", e.name)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
    println!("load before rounds: {}", loadavg().trim());

    let (mut raw, mut slowest, mut all_at_once) = (vec![Vec::new(); 3], Vec::new(), Vec::new());
    let mut raw_bytes = 0;
    let system_raw = system_raw::SystemRaw::connect(&servers, &http).await;
    let (mut nats, mut nats_all, mut nats_bytes) = (vec![Vec::new(); 3], Vec::new(), 0);
    let mut surveys = Vec::new();
    let settle = Duration::from_millis(300);
    println!(
        "round  raw n0   raw n1   raw n2   slowest  3 at once | NATS slowest, 3 at once | system   ratio | system 0s window | HTTP x3  {}| system peak RSS",
        if baseline.is_some() { "| baseline " } else { "" }
    );
    for round in 0..rounds {
        // Steps 0-2: one server's raw fetch; 3: the three at once; 4: the
        // system request of each server alone, 5: of the three at once;
        // then each exporter. A different step goes first each round.
        let steps = 6 + exporters.len();
        for step in (0..steps).map(|k| (k + round) % steps) {
            tokio::time::sleep(settle).await;
            match step {
                0..=2 => {
                    let (took, body) = timed_get(&http, &jsz_urls[step]).await;
                    assert_eq!(consumers_in(&body), total, "raw /jsz of n{step}");
                    raw_bytes = raw_bytes.max(body.len());
                    raw[step].push(took);
                }
                3 => {
                    let start = Instant::now();
                    let bodies =
                        futures::future::join_all(jsz_urls.iter().map(|u| timed_get(&http, u)))
                            .await;
                    all_at_once.push(start.elapsed().as_secs_f64());
                    for (_, body) in bodies {
                        assert_eq!(consumers_in(&body), total, "raw /jsz, three at once");
                    }
                }
                4 => {
                    surveys.push(system_raw.survey().await);
                    for (n, times) in nats.iter_mut().enumerate() {
                        tokio::time::sleep(settle).await;
                        let (took, reply) = system_raw.jsz(n).await;
                        assert_eq!(consumers_in(&reply), total, "system JSZ of n{n}");
                        nats_bytes = nats_bytes.max(reply.len());
                        times.push(took);
                    }
                }
                5 => {
                    let start = Instant::now();
                    let replies = futures::future::join_all((0..3).map(|n| system_raw.jsz(n)));
                    for (_, reply) in replies.await {
                        assert_eq!(consumers_in(&reply), total, "system JSZ, three at once");
                    }
                    nats_all.push(start.elapsed().as_secs_f64());
                }
                e => exporters[e - 6].scrape(&http, total).await,
            }
        }
        let worst = raw.iter().map(|r| r[round]).fold(0.0, f64::max);
        slowest.push(worst);
        let took = |e: &Measured| match e.took[round] {
            Some(t) => format!("{t:.3} s "),
            None => "INCOMPLETE".into(),
        };
        let ratio = match exporters[0].took[round] {
            Some(t) => format!("{:.2}x", t / worst),
            None => "  -  ".into(),
        };
        let scrapes: Vec<String> = exporters[1..].iter().map(took).collect();
        println!(
            "{round:>5}  {:.3} s  {:.3} s  {:.3} s  {worst:.3} s  {:.3} s  | {:.3} s  {:.3} s        | {} {ratio} | {:<16} | {} | {:.1} MB",
            raw[0][round],
            raw[1][round],
            raw[2][round],
            all_at_once[round],
            nats.iter().map(|r| r[round]).fold(0.0, f64::max),
            nats_all[round],
            took(&exporters[0]),
            scrapes[0],
            scrapes[1..].join(" | "),
            exporters[0].peak_mb(),
        );
    }
    println!("load after rounds: {}", loadavg().trim());
    println!();
    println!("{streams} x {per_stream} R3 on 3 servers; setup {setup_took:.1?}; {rounds} rounds, medians (min)");
    let row = |what: &str, v: &[f64], note: String| {
        println!("{what:<46} {:.3} s ({:.3} s)  {note}", median(v), min(v));
    };
    for (n, r) in raw.iter().enumerate() {
        row(&format!("raw /jsz of n{n}"), r, String::new());
    }
    row(
        "raw /jsz, slowest of the three",
        &slowest,
        format!("({:.1} MB each)", raw_bytes as f64 / 1e6),
    );
    row("raw /jsz, three at once", &all_at_once, String::new());
    for (n, r) in nats.iter().enumerate() {
        row(&format!("system request JSZ of n{n}"), r, String::new());
    }
    let nats_slowest: Vec<f64> = (0..rounds)
        .map(|round| nats.iter().map(|r| r[round]).fold(0.0, f64::max))
        .collect();
    row(
        "system request JSZ, slowest of the three",
        &nats_slowest,
        format!("({:.1} MB each)", nats_bytes as f64 / 1e6),
    );
    row(
        "system request JSZ, three at once",
        &nats_all,
        String::new(),
    );
    row("survey (VARZ, until 3 replies)", &surveys, String::new());
    for e in &exporters {
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
    let ratios: Vec<f64> = exporters[0]
        .took
        .iter()
        .zip(&slowest)
        .filter_map(|(s, r)| Some((*s)? / r))
        .collect();
    println!(
        "system scrape / slowest raw fetch              {:.2}x median of rounds, {:.2}x of medians (target <= 1.5x, every scrape complete: {} of {rounds} were)",
        median(&ratios),
        median(&exporters[0].complete_times()) / median(&slowest),
        rounds - exporters[0].incomplete.len(),
    );
    let text = String::from_utf8_lossy(&timed_get(&http, &exporters[0].url).await.1).into_owned();
    let survey = |name: &str| value(&text, name, &[]).unwrap_or(f64::NAN);
    println!(
        "survey: {} of {} servers answered, {} late replies so far",
        survey("nats_delivery_survey_servers_answered"),
        survey("nats_delivery_survey_servers_expected"),
        survey("nats_delivery_survey_late_replies_total"),
    );
}
