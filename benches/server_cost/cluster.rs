//! The servers' cost on a 3-node cluster of R3 streams and consumers: in
//! alternating rounds, one scrape of each of three sidecar exporters (one
//! per server, `--monitor-url` of its own server), one scrape of an
//! exporter polling through the system account, one full-information fetch
//! from every server and the exporters' own fetch (`config=false`) from
//! every server. The CPU of a request is the sum over the three server
//! processes.

use std::time::{Duration, Instant};

use nats_test_server::sample::samples;
use nats_test_server::NatsServer;

use crate::setup;
use crate::support::{self, cpu_seconds, env_args, median, spawn_exporter, timed_read};
use crate::Kind;

/// The kinds of request of a cluster round.
pub const KINDS: [&str; 5] = [
    "3 sidecar scrapes",
    "system-account scrape",
    "full fetch x3",
    "own fetch x3",
    "no request, 1 s",
];

/// Consumers a scrape reports (each once, by its leader's exporter).
fn reported(text: &str) -> usize {
    samples(text, "nats_delivery_consumer_ack_pending_messages", &[]).len()
}

/// Scrapes `urls` until together they report `total` consumers (leaders
/// settle, the system account's first survey waits out its gap).
async fn warm_up(http: &reqwest::Client, urls: &[String], total: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut seen = 0;
        for url in urls {
            let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
            seen += reported(&String::from_utf8_lossy(&body));
        }
        if seen == total {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{urls:?}: {seen} of {total} consumers"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The three servers' CPU seconds together.
fn cluster_cpu(servers: &[NatsServer]) -> f64 {
    servers.iter().map(|s| cpu_seconds(s.pid())).sum()
}

/// `streams` R3 streams x 100 R3 consumers on a fresh 3-node cluster,
/// `rounds` alternating rounds.
pub async fn measure(streams: usize, rounds: usize) -> [Kind; 5] {
    let servers = nats_test_server::cluster(3, setup::ACCOUNTS);
    let made = setup::create(&servers, streams, 100).await;
    println!(
        "created {streams} R3 streams x 100 R3 consumers: cluster {:.1?}, streams {:.1?}, consumers {:.1?} ({} retries)",
        made.cluster_ready, made.streams, made.consumers, made.retries
    );
    let mut started: Vec<_> = servers
        .iter()
        .map(|server| {
            let mut args = vec!["--monitor-url".to_string(), server.monitor_url()];
            args.extend(env_args("BENCH_EXPORTER_ARGS"));
            spawn_exporter(support::EXPORTER, &args)
        })
        .collect();
    let extra = env_args("BENCH_EXPORTER_ARGS");
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    started.push(spawn_exporter(
        support::EXPORTER,
        &setup::system_account_args(&servers, &extra),
    ));
    let scrape_urls: Vec<String> = started
        .iter()
        .map(|(_, listen)| format!("http://{listen}/metrics"))
        .collect();
    let (sidecars, system) = (scrape_urls[..3].to_vec(), scrape_urls[3..].to_vec());
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let jsz = |config: bool| -> Vec<String> {
        let query = format!("accounts=true&streams=true&consumers=true&config={config}");
        servers
            .iter()
            .map(|s| format!("{}/jsz?{query}&offset=0&limit=1024", s.monitor_url()))
            .collect()
    };
    let total = streams * 100;
    // Warm-up: every exporter's first poll reads the configuration.
    for (_, listen) in &started {
        support::wait_until_up(&http, *listen).await;
    }
    for urls in [&sidecars, &system] {
        warm_up(&http, urls, total).await;
    }
    // No request: what the servers' Raft groups cost by themselves, which
    // every measured request's CPU includes for as long as it takes.
    let requests = [sidecars, system, jsz(true), jsz(false), Vec::new()];
    let mut kinds: [Kind; 5] = Default::default();
    for round in 0..rounds {
        for which in (0..KINDS.len()).map(|k| (k + round) % KINDS.len()) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before = cluster_cpu(&servers);
            let began = Instant::now();
            let mut bytes = 0;
            for url in &requests[which] {
                bytes += timed_read(&http, url, 0).await.bytes;
            }
            if requests[which].is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let k = &mut kinds[which];
            k.wall.push(began.elapsed().as_secs_f64());
            k.cpu.push(cluster_cpu(&servers) - before);
            k.bytes = bytes;
        }
        eprintln!("round {round}: load {}", loadavg());
    }
    for (mut e, _) in started {
        let _ = e.kill();
        let _ = e.wait();
    }
    println!("{streams} R3 streams x 100 R3 consumers on 3 servers, {rounds} alternating rounds");
    kinds
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The cluster's table: each kind's medians, and the scrapes against the
/// full and the own fetch from every server.
pub fn print(consumers: usize, kinds: &[Kind; 5]) {
    println!();
    println!("R3 cluster  kind                    servers' CPU (median)  wall (median)  body read");
    for (name, k) in KINDS.iter().zip(kinds) {
        println!(
            "{consumers:>9}  {name:<22}  {:>8.3} s             {:>7.3} s      {:>6.1} MB",
            median(&k.cpu),
            median(&k.wall),
            k.bytes as f64 / 1e6
        );
    }
    let [sidecars, system, full, own, idle] = kinds;
    let per_second = median(&idle.cpu) / median(&idle.wall);
    // The CPU beyond what the servers spend anyway over the same time.
    let beyond = |k: &Kind| median(&k.cpu) - per_second * median(&k.wall);
    for (name, scrape) in [("sidecars", sidecars), ("system account", system)] {
        println!(
            "{consumers:>9}  {name} / full fetch x3: CPU {:.2}x ({:.2}x beyond the idle {per_second:.3} s/s), wall {:.2}x; / own fetch x3: CPU {:.2}x, wall {:.2}x",
            median(&scrape.cpu) / median(&full.cpu),
            beyond(scrape) / beyond(full),
            median(&scrape.wall) / median(&full.wall),
            median(&scrape.cpu) / median(&own.cpu),
            median(&scrape.wall) / median(&own.wall),
        );
    }
}
