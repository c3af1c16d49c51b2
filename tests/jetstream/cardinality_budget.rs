//! `--max-jetstream-series` against a real server: the exporter's own count
//! of its JetStream series equals the lines it writes; past the ceiling it
//! drops consumer health of the lowest-priority consumers first, then whole
//! consumers (least num_pending first), never streams or folded
//! ephemerals, and says how much it dropped.
use crate::common;

use std::collections::BTreeMap;

use async_nats::jetstream::{self, consumer, stream};
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

const HEALTH: [&str; 7] = [
    "nats_delivery_consumer_status",
    "nats_delivery_consumer_removed_before_delivery_messages_total",
    "nats_delivery_consumer_removed_before_delivery_exact",
    "nats_delivery_consumer_delivery_lag_seconds",
    "nats_delivery_consumer_delivery_lag_exact",
    "nats_delivery_consumer_oldest_unacked_age_seconds",
    "nats_delivery_consumer_oldest_unacked_age_exact",
];

/// JetStream series in an exposition: (stream series, per consumer (detail, health)).
fn jetstream_series(text: &str) -> (u64, BTreeMap<String, (u64, u64)>) {
    let mut streams = 0;
    let mut consumers: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let family = line.split(['{', ' ']).next().unwrap_or_default();
        if family.starts_with("nats_delivery_stream_") {
            streams += 1;
        } else if family.starts_with("nats_delivery_consumer_") {
            let name = line
                .split("consumer=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string();
            let entry = consumers.entry(name).or_default();
            if HEALTH.contains(&family) {
                entry.1 += 1;
            } else {
                entry.0 += 1;
            }
        }
    }
    (streams, consumers)
}

fn gauge(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    value(text, name, labels).unwrap_or_else(|| panic!("{name} missing")) as u64
}

async fn scrape(server: &NatsServer, limit: u64, series: &[&str]) -> String {
    let limit = limit.to_string();
    let flags = ["--sources", "varz,jsz", "--max-jetstream-series", &limit];
    let exporter = common::exporter(&[server.monitor_url()], &[&flags[..], series].concat());
    common::scrape(&exporter).await
}

/// The series written by default, and every one the families can write.
const EVERY_SERIES: [&str; 4] = [
    "--consumer-status-series",
    "all",
    "--consumer-opt-in-metrics",
    "all",
];

/// The folded ephemerals' consumer label.
const EPH: &str = "__ephemeral__";

/// Series dropped of `part` (`consumer_health` or `consumer`).
fn dropped(text: &str, part: &str) -> u64 {
    gauge(
        text,
        "nats_delivery_jetstream_series_dropped",
        &[("part", part)],
    )
}

/// Stream S with durables c0 .. c5 (0 .. 5 messages pending) and one
/// ephemeral, folded.
async fn six_durables_and_an_ephemeral(js: jetstream::Context) {
    let s = js
        .create_stream(stream::Config {
            name: "S".into(),
            subjects: vec!["s.>".into()],
            max_messages: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    // c0 .. c5, with 0 .. 5 messages pending.
    for i in 0..6 {
        s.create_consumer(consumer::pull::Config {
            durable_name: Some(format!("c{i}")),
            filter_subject: format!("s.{i}"),
            ..Default::default()
        })
        .await
        .unwrap();
        common::publish_acked(&js, (0..i).map(|_| format!("s.{i}")), "x").await;
    }
    // An ephemeral, folded: its series are never dropped.
    s.create_consumer(consumer::pull::Config {
        name: Some("eph".into()),
        filter_subject: "s.9".into(),
        inactive_threshold: std::time::Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Below the streams alone: streams and the folded series stay, every
/// consumer goes.
async fn below_the_streams_only_consumers_go(server: &NatsServer, series: &[&str], streams: u64) {
    let text = scrape(server, 1, series).await;
    let (kept_streams, kept) = jetstream_series(&text);
    assert_eq!(kept_streams, streams);
    assert_eq!(kept.keys().collect::<Vec<_>>(), [EPH]);
    assert_eq!(
        gauge(&text, "nats_delivery_jetstream_consumers_dropped", &[]),
        6
    );
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test]
async fn the_ceiling_drops_health_first_then_the_least_pending_consumers() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    six_durables_and_an_ephemeral(jetstream::new(client)).await;

    // (flags, folded series, least detail and health of a durable)
    let cases: [(&[&str], u64, (u64, u64)); 2] = [(&[], 5, (6, 1)), (&EVERY_SERIES, 6, (8, 7))];
    for (series, folded, least) in cases {
        // A ceiling far away: nothing dropped, and the count is the output's.
        let text = scrape(&server, 1_000_000, series).await;
        let (streams, consumers) = jetstream_series(&text);
        assert_eq!(consumers.len(), 7, "{consumers:?}");
        let detail = |c: &str| consumers[c].0;
        let health = |c: &str| consumers[c].1;
        let all: u64 = streams + consumers.values().map(|(d, h)| d + h).sum::<u64>();
        assert_eq!(streams, 6, "5 families and max_messages");
        assert_eq!(consumers[EPH], (folded, 0));
        let durables = consumers.iter().filter(|(c, _)| *c != EPH);
        assert!(
            durables
                .map(|(_, v)| v)
                .all(|&(d, h)| d >= least.0 && h >= least.1),
            "{consumers:?}"
        );
        assert_eq!(
            gauge(&text, "nats_delivery_jetstream_series_wanted", &[]),
            all
        );
        assert_eq!(
            gauge(&text, "nats_delivery_jetstream_series_limit", &[]),
            1_000_000
        );
        assert_eq!(
            dropped(&text, "consumer_health") + dropped(&text, "consumer"),
            0
        );

        // One short of everything: c0 (nothing pending) loses its health only.
        let text = scrape(&server, all - 1, series).await;
        let (_, kept) = jetstream_series(&text);
        assert_eq!(kept["c0"], (detail("c0"), 0));
        for c in ["c1", "c2", "c3", "c4", "c5", EPH] {
            assert_eq!(kept[c], consumers[c], "{c}");
        }
        assert_eq!(dropped(&text, "consumer_health"), health("c0"));
        assert_eq!(dropped(&text, "consumer"), 0);
        assert_eq!(
            gauge(&text, "nats_delivery_jetstream_series_wanted", &[]),
            all
        );

        // Room for the streams, the folded series and two consumers' detail:
        // c5 and c4 stay, without health; the others are gone, and counted.
        let limit = streams + detail(EPH) + detail("c5") + detail("c4");
        let text = scrape(&server, limit, series).await;
        let (kept_streams, kept) = jetstream_series(&text);
        assert_eq!(kept_streams, streams);
        let names: Vec<_> = kept.keys().cloned().collect();
        assert_eq!(names, [EPH, "c4", "c5"]);
        assert_eq!(kept["c5"], (detail("c5"), 0));
        let health_all: u64 = consumers.values().map(|(_, h)| h).sum();
        assert_eq!(dropped(&text, "consumer_health"), health_all);
        let gone: u64 = ["c0", "c1", "c2", "c3"].iter().map(|c| detail(c)).sum();
        assert_eq!(dropped(&text, "consumer"), gone);
        assert_eq!(
            gauge(&text, "nats_delivery_jetstream_consumers_dropped", &[]),
            4
        );
        let written: u64 = kept.values().map(|(d, h)| d + h).sum();
        assert_eq!(kept_streams + written, limit);

        below_the_streams_only_consumers_go(&server, series, streams).await;
    }
}
