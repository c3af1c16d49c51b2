//! Memory follows what is kept, not what is sent: the exporter binary, with
//! default flags, polls an endpoint that answers every source at once with
//! a reply without end (whitespace, lists of valid-looking entries, one
//! huge string, in turn at every place a source keeps or skips), and its
//! peak resident memory stays under 128 MB while every source is left down;
//! and the largest `/jsz` reply it accepts (as many consumers as the budget
//! takes) keeps it under 128 MB too, consumer health and text included.
use crate::common;

use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::fake_endpoint::{self, Reply};
use nats_test_server::sample::{samples, value};
use nats_test_server::wait::Wait;

/// The most the exporter may hold, with default flags, whatever it is sent.
const PEAK_LIMIT: u64 = 128_000_000;

/// The sources polled by default, and every source.
const DEFAULT_SOURCES: [&str; 4] = ["varz", "connz", "jsz", "accstatz"];
const ALL_SOURCES: [&str; 7] = [
    "varz", "connz", "jsz", "accstatz", "routez", "gatewayz", "healthz",
];

/// Scrapes per kind of reply: each takes a reply of every source, and each
/// `/jsz` another of the places below.
const SCRAPES: usize = 4;

struct Exporter {
    child: Child,
    url: String,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    fn start(monitor_url: &str, args: &[&str]) -> Exporter {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args(["--monitor-url", monitor_url])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(args)
            .env("NATS_DELIVERY_LOG", "error")
            .spawn()
            .unwrap();
        Exporter {
            child,
            url: format!("http://127.0.0.1:{port}/metrics"),
        }
    }

    /// Peak resident memory so far (`VmHWM`), in bytes.
    fn peak(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    }
}

