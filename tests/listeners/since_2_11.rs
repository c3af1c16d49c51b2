//! The advisories servers added after 2.10, against real servers, in live
//! and durable mode: an atomic batch abandoned with a gap and one left to
//! time out (2.12+), a priority group pinning a client and unpinning it
//! when it stops pulling (2.11+). Each counted once, garbage as malformed,
//! the families absent on servers without them.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use async_nats::HeaderMap;
use futures::StreamExt;
use nats_test_server::NatsServer;
use serde_json::{json, Value};

const APP: &[(&str, &str)] = &[("account", "APP")];
const BATCHES: &str = "nats_delivery_jetstream_batches_abandoned_total";
const PINS: &str = "nats_delivery_jetstream_priority_group_pins_total";
const UNPINS: &str = "nats_delivery_jetstream_priority_group_unpins_total";
const MALFORMED: &str = "nats_delivery_advisories_malformed_total";

async fn api(app: &async_nats::Client, subject: &str, body: Value) -> Value {
    let reply = app
        .request(subject.to_string(), body.to_string().into())
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(v.get("error").is_none(), "{subject}: {v}");
    v
}

/// Publishes a garbage advisory and waits until it is counted as the
/// `n`th malformed one: everything sent before it has been read.
async fn marker(app: &async_nats::Client, running: &Running, n: f64) {
    app.publish(
        "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.X",
        "garbage".into(),
    )
    .await
    .unwrap();
    app.flush().await.unwrap();
    wait_value(&running.registry, MALFORMED, APP, n, 30).await;
}

/// One message of atomic batch `id` at sequence `seq` to stream B.
async fn batch_message(app: &async_nats::Client, id: &str, seq: u64) {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Batch-Id", id);
    headers.insert("Nats-Batch-Sequence", seq.to_string().as_str());
    app.request_with_headers("b.x", headers, "m".into())
        .await
        .unwrap();
}

async fn count(running: &Running, name: &str, stream: &str, reason: &str, want: f64, secs: u64) {
    let labels = [("account", "APP"), ("stream", stream), ("reason", reason)];
    wait_value(&running.registry, name, &labels, want, secs).await;
}

