//! Purges and message deletes counted from the JetStream API audit
//! advisories, on real servers: every kind of purge, a delete, a failed
//! delete and a failed purge, in live and durable mode and on a 3-node
//! cluster with an R3 stream whose leader steps down halfway. The counters
//! must equal the server's own `purged` figures and the deletes it
//! confirmed, and garbage on the audit subject must count as malformed,
//! never as a purge.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use async_nats::jetstream;
use serde_json::{json, Value};

const APP: &[(&str, &str)] = &[("account", "APP")];
const PURGED: &str = "nats_delivery_jetstream_stream_purged_messages_total";
const DELETED: &str = "nats_delivery_jetstream_stream_deleted_messages_total";
const MALFORMED: &str = "nats_delivery_api_audits_malformed_total";

/// One JetStream API request and its JSON answer.
async fn api(app: &async_nats::Client, subject: &str, body: Value) -> Value {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        app.request(subject.to_string(), body.into()),
    )
    .await
    .unwrap_or_else(|_| panic!("{subject}: no answer in 10 s"))
    .unwrap_or_else(|e| panic!("{subject}: {e}"));
    serde_json::from_slice(&reply.payload).expect("JSON answer")
}

/// Messages the stream holds, by its own account.
async fn messages(app: &async_nats::Client, stream: &str) -> u64 {
    let info = api(app, &format!("$JS.API.STREAM.INFO.{stream}"), Value::Null).await;
    info["state"]["messages"].as_u64().expect("state.messages")
}

/// Publishes `n` messages alternating between `<prefix>.a` and `<prefix>.b`.
async fn publish_ab(js: &jetstream::Context, prefix: &str, n: usize) {
    for i in 0..n {
        let subject = format!("{prefix}.{}", if i % 2 == 0 { "a" } else { "b" });
        js.publish(subject, format!("m{i}").into())
            .await
            .expect("publish")
            .await
            .expect("puback");
    }
}

/// Purges stream `stream` with `body`; checks the server's `purged` figure
/// against the messages the stream lost, and returns it.
async fn purge(app: &async_nats::Client, stream: &str, body: Value) -> u64 {
    let before = messages(app, stream).await;
    let answer = api(app, &format!("$JS.API.STREAM.PURGE.{stream}"), body.clone()).await;
    assert_eq!(answer["success"], json!(true), "purge {body}: {answer}");
    let purged = answer["purged"].as_u64().expect("purged");
    assert_eq!(before - messages(app, stream).await, purged, "purge {body}");
    println!("purge {body}: the server purged {purged}");
    purged
}

/// Removes messages from `stream` (subjects `<prefix>.>`) every way the API
/// allows: one message delete, a purge by subject, by sequence, keeping the
/// last messages and of everything; also a delete of a message that is gone
/// and a purge of a stream that does not exist, which remove nothing.
/// With `step_down` (a clustered stream), its leader steps down halfway.
/// Returns the sum of the server's `purged` figures.
async fn remove_every_way(
    app: &async_nats::Client,
    js: &jetstream::Context,
    stream: &str,
    prefix: &str,
    step_down: bool,
) -> u64 {
    publish_ab(js, prefix, 12).await;
    let delete = format!("$JS.API.STREAM.MSG.DELETE.{stream}");
    let answer = api(app, &delete, json!({"seq": 3})).await;
    assert_eq!(answer["success"], json!(true), "{answer}");
    assert_eq!(messages(app, stream).await, 11);
    let again = api(app, &delete, json!({"seq": 3})).await;
    assert!(
        again["error"].is_object(),
        "deleting a gone message: {again}"
    );
    // Left: 1 5 7 9 11 (a), 2 4 .. 12 (b).
    let mut figures = vec![purge(app, stream, json!({"filter": format!("{prefix}.b")})).await];
    figures.push(purge(app, stream, json!({"seq": 8})).await);
    if step_down {
        new_leader(app, stream).await;
    }
    publish_ab(js, prefix, 4).await;
    // Left: 9 11 13 14 15 16.
    figures.push(purge(app, stream, json!({"keep": 2})).await);
    figures.push(purge(app, stream, Value::Null).await);
    assert_eq!(messages(app, stream).await, 0);
    // 2.9.10 keeps one message fewer than asked (the counters follow what
    // the server says it purged, which is what the stream lost).
    let version = nats_test_server::version_numbers(&app.server_info().version);
    let want = if version < vec![2, 10] {
        [6, 3, 5, 1]
    } else {
        [6, 3, 4, 2]
    };
    assert_eq!(figures, want);
    let none = api(app, "$JS.API.STREAM.PURGE.NO_SUCH_STREAM", Value::Null).await;
    assert!(none["error"].is_object(), "purging no stream: {none}");
    figures.iter().sum()
}

