//! Each account's JetStream storage against a real server: account `A`
//! limited (`max_file`, `max_mem`), account `U` not. The usage must equal
//! what the account's streams hold, the limits what the configuration set,
//! over HTTP and through the system account alike; and the forecast of when
//! the account is full, made from the exporter's own polls while a
//! publisher fills it at a steady rate, must name the moment the server
//! refuses the first publish within 20% of the time then left.
use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, stream};
use nats_test_server::sample::{exact, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const USED: &str = "nats_delivery_account_jetstream_used_bytes";
const LIMIT: &str = "nats_delivery_account_jetstream_limit_bytes";
const FORECAST: &str = "nats_delivery_account_jetstream_full_forecast_seconds";

/// Account `A`'s limits.
const MAX_FILE: u64 = 1024 * 1024;
const MAX_MEM: u64 = 512 * 1024;

pub(crate) fn accounts() -> String {
    format!(
        r#"
accounts {{
  SYS {{ users: [ {{ user: sys, password: sys-secret }} ] }}
  A {{ users: [ {{ user: a, password: a }} ], jetstream: {{ max_file: {MAX_FILE}, max_mem: {MAX_MEM}, max_streams: 5, max_consumers: 7 }} }}
  U {{ users: [ {{ user: u, password: u }} ], jetstream: enabled }}
}}
system_account: SYS
"#
    )
}

/// A JetStream server named `acc` with [`accounts`].
pub(crate) fn accounts_server() -> NatsServer {
    NatsServer::builder()
        .jetstream()
        .name("acc")
        .config(&accounts())
        .start()
}

pub(crate) async fn connect(server: &NatsServer, user: &str) -> jetstream::Context {
    let options = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into());
    let client = options.connect(server.client_url()).await.unwrap();
    jetstream::new(client)
}

pub(crate) async fn stream_in(js: &jetstream::Context, name: &str, storage: stream::StorageType) {
    let config = stream::Config {
        name: name.into(),
        subjects: vec![format!("{name}.>")],
        storage,
        ..Default::default()
    };
    js.create_stream(config).await.unwrap();
}

/// The bytes `js`'s stream `name` stores, as the server reports them.
pub(crate) async fn stored(js: &jetstream::Context, name: &str) -> u64 {
    let mut s = js.get_stream(name).await.unwrap();
    s.info().await.unwrap().state.bytes
}

fn labels<'a>(server: &'a str, account: &'a str, kind: &'a str) -> [(&'a str, &'a str); 3] {
    [("server", server), ("account", account), ("storage", kind)]
}

#[tokio::test]
async fn usage_and_limits_are_the_servers_own_over_http_and_the_system_account() {
    let server = accounts_server();
    let a = connect(&server, "a").await;
    let u = connect(&server, "u").await;
    stream_in(&a, "AF", stream::StorageType::File).await;
    stream_in(&a, "AM", stream::StorageType::Memory).await;
    stream_in(&u, "UF", stream::StorageType::File).await;
    for (js, name, n) in [(&a, "AF", 7), (&a, "AM", 5), (&u, "UF", 3)] {
        let subjects = (0..n).map(|i| format!("{name}.{i}"));
        common::publish_acked(js, subjects, "a payload of some bytes").await;
    }
    let want = [
        ("A", "file", stored(&a, "AF").await, Some(MAX_FILE)),
        ("A", "memory", stored(&a, "AM").await, Some(MAX_MEM)),
        ("U", "file", stored(&u, "UF").await, None),
        ("U", "memory", 0, None),
    ];
    assert!(
        want[..3].iter().all(|w| w.2 > 0),
        "streams hold bytes: {want:?}"
    );

    let http = common::exporter(&[server.monitor_url()], &["--sources", "varz,jsz"]);
    let system = common::system_polling::system_exporter(&server.client_url(), "varz,jsz").await;
    for (how, exporter) in [("HTTP", &http), ("system account", &system)] {
        let text = common::scrape(exporter).await;
        for (account, kind, used, limit) in want {
            let l = labels("acc", account, kind);
            let what = format!("{how}: {account} {kind}");
            assert_eq!(exact(&text, USED, &l), Some(used as f64), "{what}\n{text}");
            assert_eq!(exact(&text, LIMIT, &l), limit.map(|b| b as f64), "{what}");
            // One poll: no rate, no forecast.
            assert_eq!(exact(&text, FORECAST, &l), None, "{what}");
        }
        nats_test_server::reference::assert_documented(&text);
    }
}

