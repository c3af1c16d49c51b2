//! What a scrape costs the server it watches, measured in one run against a
//! real server: S streams x 100 consumers, then, in alternating rounds, one
//! scrape of the exporter binary (default flags), one full-information
//! fetch (`/jsz?accounts=true&streams=true&consumers=true&config=true`, what
//! any exporter must ask to report what this one reports), and the
//! exporter's own fetch between configuration reads (the same with
//! `config=false`). For each: the server process's CPU time (its CPU-time
//! clock, all threads, in nanoseconds) and the wall time; at the end, the
//! exporter's peak resident memory (`VmHWM`, decimal MB).
//! Ratios are taken within one run, so other work on the machine weighs on
//! both sides alike.
//!
//! `cargo bench --bench server_cost`; `BENCH_SIZES=10000,30000,100000`
//! (the default) picks the totals, `BENCH_ROUNDS` the rounds per size (9),
//! `BENCH_EXPORTER_ARGS` adds flags to the exporter. `BENCH_CLUSTER_SIZES`
//! (none by default; `BENCH_SIZES=` empty skips the single server) measures
//! a 3-node cluster of R3 streams and consumers first: three sidecar
//! exporters and one through the system account against a fetch from every
//! server, the CPU summed over the three servers (`TMPDIR=/dev/shm` keeps
//! the Raft logs off the disk), and then each request of a poll alone, over
//! HTTP and through the system account.
//!
//! The exporter's scrape reads every default source (`/varz`, `/connz`
//! twice, `/jsz`, `/accstatz`); its `/jsz` asks for configuration on the
//! first poll (the warm-up) and then every `--jsz-config-interval` (5m):
//! the rounds measure the polls in between.
//!
//! Last, the worst-case window (`support/worst.rs`): a jump from 10,000 to
//! 100,000 consumers, 21 rounds 2 s apart with a full `/jsz` fetch beside
//! each scrape, a configuration refresh among them and a new exporter's
//! first scrape: the median, p95 and maximum scrape time, the failed
//! scrapes and the server's CPU a round, beside the targets.
//! `BENCH_WORST_CONSUMERS` sets its size (0 skips it), `BENCH_WORST_BEFORE`
//! and `BENCH_WORST_ROUNDS` the rest.

#[path = "server_cost/cluster.rs"]
mod cluster;
#[path = "server_cost/requests.rs"]
mod requests;
#[path = "system_scrape/setup.rs"]
mod setup;
mod support;
#[path = "system_scrape/system_raw.rs"]
mod system_raw;

use std::time::Duration;

use nats_test_server::NatsServer;
use support::worst::{self, Window};
use support::{
    cpu_seconds, create_consumers, env_args, env_or, median, spawn_exporter, status_kib,
    timed_read, wait_until_up,
};

/// The kinds of request of a round.
const KINDS: [&str; 3] = ["exporter scrape", "full fetch", "exporter's own fetch"];

/// Server CPU seconds and wall seconds of each request of one kind.
#[derive(Default)]
pub struct Kind {
    pub cpu: Vec<f64>,
    pub wall: Vec<f64>,
    pub bytes: usize,
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sizes = totals("BENCH_SIZES", "10000,30000,100000");
    let rounds = env_or("BENCH_ROUNDS", 9);
    for consumers in totals("BENCH_CLUSTER_SIZES", "") {
        let kinds = cluster::measure(consumers / 100, rounds).await;
        cluster::print(consumers, &kinds);
    }
    let mut table = Vec::new();
    for consumers in sizes {
        table.push((consumers, measure(consumers / 100, rounds).await));
    }
    let worst = match Window::from_env() {
        Some(window) => Some(worst::measure(&window).await),
        None => None,
    };
    println!();
    println!("consumers  kind                  server CPU (median)  wall (median)  body read");
    for (consumers, kinds) in &table {
        for (name, k) in KINDS.iter().zip(&kinds.0) {
            println!(
                "{consumers:>9}  {name:<20}  {:>8.3} s           {:>7.3} s      {:>6.1} MB",
                median(&k.cpu),
                median(&k.wall),
                k.bytes as f64 / 1e6
            );
        }
        let [scrape, full, own] = &kinds.0;
        let ratio = |a: &Kind, b: &Kind, f: fn(&Kind) -> &Vec<f64>| median(f(a)) / median(f(b));
        println!(
            "{consumers:>9}  scrape / full fetch: CPU {:.2}x, wall {:.2}x; scrape / own fetch: CPU {:.2}x, wall {:.2}x",
            ratio(scrape, full, |k| &k.cpu),
            ratio(scrape, full, |k| &k.wall),
            ratio(scrape, own, |k| &k.cpu),
            ratio(scrape, own, |k| &k.wall),
        );
        println!(
            "{consumers:>9}  exporter peak RSS (VmHWM, after the warm-up and every round): {:.1} MB",
            kinds.1
        );
    }
    if let Some(figures) = worst {
        figures.print();
        figures.print_server_cpu();
    }
}

/// The comma-separated totals of consumers in the variable `name`.
fn totals(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.trim().parse().expect("consumer totals"))
        .collect()
}

/// `streams` x 100 consumers on a fresh server, `rounds` alternating rounds;
/// with the exporter's peak resident memory (MB, decimal).
async fn measure(streams: usize, rounds: usize) -> ([Kind; 3], f64) {
    let server = NatsServer::builder().jetstream().start();
    create_consumers(&server, streams, 100).await;
    let mut args = vec!["--monitor-url".to_string(), server.monitor_url()];
    args.extend(env_args("BENCH_EXPORTER_ARGS"));
    let (mut exporter, listen) = spawn_exporter(support::EXPORTER, &args);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    wait_until_up(&http, listen).await;
    let jsz = |config: bool| {
        format!(
            "{}/jsz?accounts=true&streams=true&consumers=true&config={config}&offset=0&limit=1024",
            server.monitor_url()
        )
    };
    let urls = [format!("http://{listen}/metrics"), jsz(true), jsz(false)];
    // Warm-up: the exporter's first poll reads the configuration.
    for url in &urls {
        timed_read(&http, url, 0).await;
    }
    let mut kinds: [Kind; 3] = Default::default();
    for round in 0..rounds {
        for which in (0..KINDS.len()).map(|k| (k + round) % KINDS.len()) {
            // A pause: the server's garbage collection after one large
            // reply must not fall on whichever request comes next.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let before = cpu_seconds(server.pid());
            let read = timed_read(&http, &urls[which], 0).await;
            let k = &mut kinds[which];
            k.cpu.push(cpu_seconds(server.pid()) - before);
            k.wall.push(read.seconds);
            k.bytes = read.bytes;
        }
    }
    let peak_mb = status_kib(exporter.id(), "VmHWM:") as f64 * 1024.0 / 1e6;
    let _ = exporter.kill();
    let _ = exporter.wait();
    println!("{streams} streams x 100 consumers, {rounds} alternating rounds");
    (kinds, peak_mb)
}
