//! Dead-letter capture against a real server: the dead-letter stream holds
//! exactly the dead messages, intact, never twice.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::dead_letter::*;
use advisories_support::*;
use async_nats::jetstream;
use nats_test_server::NatsServer;

const APP: &[(&str, &str)] = &[("account", "APP")];
const WORKER: &[(&str, &str)] = &[
    ("account", "APP"),
    ("stream", "WORK"),
    ("consumer", "worker"),
];

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
        exact(
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
    let mut seqs: Vec<u64> = copies.iter().map(assert_intact_copy).collect();
    seqs.sort();
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>());

    // Replay every advisory, as a server does after a leader change: nothing
    // is counted again and nothing is stored twice.
    let adv = all_messages(&js, "ADV").await;
    assert_eq!(adv.len(), 12);
    let app = client(&s, "app").await;
    republish(&app, &adv).await;
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
        exact(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            WORKER
        ),
        Some(12.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_dead_letter_stored_total", WORKER),
        Some(12.0)
    );
    assert_eq!(stream_messages(&js, "DLQ").await, 12);
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;

    // Even a new process, which remembers nothing, stores nothing twice.
    a_new_process_stores_nothing_twice(&s, &app, &adv[..3]).await;
    assert_eq!(stream_messages(&js, "DLQ").await, 12);
}

/// Starts a new listener, which remembers nothing, and replays
/// `advisories` (3 of them) to it: the dead-letter stream refuses the
/// repeated Nats-Msg-Id, so nothing is stored.
async fn a_new_process_stores_nothing_twice(
    s: &NatsServer,
    app: &async_nats::Client,
    advisories: &[jetstream::message::StreamMessage],
) {
    let fresh = start_listener(
        s,
        "APP",
        "app",
        advisory_args(&["--dead-letter-stream", "DLQ"]),
    )
    .await;
    republish(app, advisories).await;
    wait_value(
        &fresh.registry,
        "nats_delivery_advisories_received_total",
        APP,
        3.0,
        10,
    )
    .await;
    mark_handled(&fresh, app, MAX_DELIVERIES_SUBJECT, "APP", 4.0).await;
    assert_eq!(
        exact(
            &fresh.text(),
            "nats_delivery_dead_letter_stored_total",
            WORKER
        ),
        None
    );
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
    Wait::secs("3 advisories in ADV (messages to die)", 60)
        .every(Duration::ZERO)
        .until_async(async || {
            let stored = stream_messages(&js, "ADV").await;
            if stored >= 3 {
                return Ok(());
            }
            pull_without_ack(&consumer, 5, {
                let mut once = false;
                move || std::mem::replace(&mut once, true)
            })
            .await;
            Err(stored)
        })
        .await;
    js.get_stream("WORK").await.unwrap().purge().await.unwrap();

    // Terminated by the client: 2 copies with reason "client".
    terminate_two(&js).await;

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
        exact(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            WORKER
        ),
        Some(3.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_dead_letter_stored_total", WORKER),
        None
    );
    assert_eq!(
        exact(&text, "nats_delivery_dead_letter_errors_total", APP),
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
        exact(
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
        exact(
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
        exact(
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
        exact(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            WORKER
        ),
        Some(3.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_dead_letter_stored_total", WORKER),
        Some(1.0)
    );
    // Each given-up copy failed at every delivery the listener handled:
    // at most 5 (the server's delivery count gives up), fewer when the
    // server redelivered before a slow handling of the last one ended
    // (2.9.10 on a loaded machine: 8).
    let errors = exact(&text, "nats_delivery_dead_letter_errors_total", APP).unwrap_or(0.0);
    assert!((2.0..=10.0).contains(&errors), "{errors} errors:\n{text}");
    // A message whose copy failed is counted when its copy is stored or
    // given up, not before: its redeliveries are not duplicates.
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(0.0)
    );
    assert_eq!(stream_messages(&js, "DLQ").await, 1);
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;
}

/// A copy stored by an exporter whose count of it was never saved (killed
/// between the copy's acknowledgement and its totals) is still counted by
/// the exporter that counts the advisory: the stream refuses the second
/// copy as a duplicate, and the one it holds is that message's. Here the
/// second exporter is a durable listener with a consumer and totals of its
/// own, which has counted nothing of what the first one copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_stored_before_its_count_was_saved_is_counted_once() {
    let s = server();
    let flags = ["--advisories-stream", "ADV", "--dead-letter-stream", "DLQ"];
    let first = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    publish_with_headers(&js, 0, 3).await;
    let stored = "nats_delivery_dead_letter_stored_total";
    pull_without_ack(&consumer, 60, || {
        exact(&first.text(), stored, WORKER) == Some(3.0)
    })
    .await;
    first.stop().await;

    let mut own = flags.to_vec();
    own.extend([
        "--advisories-consumer",
        "second",
        "--advisories-totals-bucket",
        "second",
    ]);
    let second = start_listener(&s, "APP", "app", advisory_args(&own)).await;
    let deaths = "nats_delivery_jetstream_max_deliveries_total";
    wait_value(&second.registry, deaths, WORKER, 3.0, 20).await;
    assert_eq!(exact(&second.text(), stored, WORKER), Some(3.0));
    assert_eq!(stream_messages(&js, "DLQ").await, 3);
    second.stop().await;
}