/// The two streams that fill account `A`: name, storage kind, messages a
/// second. Each fills its kind's limit in about 10 s with 1000-byte
/// payloads (a message takes some 30 bytes more in the store).
const FILLS: [(&str, stream::StorageType, &str, f64); 2] = [
    ("AF", stream::StorageType::File, "file", 100.0),
    ("AM", stream::StorageType::Memory, "memory", 50.0),
];

/// Publishes to `stream` at `rate` until the server refuses a message and
/// returns when it did, as Unix seconds, with the error. Paced by count:
/// message `n` goes out `n / rate` seconds after the start, at once when
/// late, so that a stall on a loaded machine is made up and the rate over
/// any second or more stays `rate`. Acknowledgements are awaited beside the
/// publishes: waiting for each before the next, a loaded machine published
/// below `rate` and the refusal came later than any forecast could tell.
pub(crate) async fn fill_until_refused(
    js: jetstream::Context,
    stream: &str,
    rate: f64,
) -> (f64, String) {
    let start = Instant::now();
    let payload = bytes::Bytes::from(vec![b'x'; 1000]);
    let (refused, mut first_refusal) = tokio::sync::mpsc::unbounded_channel();
    for n in 0u64.. {
        let due = start + Duration::from_secs_f64(n as f64 / rate);
        tokio::select! {
            biased;
            Some(refusal) = first_refusal.recv() => return refusal,
            _ = tokio::time::sleep_until(due.into()) => {}
        }
        let ack = js
            .publish(format!("{stream}.x"), payload.clone())
            .await
            .unwrap();
        let refused = refused.clone();
        tokio::spawn(async move {
            if let Err(e) = ack.await {
                let _ = refused.send((unix_now(), e.to_string()));
            }
        });
    }
    unreachable!("the account's limit refuses a message")
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

// Several threads: a scrape (in this process) must not hold up the
// publishers, whose refusals are the truth the forecasts are held to.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_forecast_names_the_moment_the_full_account_refuses_a_publish() {
    let server = accounts_server();
    let a = connect(&server, "a").await;
    for (name, storage, ..) in FILLS {
        stream_in(&a, name, storage).await;
    }
    // A 24 s status window: rates are measured over 3 s spans, over which
    // a publisher held up on a loaded machine has made up what it missed
    // (over 1 s spans, one such stall made a forecast 48% long).
    let flags = ["--sources", "varz,jsz", "--consumer-status-window", "24s"];
    let exporter = common::exporter(&[server.monitor_url()], &flags);
    let started = unix_now();
    let mut fills: Vec<_> = (FILLS.iter())
        .map(|&(name, _, _, rate)| tokio::spawn(fill_until_refused(a.clone(), name, rate)))
        .collect();
    // (when the exporter polled /jsz, forecast) per kind, until both refused.
    let mut readings: Vec<Vec<(f64, Option<f64>)>> = vec![Vec::new(); FILLS.len()];
    Wait::secs("both kinds of storage refusing", 60)
        .every(Duration::from_millis(250))
        .until_async(async || {
            let text = common::scrape(&exporter).await;
            // The time of the poll the forecast was made from, not of the
            // scrape's answer: a slow scrape does not shift it.
            let polled = [("server", "acc"), ("source", "jsz")];
            let at = value(
                &text,
                "nats_delivery_last_success_timestamp_seconds",
                &polled,
            );
            for (i, (_, _, kind, _)) in FILLS.iter().enumerate() {
                let forecast = exact(&text, FORECAST, &labels("acc", "A", kind));
                readings[i].push((at.expect("a /jsz poll"), forecast));
            }
            fills.iter().all(|f| f.is_finished()).then_some(())
        })
        .await;
    for (i, (name, _, kind, _)) in FILLS.iter().enumerate() {
        let (refused_at, error) = (&mut fills[i]).await.unwrap();
        assert!(
            error.contains("resource limits exceeded"),
            "{name}: {error}"
        );
        check_approach(kind, (started, refused_at), &readings[i]);
    }
}

/// How precisely the test knows a forecast's moment: the exporter's clock
/// when it took the poll, a little after the server's `now`.
const RESOLUTION: f64 = 0.25;

