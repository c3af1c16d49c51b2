//! Message timestamps read over NATS from a real server: the server's stored
//! times, deleted messages skipped, filters, the budget counted in requests
//! the server received, a hung read cut off, replicated streams, the largest
//! payload. Runs against `$NATS_SERVER_VERSION`.
use crate::message_timestamps_support;

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use message_timestamps_support::*;
use nats_delivery_exporter::{MessageTimestamps, ReadResult, TimestampReply, TimestampRequest};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

#[tokio::test]
async fn timestamps_are_the_servers_stored_ones() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    // 1 a, 2 b, 3 a (deleted), 4 c, 5 a, 6 b; one stream per read method.
    let subjects = ["a", "b", "a", "c", "a", "b"];
    for (name, direct) in [("DIRECT", true), ("PLAIN", false)] {
        stream_with(&js, name, direct, &subjects).await;
        js.get_stream(name)
            .await
            .unwrap()
            .delete_message(3)
            .await
            .unwrap();
    }
    let reader = MessageTimestamps::new(client.clone(), "$G", 100);
    for name in ["DIRECT", "PLAIN"] {
        let p = |s: &str| format!("{name}.{s}");
        let cases: Vec<(TimestampRequest, Option<u64>)> = vec![
            (request("$G", name, 1, &[]), Some(1)),
            (request("$G", name, 3, &[]), Some(4)),
            (request("$G", name, 3, &[&p("a")]), Some(5)),
            (request("$G", name, 2, &[&p("c"), &p("b")]), Some(2)),
            (request("$G", name, 3, &[&p("b"), &p("c")]), Some(4)),
            (request("$G", name, 1, &[&format!("{name}.*")]), Some(1)),
            (request("$G", name, 6, &[&p("c")]), None),
            (request("$G", name, 7, &[]), None),
        ];
        let asked: Vec<_> = cases.iter().map(|(r, _)| r.clone()).collect();
        let got = reader.read(&asked, asked.len(), DEADLINE).await;
        for (r, want) in &cases {
            let want = match want {
                Some(seq) => TimestampReply::Found {
                    seq: *seq,
                    unix_seconds: stored_time(&js, name, *seq).await,
                },
                None => TimestampReply::NoMessage,
            };
            assert_eq!(got.get(r), Some(&want), "{r:?}");
        }
    }
    assert_eq!(reader.count_of(ReadResult::Read), 12);
    assert_eq!(reader.count_of(ReadResult::NoMessage), 4);
    // One request per filter: 10 direct gets for DIRECT; for PLAIN the
    // direct gets in flight before the first "no responders" came back,
    // then a message get for each of its 10 filters. Before 2.10: message
    // gets only.
    let (direct, msg_get) = reader.requests_sent();
    if uses_direct_gets(&client) {
        assert!((11..=20).contains(&direct), "{direct}");
        assert_eq!(msg_get, 10);
    } else {
        assert_eq!((direct, msg_get), (0, 20));
    }
    // From then on PLAIN is read with message gets only ("no message" is
    // not cached: these two are read again, two filters).
    let again = [
        request("$G", "PLAIN", 6, &["PLAIN.c"]),
        request("$G", "PLAIN", 7, &[]),
    ];
    let got = reader.read(&again, 2, DEADLINE).await;
    assert_eq!(
        got.values()
            .filter(|r| **r == TimestampReply::NoMessage)
            .count(),
        2
    );
    assert_eq!(reader.requests_sent(), (direct, msg_get + 2));

    // A cached answer whose message is removed stays until the stream's
    // first sequence says it is gone.
    a_removed_message_is_kept_until_forgotten(&reader, &js).await;
}

