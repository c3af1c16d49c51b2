//! Durable mode repairs what is deleted or lost under it: the advisory
//! stream, the consumer (while running or while stopped), and totals the
//! store did not take.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;

use crate::advisories_durable::announce_deaths;
use async_nats::jetstream;

const APP: &[(&str, &str)] = &[("account", "APP")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_stream_deleted_under_the_exporter_is_created_again() {
    let s = server();
    let flags = ["--advisories-stream", "ADV"];
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let js = jetstream::new(client(&s, "app").await);
    js.delete_stream("ADV").await.unwrap();
    // The listener notices, creates the stream and its consumer again.
    Wait::secs("ADV and its consumer made again", 30)
        .every(Duration::from_millis(100))
        .until_async(async || match js.get_stream("ADV").await {
            Ok(st) => st
                .get_consumer::<jetstream::consumer::pull::Config>("nats-delivery-exporter")
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        })
        .await;
    let app = client(&s, "app").await;
    announce_deaths(&app, 1..=5).await;
    let labels = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    wait_value(
        &running.registry,
        "nats_delivery_jetstream_max_deliveries_total",
        &labels,
        5.0,
        20,
    )
    .await;
    wait_value(
        &running.registry,
        "nats_delivery_advisory_listener_up",
        APP,
        1.0,
        5,
    )
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_consumer_is_noticed_and_made_again_after_what_was_counted() {
    let s = server();
    let flags = ["--advisories-stream", "ADV"];
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let js = jetstream::new(client(&s, "app").await);
    let app = client(&s, "app").await;
    let labels = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    announce_deaths(&app, 1..=5).await;
    wait_value(&running.registry, name, &labels, 5.0, 20).await;
    // A probe stores the ack floor past those five; then the consumer goes.
    wait_stored_ack_floor(&js, 5).await;
    let adv = js.get_stream("ADV").await.unwrap();
    adv.delete_consumer("nats-delivery-exporter").await.unwrap();
    // Five more arrive while it is gone: the stream keeps them.
    announce_deaths(&app, 6..=10).await;
    let kind = [("account", "APP"), ("kind", "consumer_missing")];
    wait_value(
        &running.registry,
        "nats_delivery_advisory_listener_errors_total",
        &kind,
        1.0,
        30,
    )
    .await;
    // Made again, it starts after the stored ack floor: the first five are
    // not handed out (and counted) again, the next five are counted.
    wait_value(&running.registry, name, &labels, 10.0, 30).await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = running.text();
    assert_eq!(exact(&text, name, &labels), Some(10.0));
    assert_eq!(
        exact(&text, "nats_delivery_advisories_received_total", APP),
        Some(10.0)
    );
    running.stop().await;
}

/// A consumer deleted while no listener runs is noticed when the next one
/// sets up: it finds the totals of an earlier consumer and no consumer, counts
/// `consumer_missing` and makes it again after what was counted. A first
/// start, with nothing stored, counts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_deleted_while_no_listener_runs_is_noticed_at_setup() {
    let s = server();
    let flags = ["--advisories-stream", "ADV"];
    let first = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let js = jetstream::new(client(&s, "app").await);
    let app = client(&s, "app").await;
    let labels = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    let errors = "nats_delivery_advisory_listener_errors_total";
    let missing = [("account", "APP"), ("kind", "consumer_missing")];
    announce_deaths(&app, 1..=5).await;
    wait_value(&first.registry, name, &labels, 5.0, 20).await;
    assert_eq!(
        exact(&first.text(), errors, &missing),
        None,
        "a first start"
    );
    // A probe stores the ack floor past those five; then the listener stops.
    wait_stored_ack_floor(&js, 5).await;
    first.stop().await;
    let adv = js.get_stream("ADV").await.unwrap();
    adv.delete_consumer("nats-delivery-exporter").await.unwrap();
    announce_deaths(&app, 6..=10).await;
    let second = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    assert_eq!(exact(&second.text(), errors, &missing), Some(1.0));
    // The stored five and the five new ones; none of the first five again.
    wait_value(&second.registry, name, &labels, 10.0, 30).await;
    let text = second.text();
    assert_eq!(
        exact(&text, "nats_delivery_advisories_received_total", APP),
        Some(10.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(0.0),
        "the first five were handed out again"
    );
    second.stop().await;
}

/// A write that reaches no stream (no responders: in a cluster, right after
/// the bucket is made, the server may not yet know where its stream lives) is
/// sent again until the stream answers, and fails clearly if it never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_written_while_no_stream_answers_are_sent_again() {
    use nats_delivery_exporter::{Totals, TotalsStore};
    use std::collections::HashMap;
    let s = server();
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    let one = |n: u64| {
        let t = Totals {
            ack_floor: n,
            ..Default::default()
        };
        HashMap::from([("account".to_string(), t)])
    };
    let (mut store, _watch) = TotalsStore::open(&js, "t", 1).await.unwrap();
    assert!(store.commit(one(1)).await.unwrap().is_empty());

    // The stream is gone for good: the commit fails, naming the cause.
    js.delete_stream("KV_t").await.unwrap();
    let err = store.commit(one(2)).await.unwrap_err();
    assert!(
        err.message.contains("no stream answered"),
        "{}",
        err.message
    );

    // The stream comes back while the write is being sent again: it is
    // stored. "Again" is read from the server: the messages it took from
    // this connection (`/connz` `in_msgs`) grow by two once the write was
    // sent, unheard, and sent once more.
    let (mut store, _watch) = TotalsStore::open(&js, "t", 1).await.unwrap();
    js.delete_stream("KV_t").await.unwrap();
    let connz = format!(
        "{}/connz?cid={}",
        s.monitor_url(),
        app.server_info().client_id
    );
    let sent = || {
        let body = tokio::task::block_in_place(|| nats_test_server::http_get(&connz));
        let reply: serde_json::Value = serde_json::from_str(&body).expect("connz JSON");
        reply["connections"][0]["in_msgs"]
            .as_u64()
            .expect("in_msgs")
    };
    let before = sent();
    let commit = tokio::spawn(async move {
        let result = store.commit(one(3)).await;
        (store, result)
    });
    Wait::secs("the write sent, unheard, and sent again", 20)
        .until(|| {
            let now = sent();
            (now >= before + 2).then_some(()).ok_or(now)
        })
        .await;
    TotalsStore::open(&js, "t", 1).await.unwrap();
    let (store, result) = commit.await.unwrap();
    assert!(result.unwrap().is_empty());
    let stored = store.entries.get("account").unwrap();
    assert_eq!((stored.revision, stored.totals.ack_floor), (1, 3));
}
