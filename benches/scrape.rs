//! Scrape cost at scale, measured in one run against a real server:
//! S streams x C consumers (default 100 x 100), then, interleaved, the raw
//! `/jsz` fetch the exporter makes and a full `/metrics` scrape of the
//! exporter binary; CPU time per scrape and peak resident memory of the
//! exporter process from /proc. Both are read as a scraper that does not
//! keep the body reads them (as `curl -o /dev/null`): the time is the
//! server's and the exporter's, not the client's copying of 110 or 190 MB.
//!
//! `cargo bench --bench scrape` measures the curve at 10k, 30k, 60k and 100k
//! consumers (100 per stream, a fresh server each) and ends with one table;
//! `BENCH_SIZES=10000,30000` picks the totals, `BENCH_STREAMS` and
//! `BENCH_CONSUMERS` one size, `BENCH_ROUNDS` the rounds per size.
//! `BENCH_EXPORTER_ARGS` adds flags to the exporter measured. With
//! `BENCH_COMPARE_ARGS` (e.g. `--consumer-status-window 0s`) a second
//! exporter with those flags is scraped in the same rounds, interleaved,
//! and the two are compared (scrape time and peak memory);
//! `BENCH_COMPARE_BINARY` makes that second exporter another build (a
//! release binary of an earlier commit, say). `PEER_CMD` measures a peer
//! exporter (prometheus-nats-exporter, nats-surveyor) in the same rounds:
//! scrape time, CPU, peak memory, series, and the server's CPU per scrape
//! beside the exporter's (`scrape/peer.rs`). `BENCH_HOLD=1`
//! only sets up the first size and keeps its server running, for profiling
//! an exporter started by hand.
//!
//! Then the worst-case window (`support/worst.rs`): a jump from 10,000 to
//! 100,000 consumers, 21 rounds 2 s apart with a full `/jsz` fetch beside
//! each scrape, a configuration refresh among them and a new exporter's
//! first scrape; its median, p95 and maximum scrape time and its failed
//! scrapes, beside the targets. `BENCH_WORST_CONSUMERS` sets its size (0
//! skips it), `BENCH_WORST_BEFORE` and `BENCH_WORST_ROUNDS` the rest.

#[path = "scrape/peer.rs"]
mod peer;
#[path = "scrape/samples.rs"]
mod samples;
mod support;

use std::time::Duration;

use nats_test_server::NatsServer;
use peer::Peer;
use samples::Samples;
use support::worst::{self, Window};
use support::{
    create_consumers, env_args, env_or, median, min, status_kib, timed_read, wait_until_up,
};

/// The first bytes of a scrape kept, for the `/jsz` poll's duration.
const HEAD_KEPT: usize = 16 << 20;

/// One size's figures, for the closing table.
struct Row {
    consumers: usize,
    raw: f64,
    scrape: f64,
    ratio_median: f64,
    ratio_min: f64,
    peak_mb: f64,
    text_mb: f64,
    /// The compressed scrape: median seconds and MB on the wire.
    gzip: Option<(f64, f64)>,
    /// The peer's median scrape, peak RSS in MB and series.
    peer: Option<(f64, f64, usize)>,
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
    let worst = match Window::from_env() {
        Some(window) => Some(worst::measure(&window).await),
        None => None,
    };
    println!();
    println!("consumers   raw /jsz   scrape    scrape/raw (median, min)   peak RSS   text       gzip scrape  gzip/raw  on the wire");
    for r in rows {
        let gzip = r.gzip.map_or(String::new(), |(s, mb)| {
            format!("{s:>6.3} s     {:>5.2}x    {mb:>5.1} MB", s / r.raw)
        });
        println!(
            "{:>9}   {:>6.3} s  {:>6.3} s  {:>5.2}x  {:>5.2}x              {:>5.1} MB  {:>5.1} MB   {gzip}",
            r.consumers, r.raw, r.scrape, r.ratio_median, r.ratio_min, r.peak_mb, r.text_mb
        );
        if let Some((scrape, peak, series)) = r.peer {
            println!(
                "{:>9}   peer: scrape {scrape:.3} s, peak RSS {peak:.1} MB, {series} series",
                r.consumers
            );
        }
    }
    if let Some(figures) = worst {
        figures.print();
    }
}

/// Creates `streams` x `consumers` on a fresh server and measures `rounds`
/// alternating raw fetches and scrapes.
async fn measure(streams: usize, consumers: usize, rounds: usize) -> Row {
    let server = NatsServer::builder().jetstream().start();
    create_consumers(&server, streams, consumers).await;
    if std::env::var_os("BENCH_HOLD").is_some() {
        // For profiling an exporter by hand against the same server.
        eprintln!(
            "holding the server at {} until interrupted",
            server.monitor_url()
        );
        std::future::pending::<()>().await;
    }
    let mut targets = Targets::start(&server).await;
    let rss_idle_kib = status_kib(targets.pid, "VmRSS:");
    let mut samples = Samples::default();
    for round in 0..rounds {
        samples.take_round(&targets, round).await;
    }
    let peak_kib = status_kib(targets.pid, "VmHWM:");
    let peer_peak_kib = targets.peer.as_ref().map(|p| status_kib(p.pid, "VmHWM:"));
    targets.stop_and_compare(&samples, peak_kib);
    println!("streams x consumers        {streams} x {consumers}");
    println!("rounds                     {rounds}, alternating, 300 ms apart (median / min)");
    samples.print(rss_idle_kib, peak_kib);
    if let (Some(peer), Some(kib)) = (&targets.peer, peer_peak_kib) {
        samples.print_peer(&peer.command, kib);
    }
    Row {
        consumers: streams * consumers,
        raw: median(&samples.raw),
        scrape: median(&samples.scrape),
        ratio_median: median(&samples.scrape) / median(&samples.raw),
        ratio_min: min(&samples.scrape) / min(&samples.raw),
        peak_mb: peak_kib as f64 / 1024.0,
        text_mb: samples.scrape_bytes as f64 / 1e6,
        gzip: (!samples.gzip.is_empty())
            .then(|| (median(&samples.gzip), samples.gzip_bytes as f64 / 1e6)),
        peer: peer_peak_kib.map(|kib| {
            (
                median(&samples.peer_scrape),
                kib as f64 / 1024.0,
                samples.peer_series,
            )
        }),
    }
}

