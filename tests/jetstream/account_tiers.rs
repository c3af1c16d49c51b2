//! A tiered account (R1 and R3 limits in its operator-signed JWT) against a
//! real server in operator mode. Only `$JS.API.INFO`, in the account
//! itself, gives the tiers: the exporter's NATS connection is the
//! account's. Each tier's usage and streams must be what its streams hold,
//! its limits what the JWT set (times the tier's replicas, as the server
//! checks a publish), and the forecast of when the R1 tier is full, filled
//! at a steady rate, must name the first refused publish within 20% of the
//! time then left.
use crate::account_storage::{check_approach, fill_until_refused, stored, unix_now};
use crate::common;
use crate::operator_jwts::{Account, Operator};

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use nats_test_server::sample::{exact, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::json;

const USED: &str = "nats_delivery_account_jetstream_tier_used_bytes";
const LIMIT: &str = "nats_delivery_account_jetstream_tier_limit_bytes";
const FORECAST: &str = "nats_delivery_account_jetstream_tier_full_forecast_seconds";

/// The R1 tier's file limit, and the R3 tier's.
const R1_FILE: u64 = 1024 * 1024;
const R3_FILE: u64 = 3_000_000;

/// A server trusting an operator with account `T`, tiered: R1 with 1 MiB
/// of file storage, no memory storage, 5 streams and 7 consumers a stream;
/// R3 with 3 MB of file storage a replica and 2 streams, on the servers
/// `start` starts. Returns them and a connection in `T` to the first.
async fn tiered_server(
    start: fn(&str) -> Vec<NatsServer>,
) -> (Vec<NatsServer>, async_nats::Client) {
    let mut op = Operator::new();
    let t = Account {
        key: nkeys::KeyPair::new_account(),
        name: "T".into(),
    };
    let tier = |file: u64, streams: u64, consumers: i64| {
        json!({"mem_storage": 0, "disk_storage": file, "streams": streams, "consumer": consumers,
            "max_ack_pending": -1, "mem_max_stream_bytes": 0, "disk_max_stream_bytes": 0,
            "max_bytes_required": false})
    };
    let tiers = json!({"R1": tier(R1_FILE, 5, 7), "R3": tier(R3_FILE, 2, -1)});
    op.add(&t, json!({ "tiered_limits": tiers }));
    let servers = start(&op.config());
    let options = async_nats::ConnectOptions::with_credentials(&op.user(Some(&t))).unwrap();
    let client = options.connect(servers[0].client_url()).await.unwrap();
    (servers, client)
}

/// One server in operator mode, named `op`.
fn one(config: &str) -> Vec<NatsServer> {
    vec![NatsServer::builder()
        .jetstream()
        .name("op")
        .config(config)
        .start()]
}

/// An exporter of `server` whose NATS connection is `client`'s, in `T`.
fn exporter(
    server: &NatsServer,
    client: async_nats::Client,
    flags: &[&str],
) -> nats_delivery_exporter::Exporter {
    let mut exporter = common::exporter_builder(&[server.monitor_url()], flags);
    exporter.read_timestamps(nats_delivery_exporter::MessageTimestamps::new(
        client, "T", 100,
    ));
    exporter.build()
}

/// An R1 file stream `name` capturing `name.>`. The replicas are given:
/// 2.9 takes a stream's default of 0 replicas for a tier `R0` and refuses
/// it ("no JetStream default or applicable tiered limit present").
async fn r1_stream(js: &jetstream::Context, name: &str) {
    let config = stream::Config {
        name: name.into(),
        subjects: vec![format!("{name}.>")],
        num_replicas: 1,
        ..Default::default()
    };
    js.create_stream(config).await.unwrap();
}

fn labels<'a>(tier: &'a str, kind: &'a str) -> [(&'a str, &'a str); 3] {
    [("account", "T"), ("tier", tier), ("storage", kind)]
}