/// A cached answer whose message is removed stays until the stream's first
/// sequence says it is gone.
async fn a_removed_message_is_kept_until_forgotten(
    reader: &MessageTimestamps,
    js: &jetstream::Context,
) {
    let from_one = request("$G", "DIRECT", 1, &[]);
    js.get_stream("DIRECT")
        .await
        .unwrap()
        .delete_message(1)
        .await
        .unwrap();
    let got = reader
        .read(std::slice::from_ref(&from_one), 1, DEADLINE)
        .await;
    assert!(matches!(
        got[&from_one],
        TimestampReply::Found { seq: 1, .. }
    ));
    reader.forget_below("$G", "DIRECT", 2);
    let got = reader
        .read(std::slice::from_ref(&from_one), 1, DEADLINE)
        .await;
    let t2 = stored_time(js, "DIRECT", 2).await;
    assert_eq!(
        got[&from_one],
        TimestampReply::Found {
            seq: 2,
            unix_seconds: t2
        }
    );
}

#[tokio::test]
async fn the_budget_bounds_requests_and_cached_answers_send_none() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    stream_with(&js, "S", true, &["a", "b", "a", "b", "a"]).await;
    let connection = named(&server, "reader", None).await;
    let reader = MessageTimestamps::new(connection.clone(), "$G", 100);
    let mut counter = RequestCounter::new(&server, "reader", &reader);
    let asked: Vec<_> = (1..=5)
        .map(|seq| request("$G", "S", seq, &["S.a"]))
        .collect();

    let got = reader.read(&asked, 2, DEADLINE).await;
    assert_eq!(
        got.keys()
            .map(|r| r.from_seq)
            .collect::<std::collections::BTreeSet<_>>(),
        [1, 2].into()
    );
    assert_eq!(counter.take().await, 2);
    let sent = reader.requests_sent();
    assert_eq!(
        sent,
        if uses_direct_gets(&client) {
            (2, 0)
        } else {
            (0, 2)
        }
    );
    assert_eq!(reader.count_of(ReadResult::OverBudget), 3);

    // The first two come from the cache; the budget reads the next two.
    let got = reader.read(&asked, 2, DEADLINE).await;
    assert_eq!(got.len(), 4);
    assert!(matches!(
        got[&asked[3]],
        TimestampReply::Found { seq: 5, .. }
    ));
    assert_eq!(counter.take().await, 2);
    assert_eq!(reader.count_of(ReadResult::Cached), 2);

    // Everything cached: no request at all, even with no budget.
    let got = reader.read(&asked[..4], 0, DEADLINE).await;
    assert_eq!(got.len(), 4);
    assert_eq!(counter.take().await, 0);
    assert_eq!(reader.count_of(ReadResult::Cached), 6);
    // "No message" is never cached: asked again, it is read again.
    let past_end = request("$G", "S", 9, &["S.a"]);
    for _ in 0..2 {
        let got = reader
            .read(std::slice::from_ref(&past_end), 1, DEADLINE)
            .await;
        assert_eq!(got[&past_end], TimestampReply::NoMessage);
        assert_eq!(counter.take().await, 1);
    }

    // The counts, as exposed and as METRICS.md lists them.
    assert_counts_exposed(&reader, uses_direct_gets(&client));
}