/// What one size measures: the server's `/jsz`, the exporter, and the
/// exporter compared with it when asked.
struct Targets {
    exporter: std::process::Child,
    pid: u32,
    http: reqwest::Client,
    metrics_url: String,
    jsz_url: String,
    /// The exporter's own URL when it answers gzip.
    gzip_url: Option<String>,
    other: Option<(std::process::Child, String)>,
    compare_args: Vec<String>,
    compare_binary: Option<String>,
    /// The peer of `PEER_CMD`, and the server's pid for its CPU.
    peer: Option<Peer>,
    server_pid: u32,
}

impl Targets {
    /// Starts the exporter (and the compared one), and warms each up once.
    async fn start(server: &NatsServer) -> Targets {
        let (exporter, listen) = spawn_exporter(server, &env_args("BENCH_EXPORTER_ARGS"));
        let compare_args = env_args("BENCH_COMPARE_ARGS");
        let compare_binary = std::env::var("BENCH_COMPARE_BINARY").ok();
        let other = (!compare_args.is_empty() || compare_binary.is_some()).then(|| {
            let binary = compare_binary.as_deref().unwrap_or(support::EXPORTER);
            spawn_binary(binary, server, &compare_args)
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        wait_until_up(&http, listen).await;
        if let Some((_, l)) = &other {
            wait_until_up(&http, *l).await;
        }
        let peer = Peer::start(server);
        if let Some(p) = &peer {
            p.wait_up(&http).await;
        }
        let mut targets = Targets {
            pid: exporter.id(),
            exporter,
            http,
            metrics_url: format!("http://{listen}/metrics"),
            jsz_url: format!(
                "{}/jsz?accounts=true&streams=true&consumers=true&config=true&offset=0&limit=1024",
                server.monitor_url()
            ),
            gzip_url: None,
            other: other.map(|(child, l)| (child, format!("http://{l}/metrics"))),
            compare_args,
            compare_binary,
            peer,
            server_pid: server.pid(),
        };
        targets.warm_up().await;
        targets
    }

    /// One warm-up of each; the first scrape also reads the closed-connection
    /// ring. It asks for gzip, to say whether the exporter answers compressed
    /// (then a compressed scrape is measured too).
    async fn warm_up(&mut self) {
        let _ = timed_read(&self.http, &self.jsz_url, 0).await;
        let warm_up = self
            .http
            .get(&self.metrics_url)
            .header("Accept-Encoding", "gzip")
            .send()
            .await
            .unwrap();
        let encoding = warm_up.headers().get("content-encoding").cloned();
        self.gzip_url = encoding.is_some().then(|| self.metrics_url.clone());
        let _ = warm_up.bytes().await.unwrap();
        println!(
            "asked for gzip, the exporter answered {}",
            encoding.map_or(
                "uncompressed (no compressed scrape to measure)".into(),
                |e| { format!("with Content-Encoding {e:?}") }
            )
        );
        if let Some((_, url)) = &self.other {
            let _ = timed_read(&self.http, url, 0).await;
        }
        if let Some(peer) = &self.peer {
            let _ = timed_read(&self.http, &peer.url, 0).await;
        }
    }

    /// Stops both exporters and prints the comparison, if there is one.
    fn stop_and_compare(&mut self, samples: &Samples, peak_kib: u64) {
        let _ = self.exporter.kill();
        let _ = self.exporter.wait();
        if let Some(peer) = &mut self.peer {
            peer.stop();
        }
        let Some((mut child, _)) = self.other.take() else {
            return;
        };
        let other_peak_kib = status_kib(child.id(), "VmHWM:");
        let _ = child.kill();
        let _ = child.wait();
        let (scrape, other) = (median(&samples.scrape), median(&samples.other_scrape));
        println!(
            "vs {} {:?}: scrape {:.3} s / {:.3} s = {:.3}x (median), peak RSS {:.1} MB / {:.1} MB = {:+.1} MB",
            self.compare_binary.as_deref().unwrap_or("this build"),
            self.compare_args,
            scrape,
            other,
            scrape / other,
            peak_kib as f64 / 1024.0,
            other_peak_kib as f64 / 1024.0,
            (peak_kib as f64 - other_peak_kib as f64) / 1024.0
        );
    }
}

/// Starts the exporter binary polling `server`, with `extra` flags.
fn spawn_exporter(
    server: &NatsServer,
    extra: &[String],
) -> (std::process::Child, std::net::SocketAddr) {
    spawn_binary(support::EXPORTER, server, extra)
}

/// Starts the exporter `binary` (another build, to compare) polling `server`.
fn spawn_binary(
    binary: &str,
    server: &NatsServer,
    extra: &[String],
) -> (std::process::Child, std::net::SocketAddr) {
    let mut args = vec!["--monitor-url".to_string(), server.monitor_url()];
    args.extend_from_slice(extra);
    support::spawn_exporter(binary, &args)
}