/// With `old_stream`, an advisory stream ADV made before these advisories
/// were counted (the delivery advisories' subjects only) exists first.
async fn added_advisories_are_counted_once(mode: &[&str], old_stream: bool) {
    let s: NatsServer = server();
    let app = client(&s, "app").await;
    if old_stream {
        let subjects = [
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>",
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>",
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>",
        ];
        let body = json!({"name": "ADV", "subjects": subjects});
        api(&app, "$JS.API.STREAM.CREATE.ADV", body).await;
    }
    let version = app.server_info().version;
    let at_least = |v: Vec<u64>| nats_test_server::version_numbers(&version) >= v;
    let running = start_listener(&s, "APP", "app", advisory_args(mode)).await;
    // The live subscriptions are up once a garbage advisory is counted.
    marker(&app, &running, 1.0).await;
    // The server's own advisories, read beside the exporter.
    let mut told = app.subscribe("$JS.EVENT.ADVISORY.*.*.>").await.unwrap();
    app.flush().await.unwrap();

    api(
        &app,
        "$JS.API.STREAM.CREATE.B",
        json!({"name": "B", "subjects": ["b.>"], "allow_atomic": true}),
    )
    .await;
    // A gap in the sequence abandons batch "gap" at once; batch "late" gets
    // no commit and is abandoned when the batch timeout (10 s) runs out.
    batch_message(&app, "gap", 1).await;
    batch_message(&app, "gap", 3).await;
    batch_message(&app, "late", 1).await;
    if at_least(vec![2, 11]) {
        pin_and_let_go(&app).await;
    }
    if at_least(vec![2, 12]) {
        count(&running, BATCHES, "B", "incomplete", 1.0, 30).await;
        count(&running, BATCHES, "B", "timeout", 1.0, 60).await;
    }
    if at_least(vec![2, 11]) {
        count(&running, PINS, "W", "pinned", 1.0, 30).await;
        count(&running, UNPINS, "W", "timeout", 1.0, 30).await;
    }
    // Everything the server sent before this marker has been counted.
    marker(&app, &running, 2.0).await;
    let text = running.text();
    let mut seen = Vec::new();
    while let Some(Some(m)) = futures::FutureExt::now_or_never(told.next()) {
        let v: Value = serde_json::from_slice(&m.payload).unwrap_or_default();
        seen.push(format!("{} {}", m.subject, v["reason"]));
    }
    println!("{version}: the server sent {seen:?}");
    let of = |prefix: &str| seen.iter().filter(|s| s.starts_with(prefix)).count();
    // The exporter's counts are the server's advisories, once each.
    let families = [
        (
            BATCHES,
            "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.B ",
            vec![2, 12],
        ),
        (PINS, "$JS.EVENT.ADVISORY.CONSUMER.PINNED.", vec![2, 11]),
        (UNPINS, "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.", vec![2, 11]),
    ];
    for (family, prefix, since) in families {
        let total: f64 = nats_test_server::sample::samples(&text, family, &[])
            .iter()
            .map(|s| s.1)
            .sum();
        if at_least(since) {
            assert_eq!(total, of(prefix) as f64, "{family}: {seen:?}\n{text}");
        } else {
            assert_eq!(of(prefix), 0);
            assert!(!text.contains(family), "{family} on {version}: {text}");
        }
    }
    if at_least(vec![2, 12]) {
        // Nothing of an abandoned batch is stored.
        let info = api(&app, "$JS.API.STREAM.INFO.B", json!({})).await;
        assert_eq!(info["state"]["messages"], 0, "{info}");
    }
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_advisories_are_counted_once_live() {
    added_advisories_are_counted_once(&[], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_advisories_are_counted_once_in_durable_mode() {
    added_advisories_are_counted_once(&["--advisories-stream", "ADV"], false).await;
}

/// An advisory stream that does not capture them: read live instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_advisories_are_counted_once_beside_an_older_advisory_stream() {
    added_advisories_are_counted_once(&["--advisories-stream", "ADV"], true).await;
}

/// Durable mode counts these advisories from its stream, like the others:
/// made while the exporter is stopped, they are counted once it starts
/// again; handed out again (the consumer made again from the stream's
/// start while it is stopped), they are not counted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_durable_mode_they_are_counted_across_restarts_exactly_once() {
    let s: NatsServer = server();
    let app = client(&s, "app").await;
    let version = app.server_info().version;
    let at_least = |v: Vec<u64>| nats_test_server::version_numbers(&version) >= v;
    if !at_least(vec![2, 11]) {
        eprintln!("no batch or pin advisories before nats-server 2.11");
        return;
    }
    let js = async_nats::jetstream::new(app.clone());
    let flags = ["--advisories-stream", "ADV"];
    let first = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    marker(&app, &first, 1.0).await;
    first.stop().await;

    // While no exporter runs: a pin and its unpin (and, 2.12+, a batch
    // abandoned for a gap), stored in ADV after the marker.
    let mut expected = advisories_in_stream(&js).await + 2;
    if at_least(vec![2, 12]) {
        api(
            &app,
            "$JS.API.STREAM.CREATE.B",
            json!({"name": "B", "subjects": ["b.>"], "allow_atomic": true}),
        )
        .await;
        batch_message(&app, "gap", 1).await;
        batch_message(&app, "gap", 3).await;
        expected += 1;
    }
    pin_and_let_go(&app).await;
    Wait::secs(format!("{expected} advisories in ADV"), 30)
        .until_async(async || {
            let stored = advisories_in_stream(&js).await;
            (stored >= expected).then_some(()).ok_or(stored)
        })
        .await;

    let check = async |running: &Running| {
        wait_all_acknowledged(&js, "nats-delivery-exporter").await;
        let text = running.text();
        let at = |name, stream, reason| {
            let labels = [("account", "APP"), ("stream", stream), ("reason", reason)];
            exact(&text, name, &labels)
        };
        assert_eq!(at(PINS, "W", "pinned"), Some(1.0), "{text}");
        assert_eq!(at(UNPINS, "W", "timeout"), Some(1.0), "{text}");
        let batches = at_least(vec![2, 12]).then_some(1.0);
        assert_eq!(at(BATCHES, "B", "incomplete"), batches, "{text}");
        assert_eq!(exact(&text, MALFORMED, APP), Some(1.0), "{text}");
    };
    let second = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    check(&second).await;
    second.stop().await;

    // Handed out again from the start: recognised, not counted again.
    let adv = js.get_stream("ADV").await.unwrap();
    adv.delete_consumer("nats-delivery-exporter").await.unwrap();
    adv.create_consumer(async_nats::jetstream::consumer::pull::Config {
        durable_name: Some("nats-delivery-exporter".into()),
        ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
        max_deliver: -1,
        ..Default::default()
    })
    .await
    .unwrap();
    let third = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    check(&third).await;
    third.stop().await;
}

/// Consumer `pinned` of a new stream W pins this client with one pull in
/// group g, and unpins it 1 s later (no further pull).
async fn pin_and_let_go(app: &async_nats::Client) {
    api(
        app,
        "$JS.API.STREAM.CREATE.W",
        json!({"name": "W", "subjects": ["w.>"]}),
    )
    .await;
    let config = json!({"durable_name": "pinned", "ack_policy": "explicit",
        "priority_policy": "pinned_client", "priority_groups": ["g"],
        "priority_timeout": 1_000_000_000u64});
    let body = json!({"stream_name": "W", "config": config});
    api(app, "$JS.API.CONSUMER.CREATE.W.pinned", body).await;
    app.request("w.1", "x".into()).await.unwrap();
    let pull = json!({"batch": 1, "group": "g", "expires": 5_000_000_000u64});
    let inbox = app.new_inbox();
    let mut replies = app.subscribe(inbox.clone()).await.unwrap();
    let next = "$JS.API.CONSUMER.MSG.NEXT.W.pinned";
    app.publish_with_reply(next, inbox, pull.to_string().into())
        .await
        .unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(10), replies.next())
        .await
        .expect("a message for the pull")
        .unwrap();
    assert_eq!(msg.subject.as_str(), "w.1", "{msg:?}");
}
