//! Cardinality against a real server: two accounts, durable and ephemeral
//! consumers. Each filter, folding on and off: exact series counts per
//! family and exact values (the folded series equals the sum of the
//! server's own /jsz numbers), and a departed ephemeral keeps the folded
//! counter where it was.
use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use nats_test_server::sample::{samples, value};
use nats_test_server::NatsServer;

/// Series per family in an exposition.
fn counts(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        *out.entry(name.to_string()).or_default() += 1;
    }
    out
}

fn count(text: &str, family: &str) -> usize {
    counts(text).get(family).copied().unwrap_or(0)
}

/// Every per-consumer family with its series count, and the per-stream ones.
fn consumer_and_stream_counts(text: &str) -> (BTreeMap<String, usize>, usize) {
    let all = counts(text);
    let consumers = all
        .iter()
        .filter(|(k, _)| k.starts_with("nats_delivery_consumer_"))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    (consumers, all["nats_delivery_stream_messages"])
}

async fn connect(server: &NatsServer, user: &str) -> jetstream::Context {
    let client = async_nats::ConnectOptions::with_user_and_password(user.into(), "p".into())
        .connect(server.client_url())
        .await
        .unwrap();
    jetstream::new(client)
}

async fn make_stream(js: &jetstream::Context, name: &str, subject: &str) -> stream::Stream {
    js.create_stream(stream::Config {
        name: name.into(),
        subjects: vec![subject.into()],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A pull consumer: durable when `durable`, else a named ephemeral (or one
/// the server names, when `name` is empty).
async fn make_consumer(
    s: &stream::Stream,
    name: &str,
    durable: bool,
) -> consumer::Consumer<consumer::pull::Config> {
    s.create_consumer(consumer::pull::Config {
        durable_name: durable.then(|| name.to_string()),
        name: (!durable && !name.is_empty()).then(|| name.to_string()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(60),
        inactive_threshold: if durable {
            Duration::ZERO
        } else {
            Duration::from_secs(3600)
        },
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Fetches `n` messages and acknowledges the first `ack` of them.
async fn take(c: &consumer::Consumer<consumer::pull::Config>, n: usize, ack: usize) {
    let mut got = c.fetch().max_messages(n).messages().await.unwrap();
    let mut i = 0;
    while let Some(m) = got.next().await {
        let m = m.unwrap();
        if i < ack {
            m.double_ack().await.unwrap();
        }
        i += 1;
    }
    assert_eq!(i, n);
}

/// Account A: ORDERS (durables billing and audit, ephemerals eph-1, eph-2
/// and one the server names), TMP (durable t1). Account B: ORDERS (durable
/// billing). Five messages in A's ORDERS, two in TMP, three in B's ORDERS.
async fn setup() -> (NatsServer, stream::Stream) {
    let conf = "accounts {\n  A: { jetstream: enabled, users: [{user: a, password: p}] }\n  B: { jetstream: enabled, users: [{user: b, password: p}] }\n}\n";
    let server = NatsServer::builder().jetstream().config(conf).start();
    let a = connect(&server, "a").await;
    let b = connect(&server, "b").await;
    let orders = make_stream(&a, "ORDERS", "orders.>").await;
    let tmp = make_stream(&a, "TMP", "tmp.>").await;
    let b_orders = make_stream(&b, "ORDERS", "b.orders.>").await;
    make_consumer(&orders, "billing", true).await;
    make_consumer(&orders, "audit", true).await;
    let e1 = make_consumer(&orders, "eph-1", false).await;
    let e2 = make_consumer(&orders, "eph-2", false).await;
    make_consumer(&orders, "", false).await;
    make_consumer(&tmp, "t1", true).await;
    make_consumer(&b_orders, "billing", true).await;
    common::publish_acked(&a, (0..5).map(|i| format!("orders.{i}")), "x").await;
    common::publish_acked(&a, (0..2).map(|i| format!("tmp.{i}")), "x").await;
    common::publish_acked(&b, (0..3).map(|i| format!("b.orders.{i}")), "x").await;
    // eph-1: three delivered, two acknowledged; eph-2: one delivered, none.
    take(&e1, 3, 2).await;
    take(&e2, 1, 0).await;
    (server, orders)
}

/// The sum of `field` (a path of keys) over A's ORDERS ephemerals in /jsz.
fn jsz_ephemeral_sum(server: &NatsServer, field: &[&str]) -> f64 {
    let jsz = common::monitor_json(
        &server.monitor_url(),
        "jsz?accounts=true&streams=true&consumers=true&config=true",
    );
    let mut sum = 0.0;
    for acc in jsz["account_details"].as_array().unwrap() {
        for st in acc["stream_detail"].as_array().unwrap() {
            if acc["name"] != "A" || st["name"] != "ORDERS" {
                continue;
            }
            for c in st["consumer_detail"].as_array().unwrap() {
                if c["config"].get("durable_name").is_some() {
                    continue;
                }
                let v = field.iter().fold(c, |v, k| &v[*k]);
                sum += v.as_f64().unwrap_or(0.0);
            }
        }
    }
    sum
}

const EPH: [(&str, &str); 3] = [
    ("account", "A"),
    ("stream", "ORDERS"),
    ("consumer", "__ephemeral__"),
];

/// The opt-in counter the folded ephemerals keep across departures.
const DELIVERIES: [&str; 2] = [
    "--consumer-opt-in-metrics",
    "nats_delivery_consumer_deliveries_total",
];

/// Per consumer: 4 durables, 1 folded series. Families a sum means nothing
/// for have the durables only; health has the durables only.
fn assert_one_folded_series_beside_the_durables(text: &str) {
    let (consumers, streams) = consumer_and_stream_counts(text);
    assert_eq!(streams, 3);
    let want: BTreeMap<String, usize> = [
        ("nats_delivery_consumer_pending_messages", 5),
        ("nats_delivery_consumer_ack_pending_messages", 5),
        ("nats_delivery_consumer_redelivered_messages", 5),
        ("nats_delivery_consumer_waiting_pulls", 5),
        ("nats_delivery_consumer_deliveries_total", 5),
        ("nats_delivery_consumer_folded_consumers", 1),
        ("nats_delivery_consumer_max_ack_pending", 4),
        ("nats_delivery_consumer_max_deliver", 0),
        ("nats_delivery_consumer_ack_wait_seconds", 0),
        ("nats_delivery_consumer_delivered_stream_sequence", 4),
        ("nats_delivery_consumer_ack_floor_stream_sequence", 0),
        ("nats_delivery_consumer_status", 4),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (family, n) in &want {
        assert_eq!(consumers.get(family).copied().unwrap_or(0), *n, "{family}");
    }
    for family in consumers.keys().filter(|k| !want.contains_key(*k)) {
        assert!(
            samples(text, family, &[("consumer", "__ephemeral__")]).is_empty(),
            "{family} has a folded series"
        );
    }
}

#[tokio::test]
async fn ephemerals_fold_into_one_series_per_stream() {
    let (server, orders) = setup().await;
    let flags = [&["--sources", "varz,jsz"][..], &DELIVERIES].concat();
    let exporter = common::exporter(&[server.monitor_url()], &flags);
    let text = common::scrape(&exporter).await;
    let v = |text: &str, name: &str| value(text, name, &EPH);
    // eph-1: 2 pending, 1 unacknowledged; eph-2: 4 and 1; the third: 5 and 0.
    assert_eq!(
        v(&text, "nats_delivery_consumer_pending_messages"),
        Some(11.0)
    );
    assert_eq!(
        v(&text, "nats_delivery_consumer_ack_pending_messages"),
        Some(2.0)
    );
    assert_eq!(
        v(&text, "nats_delivery_consumer_redelivered_messages"),
        Some(0.0)
    );
    assert_eq!(v(&text, "nats_delivery_consumer_waiting_pulls"), Some(0.0));
    assert_eq!(
        v(&text, "nats_delivery_consumer_deliveries_total"),
        Some(4.0)
    );
    assert_eq!(
        v(&text, "nats_delivery_consumer_folded_consumers"),
        Some(3.0)
    );
    // The same as the server's own numbers, summed.
    for (family, field) in [
        (
            "nats_delivery_consumer_pending_messages",
            &["num_pending"][..],
        ),
        (
            "nats_delivery_consumer_ack_pending_messages",
            &["num_ack_pending"],
        ),
        ("nats_delivery_consumer_waiting_pulls", &["num_waiting"]),
        (
            "nats_delivery_consumer_deliveries_total",
            &["delivered", "consumer_seq"],
        ),
    ] {
        assert_eq!(
            v(&text, family),
            Some(jsz_ephemeral_sum(&server, field)),
            "{family}"
        );
    }
    // No ephemeral under its own name, anywhere.
    assert!(!text.contains("eph-"), "{text}");
    assert_one_folded_series_beside_the_durables(&text);

    // eph-1 goes away: its three deliveries stay in the folded counter.
    orders.delete_consumer("eph-1").await.unwrap();
    let text = common::scrape(&exporter).await;
    assert_eq!(
        v(&text, "nats_delivery_consumer_deliveries_total"),
        Some(4.0)
    );
    assert_eq!(
        jsz_ephemeral_sum(&server, &["delivered", "consumer_seq"]),
        1.0
    );
    assert_eq!(
        v(&text, "nats_delivery_consumer_folded_consumers"),
        Some(2.0)
    );
    assert_eq!(
        v(&text, "nats_delivery_consumer_pending_messages"),
        Some(9.0)
    );
    assert_eq!(
        v(&text, "nats_delivery_consumer_ack_pending_messages"),
        Some(1.0)
    );
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test]
async fn ephemerals_kept_on_request() {
    let (server, _orders) = setup().await;
    let flags = ["--sources", "varz,jsz", "--keep-ephemeral-consumers"];
    let exporter = common::exporter(&[server.monitor_url()], &[&flags[..], &DELIVERIES].concat());
    let text = common::scrape(&exporter).await;
    assert_eq!(count(&text, "nats_delivery_consumer_pending_messages"), 7);
    assert_eq!(count(&text, "nats_delivery_consumer_status"), 7);
    assert_eq!(count(&text, "nats_delivery_consumer_folded_consumers"), 0);
    let c = [
        ("account", "A"),
        ("stream", "ORDERS"),
        ("consumer", "eph-1"),
    ];
    assert_eq!(
        value(&text, "nats_delivery_consumer_deliveries_total", &c),
        Some(3.0)
    );
    assert!(!text.contains("__ephemeral__"));
}

#[tokio::test]
async fn filters_keep_exactly_what_they_name() {
    let (server, _orders) = setup().await;
    // (flags, per-stream series, consumer series, accounts seen)
    let cases: [(&[&str], usize, usize, &[&str]); 7] = [
        (&[], 3, 5, &["A", "B"]),
        (&["--exclude-account", "B"], 2, 4, &["A"]),
        // One exact account: asked of the server alone (acc=B).
        (&["--include-account", "B"], 1, 1, &["B"]),
        // No such account: acc=C finds nothing, the filter keeps nothing.
        (&["--include-account", "C"], 0, 0, &[]),
        (
            &["--include-stream", "ORD.*", "--exclude-consumer", "audit"],
            2,
            3,
            &["A", "B"],
        ),
        // Exclude wins over include.
        (
            &["--include-stream", "ORDERS|TMP", "--exclude-stream", "TMP"],
            2,
            4,
            &["A", "B"],
        ),
        // Ephemerals are filtered by their own names before folding.
        (&["--include-consumer", "bill.*|eph-1"], 3, 3, &["A", "B"]),
    ];
    for (filter, streams, consumers, accounts) in cases {
        let mut flags = vec!["--sources", "varz,jsz"];
        flags.extend_from_slice(filter);
        let exporter = common::exporter(&[server.monitor_url()], &flags);
        let text = common::scrape(&exporter).await;
        assert_eq!(
            value(&text, "nats_delivery_up", &[("source", "jsz")]),
            Some(1.0),
            "{filter:?}"
        );
        assert_eq!(
            count(&text, "nats_delivery_stream_messages"),
            streams,
            "{filter:?}"
        );
        assert_eq!(
            count(&text, "nats_delivery_consumer_pending_messages"),
            consumers,
            "{filter:?}"
        );
        for a in ["A", "B"] {
            let seen =
                !samples(&text, "nats_delivery_stream_messages", &[("account", a)]).is_empty();
            assert_eq!(seen, accounts.contains(&a), "{filter:?} {a}");
        }
    }
    // Only eph-1 folded: its own numbers.
    let flags = ["--sources", "varz,jsz", "--include-consumer", "eph-1"];
    let exporter = common::exporter(&[server.monitor_url()], &[&flags[..], &DELIVERIES].concat());
    let text = common::scrape(&exporter).await;
    assert_eq!(
        value(&text, "nats_delivery_consumer_folded_consumers", &EPH),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "nats_delivery_consumer_pending_messages", &EPH),
        Some(2.0)
    );
    assert_eq!(
        value(&text, "nats_delivery_consumer_deliveries_total", &EPH),
        Some(3.0)
    );
    assert_eq!(count(&text, "nats_delivery_consumer_status"), 0);
}