/// The reader's counts after the budget test, as exposed and as METRICS.md
/// lists them.
fn assert_counts_exposed(reader: &MessageTimestamps, direct_gets: bool) {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(reader.clone()));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    nats_test_server::reference::assert_documented(&text);
    let exposed = nats_test_server::reference::exposed(&text);
    let documented = nats_test_server::reference::documented_in(&["Message timestamp reads"]);
    assert_eq!(
        exposed.keys().collect::<Vec<_>>(),
        documented.keys().collect::<Vec<_>>()
    );
    let (direct, msg_get) = if direct_gets { (6, 0) } else { (0, 6) };
    for line in [
        "nats_delivery_message_timestamp_reads_total{result=\"read\"} 4".to_string(),
        "nats_delivery_message_timestamp_reads_total{result=\"no_message\"} 2".into(),
        "nats_delivery_message_timestamp_reads_total{result=\"cached\"} 6".into(),
        "nats_delivery_message_timestamp_reads_total{result=\"over_budget\"} 4".into(),
        "nats_delivery_message_timestamp_reads_total{result=\"timeout\"} 0".into(),
        format!("nats_delivery_message_timestamp_requests_total{{method=\"direct_get\"}} {direct}"),
        format!("nats_delivery_message_timestamp_requests_total{{method=\"msg_get\"}} {msg_get}"),
        "nats_delivery_message_timestamp_cache_entries 4".into(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
}

#[tokio::test]
async fn unanswered_reads_end_at_the_deadline() {
    // No JetStream; something takes every API request and never answers.
    let server = NatsServer::builder().start();
    let silent = async_nats::connect(server.client_url()).await.unwrap();
    let _taker = silent.subscribe("$JS.API.>").await.unwrap();
    // A round trip on the taker's connection: after it the server knows the
    // subscription (a flush only empties the client's write buffer).
    let nobody = silent.request("roundtrip.nobody", "".into()).await;
    assert!(nobody.is_err());
    let reader = MessageTimestamps::new(
        async_nats::connect(server.client_url()).await.unwrap(),
        "$G",
        100,
    );
    // More reads than run at once: the ones never started end too.
    let asked: Vec<_> = (1..=20)
        .map(|seq| request("$G", "HUNG", seq, &[]))
        .collect();
    let got = tokio::time::timeout(
        Duration::from_secs(30),
        reader.read(&asked, 20, Duration::from_millis(300)),
    )
    .await
    .expect("the read ends at its deadline");
    assert!(got.is_empty());
    assert_eq!(reader.count_of(ReadResult::Timeout), 20);
    assert_eq!(reader.count_of(ReadResult::Read), 0);
}

#[tokio::test]
async fn a_message_of_the_largest_payload_is_read_both_ways() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let payload = bytes::Bytes::from(vec![b'x'; client.server_info().max_payload]);
    for (name, direct) in [("DIRECT", true), ("PLAIN", false)] {
        stream_with(&js, name, direct, &[]).await;
        js.publish(format!("{name}.big"), payload.clone())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let reader = MessageTimestamps::new(client.clone(), "$G", 100);
    let asked = [
        request("$G", "DIRECT", 1, &[]),
        request("$G", "PLAIN", 1, &[]),
    ];
    let got = reader.read(&asked, 2, DEADLINE).await;
    for r in &asked {
        let t = stored_time(&js, &r.stream, 1).await;
        assert_eq!(
            got.get(r),
            Some(&TimestampReply::Found {
                seq: 1,
                unix_seconds: t
            }),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn replicated_streams_are_read_from_any_server() {
    let servers = nats_test_server::cluster(3, "");
    let client = async_nats::connect(servers[0].client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let mut created = Vec::new();
    for (name, allow_direct) in [("DIRECT", true), ("PLAIN", false)] {
        // The meta group needs a leader before streams can be created.
        Wait::secs(format!("the R3 stream {name}"), 30)
            .every(Duration::from_millis(500))
            .until_async(async || {
                let config = stream::Config {
                    name: name.into(),
                    subjects: vec![format!("{name}.>")],
                    num_replicas: 3,
                    allow_direct,
                    ..Default::default()
                };
                js.get_or_create_stream(config).await
            })
            .await;
        // A stream just created in a new cluster: its subjects may reach this
        // server after the stream exists (publish_acked sends again then).
        let subjects = ["a", "b", "a"].map(|s| format!("{name}.{s}"));
        crate::common::publish_acked(&js, subjects, "x").await;
        created.push(name);
    }
    // A reader on each server: the direct gets go to any replica.
    for server in &servers {
        let reader_client = async_nats::connect(server.client_url()).await.unwrap();
        let reader = MessageTimestamps::new(reader_client, "$G", 100);
        for name in &created {
            let asked = [
                request("$G", name, 2, &[&format!("{name}.a")]),
                request("$G", name, 1, &[&format!("{name}.b")]),
            ];
            let got = reader.read(&asked, 2, DEADLINE).await;
            for (r, seq) in asked.iter().zip([3, 2]) {
                let t = stored_time(&js, name, seq).await;
                assert_eq!(
                    got.get(r),
                    Some(&TimestampReply::Found {
                        seq,
                        unix_seconds: t
                    }),
                    "{r:?}"
                );
            }
        }
    }
}