/// A hostile reply for `path`, the `n`th `/jsz` asked for: the text that
/// leads to where it goes on without end, and what repeats.
type Hostile = fn(&str, usize) -> (String, &'static str);

/// Where a `/jsz` reply's endless part goes: outside the streams (the
/// skeleton, held until the end), inside one stream (held until the stream
/// ends), or as streams one after the other (each parsed as it ends).
const JSZ_PLACES: [&str; 3] = [
    r#"{"account_details":["#,
    r#"{"account_details":[{"name":"A","stream_detail":[{"name":"S","consumer_detail":["#,
    r#"{"account_details":[{"name":"A","stream_detail":["#,
];

fn whitespace(path: &str, n: usize) -> (String, &'static str) {
    let lead = match path {
        p if p.starts_with("/jsz") => JSZ_PLACES[n % 2],
        _ => r#"{"server_id":"#,
    };
    (lead.to_string(), "      \n")
}

fn lists(path: &str, n: usize) -> (String, &'static str) {
    match path {
        p if p.starts_with("/jsz") => match n % 3 {
            0 => (JSZ_PLACES[0].into(), r#"{"name":"A","id":"B"},"#),
            1 => (JSZ_PLACES[1].into(), r#"{"name":"c","num_pending":1},"#),
            _ => (
                JSZ_PLACES[2].into(),
                r#"{"name":"S","consumer_detail":[{"name":"c"},{"name":"d"}]},"#,
            ),
        },
        p if p.starts_with("/connz") => (
            r#"{"connections":["#.into(),
            r#"{"cid":1,"name":"n","account":"a","pending_bytes":1},"#,
        ),
        p if p.starts_with("/accstatz") => (
            r#"{"account_statz":["#.into(),
            r#"{"acc":"a","slow_consumers":1},"#,
        ),
        p if p.starts_with("/routez") => (
            r#"{"routes":["#.into(),
            r#"{"rid":1,"remote_id":"r","pending_size":1},"#,
        ),
        p if p.starts_with("/gatewayz") => (
            r#"{"inbound_gateways":{"g":["#.into(),
            r#"{"name":"g","connection":{"cid":1,"pending_bytes":1}},"#,
        ),
        p if p.starts_with("/healthz") => (
            r#"{"status":"error","errors":["#.into(),
            r#"{"type":"STREAM","error":"stream not current"},"#,
        ),
        // A list of lists the exporter skips.
        _ => (r#"{"tags":["#.into(), "[1,[2]],"),
    }
}

fn strings(path: &str, n: usize) -> (String, &'static str) {
    let lead = match path {
        p if p.starts_with("/jsz") => match n % 2 {
            0 => format!(r#"{}{{"name":""#, JSZ_PLACES[0]),
            _ => format!(r#"{}{{"name":""#, JSZ_PLACES[1]),
        },
        p if p.starts_with("/connz") => r#"{"connections":[{"name":""#.into(),
        p if p.starts_with("/accstatz") => r#"{"account_statz":[{"acc":""#.into(),
        p if p.starts_with("/healthz") => r#"{"errors":[{"error":""#.into(),
        _ => r#"{"server_name":""#.into(),
    };
    (lead, "abcdefgh")
}

/// Polls an endpoint answering every source with `hostile` replies and
/// requires the exporter's peak memory to stay within [`PEAK_LIMIT`].
async fn bounded_against(kind: &str, hostile: Hostile, sources: &[&str]) {
    let jsz_asked = Arc::new(AtomicUsize::new(0));
    let asked = jsz_asked.clone();
    let endpoint = fake_endpoint::start(move |path| {
        let n = if path.starts_with("/jsz") {
            asked.fetch_add(1, Ordering::SeqCst)
        } else {
            0
        };
        let (lead, unit) = hostile(path, n);
        Reply::Repeat(lead, unit)
    })
    .await;
    let sources_flag = sources.join(",");
    let exporter = Exporter::start(&endpoint.url, &["--sources", &sources_flag]);
    let mut text = String::new();
    for _ in 0..SCRAPES {
        text = Wait::secs("a scrape", 30)
            .every(std::time::Duration::from_millis(200))
            .until_async(|| async { reqwest::get(&exporter.url).await.ok()?.text().await.ok() })
            .await;
    }
    let server = endpoint.authority.as_str();
    for source in sources {
        let labels = [("server", server), ("source", source)];
        assert_eq!(
            value(&text, "nats_delivery_up", &labels),
            Some(0.0),
            "{kind}: {source}"
        );
        let errors: f64 = samples(&text, "nats_delivery_scrape_errors_total", &labels)
            .iter()
            .map(|(_, v)| v)
            .sum();
        assert!(
            errors >= SCRAPES as f64,
            "{kind}: {source}: {errors} errors"
        );
    }
    assert!(jsz_asked.load(Ordering::SeqCst) >= SCRAPES);
    let peak = exporter.peak();
    println!("{kind}: peak {:.1} MB", peak as f64 / 1e6);
    assert!(
        peak <= PEAK_LIMIT,
        "{kind}, sources {sources:?}: peak {:.1} MB",
        peak as f64 / 1e6
    );
}

/// Consumers of a reply that the default budget takes: each one counts 710
/// bytes (`sources::jsz::de`), a stream of 100 some 72 KB kept and 90 KB
/// while it is parsed, plus some 65 bytes of what is kept between
/// configuration reads (`sources::jsz::config_memory`, whose table doubles
/// past 114,688 consumers): 88 MiB hold some 114,000 consumers.
const MOST_CONSUMERS: usize = 110_000;

/// A `/jsz` reply of `consumers` consumers, 100 a stream, each with a
/// message waiting (a status to decide, lag to estimate).
fn jsz_of(consumers: usize) -> String {
    let stream = |s: usize| {
        let consumers: Vec<String> = (0..100)
            .map(|c| format!(r#"{{"name":"c{c:02}","num_pending":1}}"#))
            .collect();
        format!(
            r#"{{"name":"S{s:05}","state":{{"messages":1,"first_seq":1,"last_seq":1,"first_ts":"2026-01-01T00:00:00Z","last_ts":"2026-01-01T00:00:00Z"}},"consumer_detail":[{}]}}"#,
            consumers.join(",")
        )
    };
    let streams: Vec<String> = (0..consumers / 100).map(stream).collect();
    format!(
        r#"{{"now":"2026-01-01T00:00:10Z","account_details":[{{"name":"A","stream_detail":[{}]}}]}}"#,
        streams.join(",")
    )
}

/// The exporter's text after `SCRAPES` scrapes of an endpoint answering
/// `/jsz` with a reply of `consumers` consumers, its `server` label, and its
/// peak memory.
async fn scrapes_of(consumers: usize) -> (String, String, u64) {
    let jsz = jsz_of(consumers);
    let endpoint = fake_endpoint::start(move |path| {
        let body = if path.starts_with("/jsz") {
            jsz.clone()
        } else {
            "{}".into()
        };
        Reply::Fixed("200 OK", body)
    })
    .await;
    // Time is not what this test is about: a debug build on a loaded
    // machine can take longer than the default 5 s to read the reply up to
    // its refusal, which would be counted as a timeout instead.
    let exporter = Exporter::start(&endpoint.url, &["--timeout", "60s"]);
    let mut text = String::new();
    for _ in 0..SCRAPES {
        text = Wait::secs("a scrape", 60)
            .every(std::time::Duration::from_millis(200))
            .until_async(|| async { reqwest::get(&exporter.url).await.ok()?.text().await.ok() })
            .await;
    }
    (text, endpoint.authority.clone(), exporter.peak())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_reply_taken_keeps_memory_bounded() {
    let (text, server, peak) = scrapes_of(MOST_CONSUMERS).await;
    let labels = [("server", server.as_str()), ("source", "jsz")];
    assert_eq!(value(&text, "nats_delivery_up", &labels), Some(1.0));
    let statuses = samples(&text, "nats_delivery_consumer_status", &[]);
    assert_eq!(statuses.len(), MOST_CONSUMERS);
    println!(
        "{MOST_CONSUMERS} consumers: peak {:.1} MB",
        peak as f64 / 1e6
    );
    assert!(peak <= PEAK_LIMIT, "peak {:.1} MB", peak as f64 / 1e6);
    // Some 10,000 consumers more pass the budget: refused, whole.
    let (text, server, _) = scrapes_of(MOST_CONSUMERS + 10_000).await;
    let labels = [("server", server.as_str()), ("source", "jsz")];
    assert_eq!(value(&text, "nats_delivery_up", &labels), Some(0.0));
    let too_large = [("server", server.as_str()), ("kind", "too_large")];
    assert_eq!(
        value(&text, "nats_delivery_scrape_errors_total", &too_large),
        Some(SCRAPES as f64),
        "{:?}",
        samples(&text, "nats_delivery_scrape_errors_total", &[])
    );
    assert!(samples(&text, "nats_delivery_consumer_status", &[]).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_without_end_on_every_source_keep_memory_bounded() {
    let kinds: [(&str, Hostile); 3] = [
        ("whitespace", whitespace),
        ("lists", lists),
        ("huge strings", strings),
    ];
    for (kind, hostile) in kinds {
        bounded_against(kind, hostile, &DEFAULT_SOURCES).await;
    }
}

/// The sources off by default (`routez`, `gatewayz`, `healthz`) are read
/// within the same bound when they are turned on beside the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_without_end_on_every_source_turned_on_keep_memory_bounded() {
    let kinds: [(&str, Hostile); 2] = [("lists", lists), ("huge strings", strings)];
    for (kind, hostile) in kinds {
        bounded_against(kind, hostile, &ALL_SOURCES).await;
    }
}
