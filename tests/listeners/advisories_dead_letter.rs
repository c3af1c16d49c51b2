//! Dead-letter capture against a real server: the dead-letter stream holds
//! exactly the dead messages, intact, never twice.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use async_nats::jetstream::{self, AckKind};
use async_nats::HeaderMap;
use futures::StreamExt;

const APP: &[(&str, &str)] = &[("account", "APP")];
const WORKER: &[(&str, &str)] = &[
    ("account", "APP"),
    ("stream", "WORK"),
    ("consumer", "worker"),
];

/// Publishes `n` messages with an application header and their own `Nats-Msg-Id`.
async fn publish_with_headers(js: &jetstream::Context, first: usize, n: usize) {
    for i in first..first + n {
        let mut h = HeaderMap::new();
        h.insert("Order-Id", format!("order-{i}").as_str());
        h.insert("Nats-Msg-Id", format!("orig-{i}").as_str());
        js.publish_with_headers(format!("work.{i}"), h, format!("payload-{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

async fn stream_messages(js: &jetstream::Context, name: &str) -> u64 {
    match js.get_stream(name).await {
        Ok(mut s) => s.info().await.unwrap().state.messages,
        Err(_) => 0,
    }
}

/// Every message in `name`, in order.
async fn all_messages(
    js: &jetstream::Context,
    name: &str,
) -> Vec<jetstream::message::StreamMessage> {
    let s = js.get_stream(name).await.unwrap();
    let last = s.cached_info().state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        if let Ok(m) = s.get_raw_message(seq).await {
            out.push(m);
        }
    }
    out
}

fn header<'a>(m: &'a jetstream::message::StreamMessage, name: &str) -> Option<&'a str> {
    m.headers.get(name).map(|v| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_messages_are_copied_intact_and_never_twice() {
    let s = server();
    let flags = ["--advisories-stream", "ADV", "--dead-letter-stream", "DLQ"];
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 3, Duration::from_millis(300)).await;
    publish_with_headers(&js, 0, 12).await;
    pull_without_ack(&consumer, 60, || {
        sample(
            &running.text(),
            "nats_delivery_dead_letter_stored_total",
            WORKER,
        ) == Some(12.0)
    })
    .await;
    wait_value(
        &running.registry,
        "nats_delivery_jetstream_max_deliveries_total",
        WORKER,
        12.0,
        5,
    )
    .await;
    assert_eq!(stream_messages(&js, "DLQ").await, 12);

    let copies = all_messages(&js, "DLQ").await;
    assert_eq!(copies.len(), 12);
    let mut seqs: Vec<u64> = Vec::new();
    for c in &copies {
        assert_eq!(c.subject.as_str(), "dead_letter.WORK.worker");
        let seq: u64 = header(c, "Dead-Letter-Stream-Sequence")
            .unwrap()
            .parse()
            .unwrap();
        let i = seq - 1; // WORK's sequence i+1 holds message i
        assert_eq!(c.payload, format!("payload-{i}").as_bytes());
        assert_eq!(header(c, "Order-Id"), Some(format!("order-{i}").as_str()));
        assert_eq!(
            header(c, "Dead-Letter-Original-Msg-Id"),
            Some(format!("orig-{i}").as_str())
        );
        assert_eq!(header(c, "Dead-Letter-Stream"), Some("WORK"));
        assert_eq!(
            header(c, "Dead-Letter-Subject"),
            Some(format!("work.{i}").as_str())
        );
        assert_eq!(header(c, "Dead-Letter-Consumer"), Some("worker"));
        assert_eq!(header(c, "Dead-Letter-Deliveries"), Some("3"));
        assert_eq!(header(c, "Dead-Letter-Reason"), Some("max_deliveries"));
        assert_eq!(header(c, "Dead-Letter-Account"), Some("APP"));
        assert!(header(c, "Dead-Letter-Time").is_some_and(|t| t.contains('T')));
        // Durable mode adds the stream's creation time to the id, so a
        // stream created again (sequences from 1) is not refused as a repeat.
        let created = header(c, "Dead-Letter-Stream-Created").expect("creation time");
        assert!(created.parse::<i64>().unwrap() > 0);
        assert_eq!(
            header(c, "Nats-Msg-Id"),
            Some(format!("APP.WORK.worker.{seq}.{created}").as_str())
        );
        seqs.push(seq);
    }
    seqs.sort();
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>());

    // Replay every advisory, as a server does after a leader change: nothing
    // is counted again and nothing is stored twice.
    let adv = all_messages(&js, "ADV").await;
    assert_eq!(adv.len(), 12);
    let app = client(&s, "app").await;
    for m in &adv {
        app.publish(m.subject.clone(), m.payload.clone())
            .await
            .unwrap();
    }
    app.flush().await.unwrap();
    wait_value(
        &running.registry,
        "nats_delivery_advisories_duplicate_total",
        APP,
        12.0,
        15,
    )
    .await;
    let text = running.text();
    assert_eq!(
        sample(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            WORKER
        ),
        Some(12.0)
    );
    assert_eq!(
        sample(&text, "nats_delivery_dead_letter_stored_total", WORKER),
        Some(12.0)
    );
    assert_eq!(stream_messages(&js, "DLQ").await, 12);
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;

    // Even a new process, which remembers nothing, stores nothing twice:
    // the dead-letter stream refuses the repeated Nats-Msg-Id.
    let fresh = start_listener(
        &s,
        "APP",
        "app",
        advisory_args(&["--dead-letter-stream", "DLQ"]),
    )
    .await;
    for m in adv.iter().take(3) {
        app.publish(m.subject.clone(), m.payload.clone())
            .await
            .unwrap();
    }
    app.flush().await.unwrap();
    wait_value(
        &fresh.registry,
        "nats_delivery_advisories_received_total",
        APP,
        3.0,
        10,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        sample(
            &fresh.text(),
            "nats_delivery_dead_letter_stored_total",
            WORKER
        ),
        None
    );
    assert_eq!(stream_messages(&js, "DLQ").await, 12);
    fresh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn originals_already_gone_are_counted_by_reason_never_as_stored() {
    let s = server();
    let flags = [
        "--advisories-stream",
        "ADV",
        "--dead-letter-stream",
        "DLQ",
        "--dead-letter-terminated",
    ];
    let first = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    first.stop().await; // streams and consumer exist; the exporter is down
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    publish_with_headers(&js, 0, 3).await;
    // All 3 die while the exporter is down, then the stream is purged.
    while stream_messages(&js, "ADV").await < 3 {
        pull_without_ack(&consumer, 5, {
            let mut once = false;
            move || std::mem::replace(&mut once, true)
        })
        .await;
    }
    js.get_stream("WORK").await.unwrap().purge().await.unwrap();

    // Terminated by the client: 2 copies with reason "client".
    let st2 = stream(&js, "TERM", "term", -1).await;
    let c2 = pull_consumer(&st2, "t", -1, Duration::from_secs(30)).await;
    publish(&js, "term", 2).await;
    let mut batch = c2
        .fetch()
        .max_messages(2)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    while let Some(m) = batch.next().await {
        m.unwrap().double_ack_with(AckKind::Term).await.unwrap();
    }

    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let missing = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
        ("reason", "max_deliveries"),
    ];
    wait_value(
        &running.registry,
        "nats_delivery_dead_letter_missing_total",
        &missing,
        3.0,
        20,
    )
    .await;
    let term = [("account", "APP"), ("stream", "TERM"), ("consumer", "t")];
    wait_value(
        &running.registry,
        "nats_delivery_dead_letter_stored_total",
        &term,
        2.0,
        10,
    )
    .await;
    let text = running.text();
    assert_eq!(
        sample(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            WORKER
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, "nats_delivery_dead_letter_stored_total", WORKER),
        None
    );
    assert_eq!(
        sample(&text, "nats_delivery_dead_letter_errors_total", APP),
        Some(0.0)
    );
    let copies = all_messages(&js, "DLQ").await;
    assert_eq!(copies.len(), 2);
    for c in &copies {
        assert_eq!(header(c, "Dead-Letter-Reason"), Some("client"));
        assert_eq!(header(c, "Dead-Letter-Stream"), Some("TERM"));
    }
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_mode_copies_dead_messages_too() {
    let s = server();
    let running = start_listener(
        &s,
        "APP",
        "app",
        advisory_args(&["--dead-letter-stream", "DLQ"]),
    )
    .await;
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 1, Duration::from_millis(300)).await;
    publish_with_headers(&js, 0, 4).await;
    pull_without_ack(&consumer, 60, || {
        sample(
            &running.text(),
            "nats_delivery_dead_letter_stored_total",
            WORKER,
        ) == Some(4.0)
    })
    .await;
    wait_value(
        &running.registry,
        "nats_delivery_dead_letter_stored_total",
        WORKER,
        4.0,
        5,
    )
    .await;
    assert_eq!(stream_messages(&js, "DLQ").await, 4);
    // The advisory connection carried only advisories: no false drops.
    assert_eq!(
        sample(
            &running.text(),
            "nats_delivery_exporter_dropped_messages_total",
            APP
        ),
        Some(0.0)
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_stream_that_refuses_copies_does_not_stall_counting() {
    let s = server();
    let js = jetstream::new(client(&s, "app").await);
    // Holds one copy and refuses the rest.
    js.create_stream(jetstream::stream::Config {
        name: "DLQ".into(),
        subjects: vec!["dead_letter.>".into()],
        max_messages: 1,
        discard: jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .unwrap();
    let flags = [
        "--advisories-stream",
        "ADV",
        "--advisories-ack-wait",
        "1s",
        "--dead-letter-stream",
        "DLQ",
    ];
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 1, Duration::from_millis(300)).await;
    publish_with_headers(&js, 0, 3).await;
    pull_without_ack(&consumer, 60, || {
        sample(
            &running.text(),
            "nats_delivery_jetstream_max_deliveries_total",
            WORKER,
        ) == Some(3.0)
    })
    .await;
    // Two copies fail 5 times each, then are given up; counting went on.
    wait_value(
        &running.registry,
        "nats_delivery_dead_letter_failed_total",
        WORKER,
        2.0,
        60,
    )
    .await;
    let text = running.text();
    assert_eq!(
        sample(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            WORKER
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, "nats_delivery_dead_letter_stored_total", WORKER),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "nats_delivery_dead_letter_errors_total", APP),
        Some(10.0)
    );
    // A message whose copy failed is counted when its copy is stored or
    // given up, not before: its redeliveries are not duplicates.
    assert_eq!(
        sample(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(0.0)
    );
    assert_eq!(stream_messages(&js, "DLQ").await, 1);
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;
}
