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
//! release binary of an earlier commit, say). `BENCH_HOLD=1`
//! only sets up the first size and keeps its server running, for profiling
//! an exporter started by hand.

mod support;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::stream::{self as fstream, StreamExt};
use nats_test_server::NatsServer;
use support::{
    cpu_seconds, env_args, env_or, median, min, status_kib, timed_read, timed_read_gzip,
    wait_until_up,
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
    println!("consumers   raw /jsz   scrape    scrape/raw (median, min)   peak RSS   text       gzip scrape  gzip/raw  on the wire");
    for r in rows {
        let gzip = r.gzip.map_or(String::new(), |(s, mb)| {
            format!("{s:>6.3} s     {:>5.2}x    {mb:>5.1} MB", s / r.raw)
        });
        println!(
            "{:>9}   {:>6.3} s  {:>6.3} s  {:>5.2}x  {:>5.2}x              {:>5.1} MB  {:>5.1} MB   {gzip}",
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
    if std::env::var_os("BENCH_HOLD").is_some() {
        // For profiling an exporter by hand against the same server.
        eprintln!(
            "holding the server at {} until interrupted",
            server.monitor_url()
        );
        std::future::pending::<()>().await;
    }

    let (mut exporter, listen) = spawn_exporter(&server, &env_args("BENCH_EXPORTER_ARGS"));
    let pid = exporter.id();
    let compare_args = env_args("BENCH_COMPARE_ARGS");
    let compare_binary = std::env::var("BENCH_COMPARE_BINARY").ok();
    let mut other = (!compare_args.is_empty() || compare_binary.is_some()).then(|| {
        let binary = compare_binary.as_deref().unwrap_or(support::EXPORTER);
        spawn_binary(binary, &server, &compare_args)
    });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let metrics_url = format!("http://{listen}/metrics");
    let jsz_url = format!(
        "{}/jsz?accounts=true&streams=true&consumers=true&config=true&offset=0&limit=1024",
        server.monitor_url()
    );
    wait_until_up(&http, listen).await;
    let other_url = other.as_ref().map(|(_, l)| format!("http://{l}/metrics"));
    if let Some((_, l)) = &other {
        wait_until_up(&http, *l).await;
    }
    // One warm-up of each; the first scrape also reads the closed-connection
    // ring. It asks for gzip, to say whether the exporter answers compressed
    // (then a compressed scrape would be measured too).
    let _ = timed_read(&http, &jsz_url, 0).await;
    let warm_up = http
        .get(&metrics_url)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    let encoding = warm_up.headers().get("content-encoding").cloned();
    let gzip_url = encoding.is_some().then(|| metrics_url.clone());
    let _ = warm_up.bytes().await.unwrap();
    println!(
        "asked for gzip, the exporter answered {}",
        encoding.map_or(
            "uncompressed (no compressed scrape to measure)".into(),
            |e| { format!("with Content-Encoding {e:?}") }
        )
    );
    if let Some(url) = &other_url {
        let _ = timed_read(&http, url, 0).await;
    }
    let mut other_scrape = Vec::new();
    let rss_idle_kib = status_kib(pid, "VmRSS:");
    let (mut raw, mut scrape, mut cpu, mut jsz_poll) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut raw_bytes, mut scrape_bytes) = (0, 0);
    let (mut raw_first, mut text_sent) = (Vec::new(), Vec::new());
    // The order alternates and each request starts after a pause: the
    // server's garbage collection after one 11 MB reply must not fall on
    // whichever request happens to come next.
    let settle = Duration::from_millis(300);
    let (mut gzip, mut gzip_bytes) = (Vec::new(), 0);
    for round in 0..rounds {
        let kinds = 4;
        for which in (0..kinds).map(|k| (k + round) % kinds) {
            if let (2, Some(url)) = (which, &other_url) {
                tokio::time::sleep(settle).await;
                // Read as the first exporter's scrape is, its head kept:
                // keeping 16 MB costs the reader time the comparison must
                // not count against one of the two.
                other_scrape.push(timed_read(&http, url, HEAD_KEPT).await.seconds);
                continue;
            }
            if let (3, Some(url)) = (which, &gzip_url) {
                tokio::time::sleep(settle).await;
                let read = timed_read_gzip(&http, url).await;
                gzip.push(read.seconds);
                gzip_bytes = read.bytes;
                continue;
            }
            if which >= 2 {
                continue;
            }
            tokio::time::sleep(settle).await;
            if which == 0 {
                let read = timed_read(&http, &jsz_url, 0).await;
                raw.push(read.seconds);
                raw_first.push(read.first_byte);
                raw_bytes = read.bytes;
                continue;
            }
            let before = cpu_seconds(pid);
            // The registry part, with the scrape's own durations, comes first.
            let read = timed_read(&http, &metrics_url, HEAD_KEPT).await;
            cpu.push(cpu_seconds(pid) - before);
            scrape.push(read.seconds);
            text_sent.push(read.seconds - read.first_byte);
            scrape_bytes = read.bytes;
            let text = String::from_utf8_lossy(&read.head);
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
    if let Some((mut child, _)) = other.take() {
        let other_peak_kib = status_kib(child.id(), "VmHWM:");
        let _ = child.kill();
        let _ = child.wait();
        println!(
            "vs {} {:?}: scrape {:.3} s / {:.3} s = {:.3}x (median), peak RSS {:.1} MB / {:.1} MB = {:+.1} MB",
            compare_binary.as_deref().unwrap_or("this build"),
            compare_args,
            median(&scrape),
            median(&other_scrape),
            median(&scrape) / median(&other_scrape),
            peak_kib as f64 / 1024.0,
            other_peak_kib as f64 / 1024.0,
            (peak_kib as f64 - other_peak_kib as f64) / 1024.0
        );
    }
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
        "  of which first byte",
        &raw_first,
        "(the server's work before it sends)".into(),
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
    row(
        "  of which text sent",
        &text_sent,
        "(from the text's first byte to its last)".into(),
    );
    row("exporter CPU per scrape", &cpu, String::new());
    if !gzip.is_empty() {
        row(
            "gzip scrape",
            &gzip,
            format!("({:.1} MB on the wire)", gzip_bytes as f64 / 1e6),
        );
        println!(
            "gzip scrape / raw fetch    {:.2}x / {:.2}x",
            median(&gzip) / median(&raw),
            min(&gzip) / min(&raw)
        );
    }
    println!(
        "scrape / raw fetch         {:.2}x / {:.2}x  (goal at 100,000 consumers: <= 1.2x)",
        median(&scrape) / median(&raw),
        min(&scrape) / min(&raw)
    );
    println!(
        "exporter RSS idle / peak   {:.1} MB / {:.1} MB  (goal at 100,000 consumers: <= 96 MB)",
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
        gzip: (!gzip.is_empty()).then(|| (median(&gzip), gzip_bytes as f64 / 1e6)),
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