#[tokio::test]
async fn each_tiers_usage_streams_and_limits_are_the_servers_own() {
    let (servers, client) = tiered_server(one).await;
    let server = &servers[0];
    let js = jetstream::new(client.clone());
    r1_stream(&js, "S").await;
    common::publish_acked(
        &js,
        (0..7).map(|i| format!("S.{i}")),
        "a payload of some bytes",
    )
    .await;
    for c in ["c1", "c2"] {
        let config = async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(c.into()),
            ..Default::default()
        };
        js.get_stream("S")
            .await
            .unwrap()
            .create_consumer(config)
            .await
            .unwrap();
    }
    let bytes = stored(&js, "S").await;
    assert!(bytes > 0);
    let text = common::scrape(&exporter(server, client, &["--sources", "varz,jsz"])).await;
    // (tier, storage, used, limit)
    let want = [
        ("R1", "file", bytes, Some(R1_FILE)),
        ("R1", "memory", 0, None),
        ("R3", "file", 0, Some(3 * R3_FILE)),
        ("R3", "memory", 0, None),
    ];
    for (tier, kind, used, limit) in want {
        let l = labels(tier, kind);
        assert_eq!(
            exact(&text, USED, &l),
            Some(used as f64),
            "{tier} {kind}\n{text}"
        );
        assert_eq!(
            exact(&text, LIMIT, &l),
            limit.map(|b| b as f64),
            "{tier} {kind}"
        );
        assert_eq!(exact(&text, FORECAST, &l), None, "one poll: no rate");
    }
    let tier = |name: &str, tier: &str| {
        let family = format!("nats_delivery_account_jetstream_tier_{name}");
        exact(&text, &family, &[("account", "T"), ("tier", tier)])
    };
    let got = ["streams", "consumers", "max_streams", "max_consumers"].map(|n| tier(n, "R1"));
    assert_eq!(got, [Some(1.0), Some(2.0), Some(5.0), Some(7.0)]);
    let got = ["streams", "consumers", "max_streams", "max_consumers"].map(|n| tier(n, "R3"));
    assert_eq!(got, [Some(0.0), Some(0.0), Some(2.0), None]);
    // A tiered account has no account-wide limit.
    let wide = [("server", "op"), ("account", "T"), ("storage", "file")];
    let wide_limit = "nats_delivery_account_jetstream_limit_bytes";
    assert_eq!(exact(&text, wide_limit, &wide), None);
    assert_eq!(
        exact(
            &text,
            "nats_delivery_account_jetstream_max_streams",
            &[("account", "T")]
        ),
        None
    );
    nats_test_server::reference::assert_documented(&text);
}

// Several threads: a scrape must not hold up the publisher.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_forecast_names_the_moment_the_full_r1_tier_refuses_a_publish() {
    let (servers, client) = tiered_server(one).await;
    let server = &servers[0];
    let js = jetstream::new(client.clone());
    r1_stream(&js, "F").await;
    // Rates over 3 s spans, as the account-wide forecast's test.
    let flags = ["--sources", "varz,jsz", "--consumer-status-window", "24s"];
    let exporter = exporter(server, client, &flags);
    let started = unix_now();
    // 1000-byte messages at 100 a second: the 1 MiB tier is full in ~10 s.
    let fill = tokio::spawn(fill_until_refused(js.clone(), "F", 100.0));
    let mut readings = Vec::new();
    Wait::secs("the R1 tier refusing", 60)
        .every(Duration::from_millis(250))
        .until_async(async || {
            let text = common::scrape(&exporter).await;
            let polled = [("server", "op"), ("source", "jsz")];
            let at = value(
                &text,
                "nats_delivery_last_success_timestamp_seconds",
                &polled,
            );
            let forecast = exact(&text, FORECAST, &labels("R1", "file"));
            readings.push((at.expect("a /jsz poll"), forecast));
            fill.is_finished().then_some(())
        })
        .await;
    let (refused_at, error) = fill.await.unwrap();
    assert!(error.contains("resource limits exceeded"), "{error}");
    check_approach("R1 file", (started, refused_at), &readings);
}
