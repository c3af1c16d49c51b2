//! What an advisory is, against a real server: forged ones are not losses,
//! the series an account can grow are capped, and a stream created again
//! under the same name (its sequences start at 1 again) is a new stream.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use async_nats::jetstream;

const APP: &[(&str, &str)] = &[("account", "APP")];

fn nak(stream: &str, consumer: &str, seq: u64) -> String {
    format!(
        r#"{{"type":"io.nats.jetstream.advisory.v1.nak","stream":"{stream}","consumer":"{consumer}","stream_seq":{seq},"deliveries":1}}"#
    )
}

fn series_count(text: &str, name: &str) -> usize {
    nats_test_server::sample::samples(text, name, &[("account", "APP")]).len()
}

/// Publishes 3 malformed forgeries (names that disagree, a payload of
/// another kind, a name too long for any server) and 200 well-formed
/// advisories of invented consumers.
async fn publish_forgeries(app: &async_nats::Client) {
    // The subject names X/Y, the payload PAYMENTS/billing: not the server.
    app.publish(
        "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.X.Y",
        nak("PAYMENTS", "billing", 1).into(),
    )
    .await
    .unwrap();
    // A NAK payload on the max-deliveries subject.
    app.publish(
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.PAYMENTS.billing",
        nak("PAYMENTS", "billing", 2).into(),
    )
    .await
    .unwrap();
    // A name no server accepts (900 KB; a subject that long would not
    // even pass the server's control-line limit).
    let huge = "n".repeat(900_000);
    app.publish(
        "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.HUGE.c",
        nak(&huge, "c", 1).into(),
    )
    .await
    .unwrap();
    // 200 invented consumers, well-formed: past the cap of 50 they fold.
    for i in 0..200 {
        let c = format!("FAKE{i}");
        app.publish(
            format!("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.FAKE.{c}"),
            nak("FAKE", &c, 1).into(),
        )
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_advisories_are_not_losses_and_series_are_capped() {
    let s = server();
    let flags = [
        "--advisories-stream",
        "ADV",
        "--advisories-max-series",
        "50",
    ];
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let app = client(&s, "app").await;
    let naks = "nats_delivery_jetstream_naks_total";

    publish_forgeries(&app).await;
    app.flush().await.unwrap();
    wait_value(
        &running.registry,
        "nats_delivery_advisories_received_total",
        APP,
        203.0,
        20,
    )
    .await;
    let text = running.text();
    assert_eq!(
        exact(&text, "nats_delivery_advisories_malformed_total", APP),
        Some(3.0)
    );
    assert!(!text.contains("PAYMENTS"), "{text}");
    assert!(!text.contains("nnnnnnnnnn"));
    assert_eq!(series_count(&text, naks), 51, "{text}");
    let overflow = [
        ("account", "APP"),
        ("stream", "__overflow__"),
        ("consumer", "__overflow__"),
    ];
    assert_eq!(exact(&text, naks, &overflow), Some(150.0));
    assert_eq!(
        exact(&text, "nats_delivery_advisories_folded_total", APP),
        Some(150.0)
    );
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;

    // A new process: the cap holds across restarts (the 50 kept series are
    // stored), new names still fold.
    let again = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    app.publish(
        "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.FAKE.NEW",
        nak("FAKE", "NEW", 1).into(),
    )
    .await
    .unwrap();
    app.flush().await.unwrap();
    wait_value(&again.registry, naks, &overflow, 151.0, 20).await;
    assert_eq!(series_count(&again.text(), naks), 51);
    again.stop().await;
}

/// Application users who may not publish on `$JS.EVENT.>` cannot forge
/// advisories; the server's own still arrive.
const LOCKED_DOWN: &str = r#"
accounts {
  APP { jetstream: enabled, users: [
    { user: app, password: app-secret, permissions: { publish: { deny: ["$JS.EVENT.>"] } } },
    { user: exporter, password: exporter-secret }
  ] }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_event_subjects_denied_to_applications_a_forgery_never_reaches_the_count() {
    let s = nats_test_server::NatsServer::builder()
        .jetstream()
        .config(LOCKED_DOWN)
        .start();
    let flags = ["--advisories-stream", "ADV"];
    let running = start_listener(&s, "APP", "exporter", advisory_args(&flags)).await;
    let app = client(&s, "app").await;
    for seq in 1..=10 {
        let _ = app
            .publish(
                "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.WORK.worker",
                format!(r#"{{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"WORK","consumer":"worker","stream_seq":{seq},"deliveries":2}}"#).into(),
            )
            .await;
    }
    let _ = app.flush().await;
    // Real deaths, made by the same application user.
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    publish(&js, "work", 4).await;
    let worker = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    pull_without_ack(&consumer, 60, || {
        exact(&running.text(), name, &worker) == Some(4.0)
    })
    .await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = running.text();
    assert_eq!(exact(&text, name, &worker), Some(4.0));
    assert_eq!(
        exact(&text, "nats_delivery_advisories_received_total", APP),
        Some(4.0)
    );
    running.stop().await;
}

/// Makes `n` messages die on WORK/worker, which is created if missing.
async fn deaths(js: &jetstream::Context, first: usize, n: usize) {
    let st = stream(js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    let before = advisories_in_stream(js).await;
    let_die(js, &consumer, first, n, before + n as u64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_created_again_is_a_new_stream_for_counts_and_copies() {
    let s = server();
    let flags = ["--advisories-stream", "ADV", "--dead-letter-stream", "DLQ"];
    let js = jetstream::new(client(&s, "app").await);
    let worker = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    let stored = "nats_delivery_dead_letter_stored_total";
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;

    // Sequences 1-5 die, the stream is deleted and created again, and its
    // new sequences 1-5 die too: ten messages.
    deaths(&js, 0, 5).await;
    wait_value(&running.registry, name, &worker, 5.0, 20).await;
    js.delete_stream("WORK").await.unwrap();
    deaths(&js, 100, 5).await;
    wait_value(&running.registry, name, &worker, 10.0, 20).await;
    wait_value(&running.registry, stored, &worker, 10.0, 20).await;
    running.stop().await;

    // Once more while the exporter is away.
    js.delete_stream("WORK").await.unwrap();
    deaths(&js, 200, 5).await;
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    wait_value(&running.registry, name, &worker, 15.0, 20).await;
    wait_value(&running.registry, stored, &worker, 15.0, 20).await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = running.text();
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(0.0)
    );
    let mut dlq = js.get_stream("DLQ").await.unwrap();
    assert_eq!(dlq.info().await.unwrap().state.messages, 15);
    running.stop().await;
}
