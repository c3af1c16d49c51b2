//! The per-consumer families are written a block of consumers at a time
//! and sent while they are written. With thousands of consumers (several
//! blocks), some families present only in some blocks, the text must still
//! be one valid exposition: each family's header once, before its samples,
//! its samples together, every consumer's value exact, `# EOF` once at the
//! end.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::fake_endpoint::{self, Reply};
use nats_delivery_exporter::Format;

/// Consumers in the reply: more than two blocks of the exposition's.
const CONSUMERS: usize = 2_600;

/// A `/jsz` reply with `CONSUMERS` consumers over three streams: consumer
/// `i` has `i` acks pending; only consumers 2,100 and on have delivered
/// anything, and only consumers below 10 were ever acknowledged, so those
/// two age families have samples in the last block or in the first only.
/// Stream S1 also has `ephemerals` ephemeral consumers, E`k` with `k + 1`
/// acks pending.
fn jsz_reply(ephemerals: usize) -> String {
    let streams: Vec<String> = (0..3)
        .map(|s| {
            let ephemerals = (0..ephemerals).filter(|_| s == 1).map(|k| {
                format!(r#"{{"name":"E{k}","config":{{"name":"E{k}"}},"num_ack_pending":{}}}"#, k + 1)
            });
            let consumers: Vec<String> = (0..CONSUMERS)
                .filter(|i| i % 3 == s)
                .map(|i| {
                    let delivered = if i >= 2_100 {
                        r#","delivered":{"consumer_seq":1,"stream_seq":1,"last_active":"2026-01-01T00:00:05Z"}"#
                    } else {
                        ""
                    };
                    let acked = if i < 10 {
                        r#","ack_floor":{"consumer_seq":1,"stream_seq":1,"last_active":"2026-01-01T00:00:04Z"}"#
                    } else {
                        ""
                    };
                    format!(r#"{{"name":"C{i:04}","num_ack_pending":{i}{delivered}{acked}}}"#)
                })
                .chain(ephemerals)
                .collect();
            format!(
                r#"{{"name":"S{s}","state":{{"messages":1}},"consumer_detail":[{}]}}"#,
                consumers.join(",")
            )
        })
        .collect();
    format!(
        r#"{{"now":"2026-01-01T00:00:10Z","account_details":[{{"name":"A","stream_detail":[{}]}}]}}"#,
        streams.join(",")
    )
}

/// The family a line belongs to: the name after `# HELP`/`# TYPE` or the
/// sample's, without `_total` (which the classic format's headers carry).
fn family_of(line: &str) -> (bool, String) {
    if let Some(rest) = line.strip_prefix("# ") {
        let name = rest.split(' ').nth(1).unwrap_or_default();
        return (true, name.trim_end_matches("_total").to_string());
    }
    let name = line.split(['{', ' ']).next().unwrap_or_default();
    (false, name.trim_end_matches("_total").to_string())
}

/// Checks that every family's header lines come once, before its samples,
/// and that its samples are together; returns the samples per family.
fn check_layout(text: &str, format: Format) -> BTreeMap<String, usize> {
    let body = match format {
        Format::OpenMetrics => {
            assert_eq!(text.matches("# EOF\n").count(), 1);
            text.strip_suffix("# EOF\n").expect("# EOF last")
        }
        Format::Classic => {
            assert!(!text.contains("# EOF"));
            text
        }
    };
    let mut samples: BTreeMap<String, usize> = BTreeMap::new();
    let mut finished = BTreeSet::new();
    let mut headers: BTreeMap<String, usize> = BTreeMap::new();
    let mut current = String::new();
    for line in body.lines() {
        let (header, family) = family_of(line);
        if family != current {
            assert!(
                finished.insert(current.clone()),
                "{current} appears twice apart"
            );
            current = family.clone();
        }
        if header {
            *headers.entry(family.clone()).or_default() += 1;
            assert!(
                !samples.contains_key(&family),
                "a header after {family}'s samples"
            );
        } else {
            *samples.entry(family).or_default() += 1;
        }
    }
    for family in headers.keys().chain(samples.keys()) {
        // HELP and TYPE (and OpenMetrics' UNIT, never written here).
        let n = headers.get(family).copied().unwrap_or(0);
        assert_eq!(n, 2, "{family} has {n} header lines");
    }
    samples
}

/// One scrape in each format of an exporter reading `reply` as /jsz.
async fn scrapes(reply: String) -> Vec<(Format, String)> {
    let endpoint = fake_endpoint::start(move |_| Reply::Fixed("200 OK", reply.clone())).await;
    // Every series: the status's whole state set (seven lines per
    // consumer, the most text), and the opt-in age families, which have
    // samples in some blocks only.
    let exporter = common::exporter(
        std::slice::from_ref(&endpoint.url),
        &[
            "--sources",
            "jsz",
            "--timeout",
            "30s",
            "--consumer-status-series",
            "all",
            "--consumer-opt-in-metrics",
            "all",
        ],
    );
    let mut out = Vec::new();
    for format in [Format::Classic, Format::OpenMetrics] {
        out.push((format, exporter.scrape(format).await.unwrap()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn families_written_in_blocks_make_one_valid_exposition() {
    for (format, text) in scrapes(jsz_reply(0)).await {
        let samples = check_layout(&text, format);
        assert_eq!(
            samples["nats_delivery_consumer_ack_pending_messages"],
            CONSUMERS
        );
        assert_eq!(
            samples["nats_delivery_consumer_last_delivery_age_seconds"],
            500
        );
        assert_eq!(samples["nats_delivery_consumer_last_ack_age_seconds"], 10);
        // Seven statuses per consumer, each one's window not yet full.
        assert_eq!(samples["nats_delivery_consumer_status"], 7 * CONSUMERS);
        // Each sample's name and labels to its value, read once.
        let values: BTreeMap<&str, f64> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(series, v)| (series, v.parse().expect("a number")))
            .collect();
        for i in 0..CONSUMERS {
            let labels = format!(r#"account="A",stream="S{}",consumer="C{i:04}""#, i % 3);
            let get = |name: &str, more: &str| {
                values
                    .get(format!("{name}{{{labels}{more}}}").as_str())
                    .copied()
            };
            assert_eq!(
                get("nats_delivery_consumer_ack_pending_messages", ""),
                Some(i as f64),
                "{labels}"
            );
            // Acks pending: undecided until the window is full. C0000 has
            // nothing waiting: ok from its first snapshot.
            let unknown = if i == 0 { 0.0 } else { 1.0 };
            assert_eq!(
                get("nats_delivery_consumer_status", r#",status="unknown""#),
                Some(unknown)
            );
            assert_eq!(
                get("nats_delivery_consumer_status", r#",status="ok""#),
                Some(1.0 - unknown)
            );
            let age = get("nats_delivery_consumer_last_delivery_age_seconds", "");
            assert_eq!(age, (i >= 2_100).then_some(5.0), "{labels}");
            let age = get("nats_delivery_consumer_last_ack_age_seconds", "");
            assert_eq!(age, (i < 10).then_some(6.0), "{labels}");
        }
    }
}

/// The folded ephemerals are written with the last block of consumers: still
/// one valid exposition, each family's samples together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folded_ephemerals_follow_the_last_block() {
    for (format, text) in scrapes(jsz_reply(3)).await {
        let samples = check_layout(&text, format);
        let pending = "nats_delivery_consumer_ack_pending_messages";
        assert_eq!(samples[pending], CONSUMERS + 1);
        assert_eq!(samples["nats_delivery_consumer_folded_consumers"], 1);
        assert_eq!(samples["nats_delivery_consumer_status"], 7 * CONSUMERS);
        let folded = r#"{account="A",stream="S1",consumer="__ephemeral__"}"#;
        assert!(
            text.contains(&format!("{pending}{folded} 6\n")),
            "{format:?}"
        );
        let count = "nats_delivery_consumer_folded_consumers";
        assert!(text.contains(&format!("{count}{folded} 3\n")), "{format:?}");
    }
}