/// Every reading from 40% to 85% of the approach (from `start` to the
/// refusal) names the refusal within 20% of the time then left, plus
/// [`RESOLUTION`]. (The first 3 s have no rate yet; near the end the
/// time left is too short for a percentage to mean much.)
pub(crate) fn check_approach(
    kind: &str,
    (start, refused_at): (f64, f64),
    readings: &[(f64, Option<f64>)],
) {
    let approach = refused_at - start;
    let (from, to) = (start + 0.4 * approach, start + 0.85 * approach);
    let mut errors = Vec::new();
    for &(at, forecast) in readings.iter().filter(|(at, _)| (from..to).contains(at)) {
        let left = refused_at - at;
        let forecast =
            forecast.unwrap_or_else(|| panic!("{kind}: no forecast {left:.2} s before refusal"));
        errors.push((left, forecast, (forecast - left) / left));
    }
    let worst = errors.iter().map(|e| e.2.abs()).fold(0.0, f64::max);
    println!(
        "{kind}: approach {approach:.2} s, {} readings checked, worst relative error {:.1}% (time left, forecast, error): {errors:.2?}",
        errors.len(),
        worst * 100.0
    );
    let beyond =
        |&(left, forecast, _): &(f64, f64, f64)| (forecast - left).abs() > 0.2 * left + RESOLUTION;
    assert!(errors.len() >= 4, "{kind}: {errors:?}");
    assert!(!errors.iter().any(beyond), "{kind}: {errors:?}");
}

/// In a cluster, every server reports the account's whole usage, each
/// replica counted: an R3 stream's bytes three times, on each server.
#[tokio::test]
async fn each_server_of_a_cluster_reports_every_replica_of_the_account() {
    let limit = format!(
        "accounts {{ A {{ users: [ {{ user: a, password: a }} ], jetstream: {{ max_file: {MAX_FILE} }} }} }}"
    );
    let servers = nats_test_server::cluster(3, &limit);
    let a = connect(&servers[0], "a").await;
    let config = stream::Config {
        name: "R3".into(),
        subjects: vec!["R3.>".into()],
        num_replicas: 3,
        ..Default::default()
    };
    Wait::secs("a JetStream cluster ready for replicated streams", 30)
        .every(Duration::from_millis(200))
        .until_async(|| {
            let (a, config) = (a.clone(), config.clone());
            async move { a.get_or_create_stream(config).await.ok() }
        })
        .await;
    common::publish_acked(&a, (0..9).map(|i| format!("R3.{i}")), "replicated").await;
    let bytes = stored(&a, "R3").await;
    assert!(bytes > 0);
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    let exporter = common::exporter(&urls, &["--sources", "varz,jsz"]);
    let names = ["n0", "n1", "n2"];
    // The servers tell one another their usage now and then: awaited.
    Wait::secs("every server to report the three replicas", 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let text = common::scrape(&exporter).await;
            let seen = names.map(|n| exact(&text, USED, &labels(n, "A", "file")));
            let limits = names.map(|n| exact(&text, LIMIT, &labels(n, "A", "file")));
            let want = (3 * bytes) as f64;
            match (seen, limits) {
                (s, l) if s == [Some(want); 3] && l == [Some(MAX_FILE as f64); 3] => Ok(()),
                other => Err(format!("want {want} and {MAX_FILE} on each: {other:?}")),
            }
        })
        .await;
}

/// With a NATS connection (the timestamp reader's), its account's streams
/// and consumers and their limits, from `$JS.API.INFO`: `A` limited, `U` not.
#[tokio::test]
async fn the_connections_account_has_its_streams_consumers_and_their_limits() {
    let server = accounts_server();
    let a = connect(&server, "a").await;
    let u = connect(&server, "u").await;
    for name in ["S1", "S2"] {
        stream_in(&a, name, stream::StorageType::File).await;
    }
    stream_in(&u, "UF", stream::StorageType::File).await;
    let s1 = a.get_stream("S1").await.unwrap();
    for c in ["c1", "c2"] {
        let config = async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(c.into()),
            ..Default::default()
        };
        s1.create_consumer(config).await.unwrap();
    }
    // (user, account, streams, consumers, max_streams, max_consumers)
    let cases = [
        ("a", "A", 2.0, 2.0, Some(5.0), Some(7.0)),
        ("u", "U", 1.0, 0.0, None, None),
    ];
    for (user, account, streams, consumers, max_streams, max_consumers) in cases {
        let options = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into());
        let client = options.connect(server.client_url()).await.unwrap();
        let mut exporter =
            common::exporter_builder(&[server.monitor_url()], &["--sources", "varz,jsz"]);
        exporter.read_timestamps(nats_delivery_exporter::MessageTimestamps::new(
            client, account, 100,
        ));
        let text = common::scrape(&exporter.build()).await;
        let l = [("account", account)];
        let got = [
            "nats_delivery_account_jetstream_streams",
            "nats_delivery_account_jetstream_consumers",
            "nats_delivery_account_jetstream_max_streams",
            "nats_delivery_account_jetstream_max_consumers",
        ]
        .map(|name| exact(&text, name, &l));
        let want = [Some(streams), Some(consumers), max_streams, max_consumers];
        assert_eq!(got, want, "{account}\n{text}");
        nats_test_server::reference::assert_documented(&text);
    }
}