/// The stream's leader, once one answers (`None` while none does).
async fn leader(app: &async_nats::Client, stream: &str) -> Option<String> {
    let subject = format!("$JS.API.STREAM.INFO.{stream}");
    let reply = tokio::time::timeout(Duration::from_secs(2), app.request(subject, "".into()))
        .await
        .ok()?
        .ok()?;
    let info: Value = serde_json::from_slice(&reply.payload).ok()?;
    let leader = info["cluster"]["leader"].as_str()?;
    (!leader.is_empty()).then(|| leader.to_string())
}

/// Asks the stream's leader to step down and waits until another server
/// leads it (at most 30 s).
async fn new_leader(app: &async_nats::Client, stream: &str) {
    let old = leader(app, stream).await.expect("a stream leader");
    let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
    let answer = api(app, &subject, Value::Null).await;
    assert_eq!(answer["success"], json!(true), "step down: {answer}");
    Wait::secs(format!("{stream}: a new leader"), 30)
        .every(Duration::from_millis(200))
        .until_async(async || match leader(app, stream).await {
            Some(l) if l != old => Ok(()),
            other => Err(other),
        })
        .await;
}

/// Waits until the listener shows `purged` and one delete for `stream`,
/// no malformed audit; then publishes garbage on the audit subject and
/// checks it counts as malformed and changes nothing else.
async fn check_counts(running: &Running, app: &async_nats::Client, stream: &str, purged: u64) {
    let labels = [("account", "APP"), ("stream", stream)];
    wait_value(&running.registry, PURGED, &labels, purged as f64, 20).await;
    wait_value(&running.registry, DELETED, &labels, 1.0, 5).await;
    let text = running.text();
    assert_eq!(exact(&text, MALFORMED, APP), Some(0.0));
    assert_eq!(
        exact(
            &text,
            PURGED,
            &[("account", "APP"), ("stream", "NO_SUCH_STREAM")]
        ),
        None
    );
    let forged = json!({
        "type": "io.nats.jetstream.advisory.v1.api_audit",
        "subject": format!("$JS.API.STREAM.PURGE.{stream}"),
        "response": r#"{"type":"io.nats.jetstream.api.v1.stream_info_response","success":true,"purged":1000}"#,
    });
    for garbage in ["not json".to_string(), forged.to_string()] {
        app.publish("$JS.EVENT.ADVISORY.API", garbage.into())
            .await
            .expect("publish garbage");
    }
    app.flush().await.expect("flush");
    wait_value(&running.registry, MALFORMED, APP, 2.0, 10).await;
    let text = running.text();
    assert_eq!(exact(&text, PURGED, &labels), Some(purged as f64));
    assert_eq!(exact(&text, DELETED, &labels), Some(1.0));
    assert_eq!(
        exact(&text, "nats_delivery_exporter_dropped_messages_total", APP),
        Some(0.0)
    );
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_purges_and_deletes_equal_the_servers_figures() {
    let s = server();
    let running = start_listener(&s, "APP", "app", advisory_args(&[])).await;
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    stream(&js, "ORDERS", "orders", -1).await;
    let purged = remove_every_way(&app, &js, "ORDERS", "orders", false).await;
    check_counts(&running, &app, "ORDERS", purged).await;
    // The delivery advisories' own counters saw none of it.
    let text = running.text();
    for m in [
        "nats_delivery_advisories_received_total",
        "nats_delivery_advisories_malformed_total",
    ] {
        assert_eq!(exact(&text, m, APP), Some(0.0), "{m}");
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_mode_counts_purges_while_it_runs() {
    let s = server();
    let running = start_listener(
        &s,
        "APP",
        "app",
        advisory_args(&["--advisories-stream", "ADV"]),
    )
    .await;
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    stream(&js, "ORDERS", "orders", -1).await;
    let purged = remove_every_way(&app, &js, "ORDERS", "orders", false).await;
    check_counts(&running, &app, "ORDERS", purged).await;
    // The advisory stream keeps to its three subjects: the audits are not in it.
    assert_eq!(advisories_in_stream(&js).await, 0);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_audits_each_purge_once() {
    let servers = nats_test_server::cluster(3, ACCOUNTS);
    // The listener on one server, the requests through another: the stream
    // leader, wherever it is, answers and audits.
    let running = start_listener(&servers[0], "APP", "app", advisory_args(&[])).await;
    let app = client(&servers[2], "app").await;
    let js = jetstream::new(app.clone());
    Wait::secs("a JetStream cluster for ORDERS", 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            js.get_or_create_stream(jetstream::stream::Config {
                name: "ORDERS".into(),
                subjects: vec!["orders.>".into()],
                num_replicas: 3,
                ..Default::default()
            })
            .await
        })
        .await;
    let purged = remove_every_way(&app, &js, "ORDERS", "orders", true).await;
    check_counts(&running, &app, "ORDERS", purged).await;
    running.stop().await;
}

/// Account APP with a user `app` allowed everything and a user `narrow`
/// allowed to subscribe to the delivery advisories only, as a deployment
/// set up before the API audits were read.
const NARROW: &str = r#"
accounts {
  APP { jetstream: enabled, users: [
    { user: app, password: app-secret },
    { user: narrow, password: narrow-secret,
      permissions: { subscribe: { allow: ["$JS.EVENT.ADVISORY.CONSUMER.>", "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", "_INBOX.>"] } } }
  ] }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_audit_subject_is_counted_and_the_rest_goes_on() {
    let s = nats_test_server::NatsServer::builder()
        .jetstream()
        .config(NARROW)
        .start();
    let running = start_listener(&s, "APP", "narrow", advisory_args(&[])).await;
    let errors = "nats_delivery_advisory_listener_errors_total";
    let permission = [("account", "APP"), ("kind", "permission")];
    wait_value(&running.registry, errors, &permission, 1.0, 10).await;
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    let st = stream(&js, "JOBS", "jobs", -1).await;
    let consumer = pull_consumer(&st, "jobber", -1, Duration::from_secs(30)).await;
    publish(&js, "jobs", 1).await;
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .expect("fetch");
    let m = futures::StreamExt::next(&mut batch)
        .await
        .expect("a message")
        .expect("message");
    m.ack_with(jetstream::AckKind::Nak(None))
        .await
        .expect("nak");
    let naks = [
        ("account", "APP"),
        ("stream", "JOBS"),
        ("consumer", "jobber"),
    ];
    wait_value(
        &running.registry,
        "nats_delivery_jetstream_naks_total",
        &naks,
        1.0,
        10,
    )
    .await;
    assert_eq!(purge(&app, "JOBS", Value::Null).await, 1);
    let text = running.text();
    let labels = [("account", "APP"), ("stream", "JOBS")];
    assert_eq!(exact(&text, PURGED, &labels), None);
    assert_eq!(exact(&text, errors, &permission), Some(1.0));
    assert_eq!(
        exact(&text, "nats_delivery_advisory_listener_up", APP),
        Some(1.0)
    );
    running.stop().await;
}
