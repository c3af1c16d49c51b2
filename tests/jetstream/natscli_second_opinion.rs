//! A second opinion on every consumer number: the nats CLI
//! (`.tools/natscli`, built by scripts/install-deps.sh), pointed at a 3-node
//! cluster with `--server`, says `nats consumer info --json` for each R3
//! consumer, and the exporter's families for that consumer must be exactly
//! what it says: backlog, ack pending, redelivered, paused, a consumer whose
//! leader moved. The CLI asks the consumer's leader, the exporter polls every
//! server's `/jsz` and keeps the leader's entry: two reads at two moments.
//! So each comparison is a CLI read, a scrape, and a CLI read again; when the
//! two CLI reads differ the consumer moved between them (a leader still
//! taking over, a follower's state arriving) and the test waits for a moment
//! it held still; when they agree, the scrape must agree too, at once.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use nats_delivery_exporter::{reports_pausing, Exporter};
use nats_test_server::wait::Wait;
use nats_test_server::{sample, NatsServer};

use crate::common;

const STREAM: &str = "ORDERS";

/// One consumer's numbers, by the exporter's family name (without
/// `nats_delivery_consumer_`).
type Numbers = BTreeMap<String, f64>;

/// The families compared: each has a field in consumer info.
const FAMILIES: [&str; 11] = [
    "pending_messages",
    "ack_pending_messages",
    "redelivered_messages",
    "waiting_pulls",
    "delivered_stream_sequence",
    "deliveries_total",
    "ack_floor_stream_sequence",
    "ack_wait_seconds",
    "max_ack_pending",
    "max_deliver",
    "paused",
];

/// The opt-in families that have a field of consumer info.
const OPT_IN: &str = "nats_delivery_consumer_ack_floor_stream_sequence,\
nats_delivery_consumer_deliveries_total,nats_delivery_consumer_max_deliver,\
nats_delivery_consumer_ack_wait_seconds";

/// What `nats consumer info --json` says, as the exporter's families.
fn from_cli(info: &serde_json::Value, pausing: bool) -> Numbers {
    let n = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("a number: {info}"));
    let config = &info["config"];
    let mut out: Numbers = [
        ("pending_messages", n(&info["num_pending"])),
        ("ack_pending_messages", n(&info["num_ack_pending"])),
        ("redelivered_messages", n(&info["num_redelivered"])),
        ("waiting_pulls", n(&info["num_waiting"])),
        (
            "delivered_stream_sequence",
            n(&info["delivered"]["stream_seq"]),
        ),
        ("deliveries_total", n(&info["delivered"]["consumer_seq"])),
        (
            "ack_floor_stream_sequence",
            n(&info["ack_floor"]["stream_seq"]),
        ),
        ("ack_wait_seconds", n(&config["ack_wait"]) / 1e9),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    // Unlimited (-1 or absent) is no series.
    for (family, field) in [
        ("max_ack_pending", "max_ack_pending"),
        ("max_deliver", "max_deliver"),
    ] {
        if let Some(v) = config[field].as_f64().filter(|v| *v > 0.0) {
            out.insert(family.to_string(), v);
        }
    }
    // Sent only when true; a server before 2.11 does not know pausing.
    if pausing {
        out.insert(
            "paused".to_string(),
            f64::from(u8::from(info["paused"] == true)),
        );
    }
    out
}

/// The exporter's families for `consumer`, the same ones as [`from_cli`].
fn from_exporter(text: &str, consumer: &str) -> Numbers {
    let labels = [("stream", STREAM), ("consumer", consumer)];
    FAMILIES
        .iter()
        .filter_map(|family| {
            let name = format!("nats_delivery_consumer_{family}");
            sample::value(text, &name, &labels).map(|v| (family.to_string(), v))
        })
        .collect()
}

/// `nats consumer info STREAM consumer --json` against every server; a
/// failure panics with the CLI's words.
async fn cli_info(
    servers: &[NatsServer],
    consumer: &str,
    home: &std::path::Path,
) -> serde_json::Value {
    try_cli_info(servers, consumer, home)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`cli_info`] for a wait: just after a leader steps down, the group may
/// answer "not found" or nothing until its election ends, and the CLI then
/// says it cannot pick a consumer; that is a try to repeat.
async fn try_cli_info(
    servers: &[NatsServer],
    consumer: &str,
    home: &std::path::Path,
) -> Result<serde_json::Value, String> {
    let nats = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/natscli/bin/nats");
    assert!(
        nats.is_file(),
        "{} is missing: run scripts/install-deps.sh",
        nats.display()
    );
    let urls: Vec<String> = servers.iter().map(|s| s.client_url()).collect();
    let out = tokio::process::Command::new(&nats)
        .args(["--server", &urls.join(","), "--timeout", "10s"])
        .args(["consumer", "info", STREAM, consumer, "--json"])
        // No context of the machine's user: only the servers named here.
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .output()
        .await
        .expect("the nats CLI runs");
    if !out.status.success() {
        return Err(format!(
            "nats consumer info {consumer}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(serde_json::from_slice(&out.stdout).expect("consumer info as JSON"))
}

/// The R3 stream of 10 messages, created once the cluster takes R3 assets.
async fn orders(js: &jetstream::Context) -> stream::Stream {
    let st = Wait::secs("a cluster ready for an R3 stream", 30)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            js.get_or_create_stream(stream::Config {
                name: STREAM.into(),
                subjects: vec!["orders.>".into()],
                num_replicas: 3,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())
        })
        .await;
    common::publish_acked(js, (0..10).map(|i| format!("orders.{i}")), "order").await;
    st
}

fn durable(name: &str) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(name.into()),
        ack_policy: consumer::AckPolicy::Explicit,
        // Nothing is redelivered by the clock while the test runs.
        ack_wait: Duration::from_secs(3600),
        max_deliver: 5,
        num_replicas: 3,
        ..Default::default()
    }
}

