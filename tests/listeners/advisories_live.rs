//! Live advisory listener against a real server: exact counts.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;

const APP: &[(&str, &str)] = &[("account", "APP")];

fn consumer_labels<'a>(stream: &'a str, consumer: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("account", "APP"),
        ("stream", stream),
        ("consumer", consumer),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_dead_messages_count_forty_not_one_hundred_sixty() {
    let s = server();
    let running = start_listener(&s, "APP", "app", advisory_args(&[])).await;
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 4, Duration::from_millis(300)).await;
    publish(&js, "work", 40).await;

    let name = "nats_delivery_jetstream_max_deliveries_total";
    let labels = consumer_labels("WORK", "worker");
    let deliveries = pull_without_ack(&consumer, 60, || {
        exact(&running.text(), name, &labels) == Some(40.0)
    })
    .await;
    // Keep pulling a little: nothing is left to deliver or count.
    let more = pull_without_ack(&consumer, 5, {
        let start = std::time::Instant::now();
        move || start.elapsed() > Duration::from_millis(1500)
    })
    .await;
    assert_eq!(
        deliveries + more,
        160,
        "each message delivered max_deliver times"
    );

    wait_value(&running.registry, name, &labels, 40.0, 10).await;
    // A marker after them, received: every advisory before it was counted.
    mark_handled(&running, &app, MAX_DELIVERIES_SUBJECT, "APP", 41.0).await;
    let text = running.text();
    assert_eq!(exact(&text, name, &labels), Some(40.0), "{text}");
    assert_eq!(
        exact(&text, "nats_delivery_advisories_unknown_total", APP),
        Some(1.0),
        "the marker"
    );
    for m in [
        "nats_delivery_advisories_malformed_total",
        "nats_delivery_advisories_duplicate_total",
        "nats_delivery_exporter_dropped_messages_total",
    ] {
        assert_eq!(exact(&text, m, APP), Some(0.0), "{m}");
    }
    assert_eq!(
        exact(&text, "nats_delivery_advisory_listener_up", APP),
        Some(1.0)
    );
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naks_and_client_terms_are_exact() {
    let s = server();
    let running = start_listener(&s, "APP", "app", advisory_args(&[])).await;
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "JOBS", "jobs", -1).await;
    let consumer = pull_consumer(&st, "jobber", -1, Duration::from_secs(30)).await;
    publish(&js, "jobs", 20).await;

    // First round: NAK 10, TERM 7, ACK 3.
    let mut batch = consumer
        .fetch()
        .max_messages(20)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    let mut i = 0;
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        let kind = match i {
            0..=9 => AckKind::Nak(None),
            10..=16 => AckKind::Term,
            _ => AckKind::Ack,
        };
        m.double_ack_with(kind).await.unwrap();
        i += 1;
    }
    assert_eq!(i, 20);
    // Second round: the 10 NAKed come back and are acknowledged.
    let mut redelivered = 0;
    Wait::secs("the 10 NAKed messages again", 30)
        .every(Duration::ZERO)
        .until_async(async || {
            let mut batch = consumer
                .fetch()
                .max_messages(20)
                .expires(Duration::from_secs(1))
                .messages()
                .await
                .unwrap();
            while let Some(m) = batch.next().await {
                m.unwrap().double_ack().await.unwrap();
                redelivered += 1;
            }
            (redelivered >= 10).then_some(()).ok_or(redelivered)
        })
        .await;
    assert_eq!(redelivered, 10);

    let labels = consumer_labels("JOBS", "jobber");
    wait_value(
        &running.registry,
        "nats_delivery_jetstream_naks_total",
        &labels,
        10.0,
        10,
    )
    .await;
    let mut term = labels.clone();
    term.push(("reason", "client"));
    wait_value(
        &running.registry,
        "nats_delivery_jetstream_terminated_total",
        &term,
        7.0,
        10,
    )
    .await;
    let text = running.text();
    assert_eq!(
        exact(&text, "nats_delivery_advisories_received_total", APP),
        Some(17.0)
    );
    assert_eq!(
        exact(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            &labels
        ),
        None
    );
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_limits_removing_unacked_messages_are_terminations() {
    let s = server();
    let running = start_listener(&s, "APP", "app", advisory_args(&[])).await;
    let js = jetstream::new(client(&s, "app").await);
    // Keeps 5 messages; the consumer holds 5 delivered but unacknowledged.
    let st = stream(&js, "SMALL", "small", 5).await;
    let consumer = pull_consumer(&st, "slowpoke", -1, Duration::from_secs(30)).await;
    publish(&js, "small", 10).await; // seqs 1-5 are gone before anyone saw them
    let mut got = 0;
    Wait::secs("5 messages", 30)
        .every(Duration::ZERO)
        .until_async(async || {
            let mut batch = consumer
                .fetch()
                .max_messages(5)
                .expires(Duration::from_secs(1))
                .messages()
                .await
                .unwrap();
            while let Some(m) = batch.next().await {
                m.unwrap();
                got += 1;
            }
            (got >= 5).then_some(()).ok_or(got)
        })
        .await;
    assert_eq!(got, 5);
    // 10 more: seqs 6-10 (delivered, unacked) are removed by the limit.
    publish(&js, "small", 10).await;

    let labels = consumer_labels("SMALL", "slowpoke");
    let total = |text: &str| {
        ["client", "stream_limits", "unacked_deleted", "other"]
            .iter()
            .map(|r| {
                let mut l = labels.clone();
                l.push(("reason", r));
                exact(text, "nats_delivery_jetstream_terminated_total", &l).unwrap_or(0.0)
            })
            .sum::<f64>()
    };
    Wait::secs("5 terminated advisories", 15)
        .until(|| {
            let text = running.text();
            (total(&text) >= 5.0).then_some(()).ok_or(Text(text))
        })
        .await;
    let app = client(&s, "app").await;
    mark_handled(&running, &app, TERMINATED_SUBJECT, "APP", 6.0).await;
    let text = running.text();
    assert_eq!(total(&text), 5.0, "{text}");
    // Servers before 2.10.4 send no reason text: there it reads as "client".
    let version = nats_test_server::version_numbers(&app.server_info().version);
    let reason = if version < vec![2, 10, 4] {
        "client"
    } else {
        "unacked_deleted"
    };
    let mut unacked = labels.clone();
    unacked.push(("reason", reason));
    assert_eq!(
        exact(&text, "nats_delivery_jetstream_terminated_total", &unacked),
        Some(5.0),
        "{text}"
    );
    nats_test_server::reference::assert_documented(&text);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_is_counted_and_the_listener_keeps_counting() {
    let s = server();
    let running = start_listener(&s, "APP", "app", advisory_args(&[])).await;
    let app = client(&s, "app").await;
    let subject = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C";
    let valid = r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"a1","timestamp":"2026-11-29T00:00:00Z","stream":"S","consumer":"C","stream_seq":9,"deliveries":5}"#;
    for payload in [
        "not json at all",
        "[1,2,3]",
        r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S"}"#,
        r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"C","stream_seq":"nine"}"#,
        r#"{"type":"io.nats.jetstream.advisory.v2.something_new","stream":"S"}"#,
        valid,
        valid, // a re-sent advisory: counted once
    ] {
        app.publish(subject, payload.into()).await.unwrap();
    }
    app.flush().await.unwrap();
    wait_value(
        &running.registry,
        "nats_delivery_advisories_received_total",
        APP,
        7.0,
        10,
    )
    .await;
    let text = running.text();
    assert_eq!(
        exact(&text, "nats_delivery_advisories_malformed_total", APP),
        Some(4.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_advisories_unknown_total", APP),
        Some(1.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(1.0)
    );
    let sc = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    assert_eq!(
        exact(&text, "nats_delivery_jetstream_max_deliveries_total", &sc),
        Some(1.0)
    );

    // Still working: a real dead message is counted.
    let js = jetstream::new(app);
    let st = stream(&js, "AFTER", "after", -1).await;
    let consumer = pull_consumer(&st, "c", 1, Duration::from_millis(300)).await;
    publish(&js, "after", 1).await;
    let labels = [("account", "APP"), ("stream", "AFTER"), ("consumer", "c")];
    pull_without_ack(&consumer, 30, || {
        exact(
            &running.text(),
            "nats_delivery_jetstream_max_deliveries_total",
            &labels,
        ) == Some(1.0)
    })
    .await;
    wait_value(
        &running.registry,
        "nats_delivery_jetstream_max_deliveries_total",
        &labels,
        1.0,
        5,
    )
    .await;
    nats_test_server::reference::assert_documented(&running.text());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_account_sees_only_its_own_advisories() {
    let s = server();
    let app_listener = start_listener(&s, "APP", "app", advisory_args(&[])).await;
    let other_listener = start_listener(&s, "OTHER", "other", advisory_args(&[])).await;
    for (user, n) in [("app", 3usize), ("other", 5usize)] {
        let js = jetstream::new(client(&s, user).await);
        let st = stream(&js, "Q", "q", -1).await;
        let c = pull_consumer(&st, "c", 1, Duration::from_millis(300)).await;
        publish(&js, "q", n).await;
        let mut seen = 0;
        Wait::secs(format!("{user}'s {n} messages"), 30)
            .every(Duration::ZERO)
            .until_async(async || {
                let mut b = c
                    .fetch()
                    .max_messages(10)
                    .expires(Duration::from_millis(500))
                    .messages()
                    .await
                    .unwrap();
                while let Some(m) = b.next().await {
                    m.unwrap();
                    seen += 1;
                }
                (seen >= n).then_some(()).ok_or(seen)
            })
            .await;
        // Pulls past ack_wait let the server notice max_deliver, until the
        // listener has counted every message.
        let listener = if user == "app" {
            (&app_listener, "APP")
        } else {
            (&other_listener, "OTHER")
        };
        let labels = [("account", listener.1), ("stream", "Q"), ("consumer", "c")];
        let name = "nats_delivery_jetstream_max_deliveries_total";
        pull_without_ack(&c, 30, || {
            exact(&listener.0.text(), name, &labels) == Some(n as f64)
        })
        .await;
    }
    let name = "nats_delivery_jetstream_max_deliveries_total";
    wait_value(
        &app_listener.registry,
        name,
        &[("account", "APP"), ("stream", "Q"), ("consumer", "c")],
        3.0,
        10,
    )
    .await;
    wait_value(
        &other_listener.registry,
        name,
        &[("account", "OTHER"), ("stream", "Q"), ("consumer", "c")],
        5.0,
        10,
    )
    .await;
    assert_eq!(
        exact(
            &app_listener.text(),
            "nats_delivery_advisories_received_total",
            APP
        ),
        Some(3.0)
    );
    app_listener.stop().await;
    other_listener.stop().await;
}
