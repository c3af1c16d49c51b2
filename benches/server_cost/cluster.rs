//! The servers' cost on a 3-node cluster of R3 streams and consumers: in
//! alternating rounds, one scrape of each of three sidecar exporters (one
//! per server, `--monitor-url` of its own server), one scrape of an
//! exporter polling through the system account, one full-information fetch
//! from every server and the exporters' own fetch (`config=false`) from
//! every server. The CPU of a request is the sum over the three server
//! processes.

use std::net::SocketAddr;
use std::process::Child;
use std::time::{Duration, Instant};

use futures::future::join_all;
use nats_test_server::sample::samples;
use nats_test_server::NatsServer;

use crate::support::{self, cpu_seconds, env_args, median, spawn_exporter, timed_read};
use crate::Kind;
use crate::{requests, setup};

/// How many kinds of request a cluster round has.
pub const N: usize = 7;

/// The kinds of request of a cluster round.
pub const KINDS: [&str; N] = [
    "3 sidecar scrapes",
    "3 sidecars at once",
    "3 sidecars over NATS",
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
pub fn cluster_cpu(servers: &[NatsServer]) -> f64 {
    servers.iter().map(|s| cpu_seconds(s.pid())).sum()
}

/// `streams` R3 streams x 100 R3 consumers on a fresh 3-node cluster,
/// `rounds` alternating rounds; then each request of a poll alone
/// ([`requests::measure`]).
pub async fn measure(streams: usize, rounds: usize) -> [Kind; N] {
    let servers = nats_test_server::cluster(3, setup::ACCOUNTS);
    let made = setup::create(&servers, streams, 100).await;
    println!(
        "created {streams} R3 streams x 100 R3 consumers: cluster {:.1?}, streams {:.1?}, consumers {:.1?} ({} retries)",
        made.cluster_ready, made.streams, made.consumers, made.retries
    );
    let started = start_exporters(&servers);
    let scrape_urls: Vec<String> = started
        .iter()
        .map(|(_, listen)| format!("http://{listen}/metrics"))
        .collect();
    let sidecars = scrape_urls[..3].to_vec();
    let nats_sidecars = scrape_urls[3..6].to_vec();
    let system = scrape_urls[6..].to_vec();
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
    // Warm-up: every exporter's first poll reads the configuration.
    for (_, listen) in &started {
        support::wait_until_up(&http, *listen).await;
    }
    for urls in [&sidecars, &nats_sidecars, &system] {
        warm_up(&http, urls, streams * 100).await;
    }
    // The sidecars one after another, and at once, as a Prometheus server
    // scrapes its targets (each on its own schedule). No request: what the
    // servers' Raft groups cost by themselves, which every measured
    // request's CPU includes for as long as it takes.
    let requests = [
        sidecars.clone(),
        sidecars,
        nats_sidecars,
        system,
        jsz(true),
        jsz(false),
        Vec::new(),
    ];
    let kinds = alternate(&servers, &http, &requests, rounds).await;
    for ((child, _), url) in started.iter().zip(&scrape_urls) {
        print_own_cost(&http, url, child.id()).await;
    }
    for (mut e, _) in started {
        let _ = e.kill();
        let _ = e.wait();
    }
    println!("{streams} R3 streams x 100 R3 consumers on 3 servers, {rounds} alternating rounds");
    requests::measure(&servers, &http, rounds).await;
    kinds
}

/// A sidecar exporter per server over HTTP (its own `--monitor-url`), one
/// per server through the system account (its own server's NATS URL, the
/// survey filtered to its name), then one exporter through the system
/// account for all.
fn start_exporters(servers: &[NatsServer]) -> Vec<(Child, SocketAddr)> {
    let extra = env_args("BENCH_EXPORTER_ARGS");
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut started: Vec<_> = servers
        .iter()
        .map(|server| {
            let mut args = vec!["--monitor-url".to_string(), server.monitor_url()];
            args.extend(extra.iter().map(|a| a.to_string()));
            spawn_exporter(support::EXPORTER, &args)
        })
        .collect();
    for (n, server) in servers.iter().enumerate() {
        // The cluster's servers are n0, n1, n2: no name holds another.
        let name = format!("n{n}");
        let mut own = vec!["--system-server-name", name.as_str()];
        own.extend(extra.iter().copied());
        let args = setup::system_account_args(std::slice::from_ref(server), &own);
        started.push(spawn_exporter(support::EXPORTER, &args));
    }
    started.push(spawn_exporter(
        support::EXPORTER,
        &setup::system_account_args(servers, &extra),
    ));
    started
}

/// `rounds` rounds of every kind of request (`requests[1]`'s URLs read at
/// once, every other kind's one after another; none: one second idle), in
/// an order that turns each round.
async fn alternate(
    servers: &[NatsServer],
    http: &reqwest::Client,
    requests: &[Vec<String>; N],
    rounds: usize,
) -> [Kind; N] {
    let mut kinds: [Kind; N] = Default::default();
    for round in 0..rounds {
        for which in (0..KINDS.len()).map(|k| (k + round) % KINDS.len()) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before = cluster_cpu(servers);
            let began = Instant::now();
            let mut bytes = 0;
            if which == 1 {
                let reads = requests[which].iter().map(|url| timed_read(http, url, 0));
                bytes = join_all(reads).await.iter().map(|r| r.bytes).sum();
            } else {
                for url in &requests[which] {
                    bytes += timed_read(http, url, 0).await.bytes;
                }
            }
            if requests[which].is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let k = &mut kinds[which];
            k.wall.push(began.elapsed().as_secs_f64());
            k.cpu.push(cluster_cpu(servers) - before);
            k.bytes = bytes;
        }
        eprintln!("round {round}: load {}", support::load_average());
    }
    kinds
}

/// What one more scrape of the exporter at `url` asked of each server, by
/// its own metrics: the reply bytes per source, and whether its /jsz poll
/// read the configuration (a scrape in the rounds should not have); and
/// the exporter's (process `pid`) peak resident memory so far.
async fn print_own_cost(http: &reqwest::Client, url: &str, pid: u32) {
    let body = http.get(url).send().await.unwrap().text().await.unwrap();
    let config = samples(&body, "nats_delivery_jsz_config_read", &[]);
    let bytes = samples(&body, "nats_delivery_scrape_reply_bytes", &[]);
    let peak = support::status_kib(pid, "VmHWM:") as f64 / 1024.0;
    println!("{url}: peak RSS {peak:.1} MiB; config read {config:?}; reply bytes {bytes:?}");
}

/// The cluster's table: each kind's medians, and the scrapes against the
/// full and the own fetch from every server.
pub fn print(consumers: usize, kinds: &[Kind; N]) {
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
    let [sidecars, at_once, nats_sidecars, system, full, own, idle] = kinds;
    let per_second = median(&idle.cpu) / median(&idle.wall);
    // The CPU beyond what the servers spend anyway over the same time.
    let beyond = |k: &Kind| median(&k.cpu) - per_second * median(&k.wall);
    let scrapes = [
        ("sidecars", sidecars),
        ("sidecars at once", at_once),
        ("sidecars over NATS", nats_sidecars),
        ("system account", system),
    ];
    for (name, scrape) in scrapes {
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