/// Fetches exactly `n` messages (a fetch takes what is there now).
async fn take(c: &consumer::PullConsumer, n: usize) -> Vec<jetstream::Message> {
    let mut got = Vec::new();
    Wait::secs(format!("{n} messages"), 20)
        .until_async(async || {
            let want = n - got.len();
            if let Ok(mut batch) = c.fetch().max_messages(want).messages().await {
                while let Some(Ok(m)) = batch.next().await {
                    got.push(m);
                }
            }
            got.len() == n
        })
        .await;
    got
}

/// The consumers, each behaving one way; their names.
async fn consumers(st: &stream::Stream, pausing: bool) -> Vec<&'static str> {
    let mut names = vec!["backlog", "unacked", "redelivered", "moved"];
    // Nothing taken: all 10 pending.
    st.create_consumer(durable("backlog")).await.unwrap();
    // 4 delivered, the first acknowledged: 3 waiting for an ack.
    let c = st.create_consumer(durable("unacked")).await.unwrap();
    let got = take(&c, 4).await;
    got[0].double_ack().await.unwrap();
    // 3 delivered, handed back, delivered again and kept: 3 redelivered.
    // Each NAK confirmed by the server, so the next fetch gets them again.
    let c = st.create_consumer(durable("redelivered")).await.unwrap();
    for m in take(&c, 3).await {
        m.double_ack_with(jetstream::AckKind::Nak(None))
            .await
            .unwrap();
    }
    take(&c, 3).await;
    // 2 delivered and acknowledged, then its leader steps down.
    let c = st.create_consumer(durable("moved")).await.unwrap();
    for m in take(&c, 2).await {
        m.double_ack().await.unwrap();
    }
    if pausing {
        let mut config = durable("paused");
        config.pause_until = Some(time::OffsetDateTime::now_utc() + Duration::from_secs(3600));
        st.create_consumer(config).await.unwrap();
        names.push("paused");
    }
    names
}

/// Moves the leader of consumer `name`: asks it to step down until the CLI
/// names another leader.
async fn move_leader(app: &async_nats::Client, servers: &[NatsServer], home: &std::path::Path) {
    let before = cli_info(servers, "moved", home).await["cluster"]["leader"].clone();
    Wait::secs("the consumer \"moved\" to have another leader", 30)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            let subject = format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{STREAM}.moved");
            let _ =
                tokio::time::timeout(Duration::from_secs(5), app.request(subject, "".into())).await;
            let now = try_cli_info(servers, "moved", home).await?["cluster"]["leader"].clone();
            match now.is_string() && now != before {
                true => Ok(()),
                false => Err(format!("leader {now} (was {before})")),
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_consumer_number_is_what_the_nats_cli_says() {
    let servers = nats_test_server::cluster(3, "");
    let version = common::monitor_json(&servers[0].monitor_url(), "varz")["version"]
        .as_str()
        .unwrap()
        .to_string();
    let pausing = reports_pausing(&version);
    let home = tempfile::tempdir().unwrap();
    let app = async_nats::connect(servers[0].client_url()).await.unwrap();
    let js = jetstream::new(app.clone());
    let st = orders(&js).await;
    let names = consumers(&st, pausing).await;
    move_leader(&app, &servers, home.path()).await;
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    let exporter: Exporter = common::exporter(
        &urls,
        &["--sources", "varz,jsz", "--consumer-opt-in-metrics", OPT_IN],
    );

    let mut table = Vec::new();
    for name in names {
        let agreed = Wait::secs(format!("consumer {name} to hold still across a scrape"), 30)
            .every(Duration::from_millis(200))
            .until_async(|| async {
                let before = from_cli(&try_cli_info(&servers, name, home.path()).await?, pausing);
                let text = common::scrape(&exporter).await;
                let after = from_cli(&try_cli_info(&servers, name, home.path()).await?, pausing);
                if before != after {
                    return Err(format!(
                        "moved between the CLI's reads: {before:?} -> {after:?}"
                    ));
                }
                let exported = from_exporter(&text, name);
                assert_eq!(
                    exported, after,
                    "consumer {name}: the exporter (left), the nats CLI (right)"
                );
                Ok(after)
            })
            .await;
        table.push((name, agreed));
    }
    for (name, numbers) in &table {
        println!("{name}: {numbers:?}");
    }
    // What was built is what the numbers say (so a CLI and an exporter
    // that agree on nothing happening cannot pass).
    let get = |name: &str, family: &str| table.iter().find(|(n, _)| *n == name).unwrap().1[family];
    assert_eq!(get("backlog", "pending_messages"), 10.0);
    assert_eq!(get("unacked", "ack_pending_messages"), 3.0);
    assert_eq!(get("unacked", "ack_floor_stream_sequence"), 1.0);
    assert_eq!(get("redelivered", "redelivered_messages"), 3.0);
    assert_eq!(get("redelivered", "deliveries_total"), 6.0);
    assert_eq!(get("moved", "delivered_stream_sequence"), 2.0);
    assert_eq!(get("moved", "ack_pending_messages"), 0.0);
    if pausing {
        assert_eq!(get("paused", "paused"), 1.0);
        assert_eq!(get("backlog", "paused"), 0.0);
    }
}
