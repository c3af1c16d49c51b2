//! JetStream publishes the server refused, counted by reason, against a real
//! server: for every reason the counter equals what the server refused, and
//! the acknowledged count equals what the stream holds.

mod publish_support;

use async_nats::jetstream::stream::Config;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use publish_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expectations_that_do_not_hold_are_counted_and_duplicates_apart() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    create(
        &app,
        Config {
            name: "SEQ".into(),
            subjects: vec!["seq.>".into()],
            max_message_size: 256,
            ..Default::default()
        },
    )
    .await;
    let before = app.metrics.unforwarded_messages();
    assert!(app.publish("seq.a", body(10)).await, "{v}");
    let mut last = 1;
    // Expected last sequence: right on even rounds, wrong on odd ones.
    for round in 0..10 {
        let expected = if round % 2 == 0 { last } else { last + 100 };
        let message = body(10).expected_last_sequence(expected);
        if app.publish("seq.a", message).await {
            last += 1;
        }
    }
    assert_eq!(last, 6, "{v}");
    // Expected last subject sequence: 3 wrong, then 1 right.
    for _ in 0..3 {
        let message = body(10).expected_last_subject_sequence(last + 7);
        assert!(!app.publish("seq.a", message).await, "{v}");
    }
    let message = body(10).expected_last_subject_sequence(last);
    assert!(app.publish("seq.a", message).await, "{v}");
    // Expected last message id: "m1" is the last one; 2 wrong, then 1 right.
    assert!(app.publish("seq.b", body(10).message_id("m1")).await);
    for _ in 0..2 {
        let message = body(10).expected_last_message_id("nope");
        assert!(!app.publish("seq.b", message).await, "{v}");
    }
    let message = body(10).expected_last_message_id("m1").message_id("m2");
    assert!(app.publish("seq.b", message).await, "{v}");
    // A duplicate is acknowledged and not stored.
    assert!(app.publish("seq.b", body(10).message_id("m2")).await, "{v}");
    // Other refusals: the wrong stream expected (10060), a message over the
    // stream's max_message_size (10054).
    assert!(
        !app.publish("seq.c", body(10).expected_stream("OTHER"))
            .await
    );
    assert!(!app.publish("seq.c", body(300)).await, "{v}");
    assert_eq!(app.metrics.unforwarded_messages(), before, "{v}");

    // 1 + 5 + 1 + 1 + 1 stored; 1 duplicate.
    let state = stream_state(js, "SEQ").await;
    assert_eq!((state.messages, state.last_sequence), (9, 9), "{v}");
    assert_eq!(app.stored(), 9, "{v}");
    let duplicates = "nats_delivery_client_jetstream_publish_duplicates_total";
    assert_eq!(app.counter(duplicates), 1, "{v}");
    let expected = [
        ("wrong_last_sequence", 5 + 3),
        ("wrong_last_msg_id", 2),
        ("other", 2),
    ];
    app.assert_failures(&expected, &v);
    nats_test_server::reference::assert_documented(&app.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_publishes_and_requests_are_counted() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let before = app.metrics.unforwarded_messages();
    // No stream stores the subject: the server answers no responders.
    assert_eq!(publish_n(&app, "nowhere", 3, 10).await, 0, "{v}");
    // A core subscriber on another connection listens and never answers.
    let other = async_nats::connect(server.client_url()).await.unwrap();
    let _silent = other.subscribe("silent").await.unwrap();
    // `flush` only empties the write buffer; a round trip makes sure the
    // server has the subscription before anyone publishes.
    nats_test_server::app::sync_with_server(&other).await;
    let context = async_nats::jetstream::ContextBuilder::new()
        .timeout(std::time::Duration::from_millis(300))
        .build(app.client.client().clone());
    let patient = app.metrics.jetstream_publisher(context).unwrap();
    for _ in 0..2 {
        let pending = patient.send_publish("silent", body(10)).await.unwrap();
        assert!(pending.await.is_err(), "{v}");
    }
    assert_eq!(app.metrics.unforwarded_messages(), before, "{v}");
    // Core requests nobody answers, and one that is answered.
    for _ in 0..4 {
        assert!(app.client.request("nobody", "?".into()).await.is_err());
    }
    let mut answering = other.subscribe("answered").await.unwrap();
    nats_test_server::app::sync_with_server(&other).await;
    let responder = tokio::spawn(async move {
        use futures::StreamExt;
        let request = answering.next().await.unwrap();
        other
            .publish(request.reply.unwrap(), "!".into())
            .await
            .unwrap();
        other.flush().await.unwrap();
    });
    app.client.request("answered", "?".into()).await.unwrap();
    responder.await.unwrap();
    assert_eq!(app.metrics.unforwarded_messages(), before, "{v}");

    let requests = "nats_delivery_client_request_no_responders_total";
    assert_eq!(app.counter(requests), 4, "{v}");
    assert_eq!(app.stored(), 0, "{v}");
    let expected = [("no_responders", 3), ("timed_out", 2)];
    app.assert_failures(&expected, &v);
    nats_test_server::reference::assert_documented(&app.text());
    nats_test_server::app::assert_promtool_clean(&app.registry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_whose_answer_is_not_awaited_is_counted_as_abandoned() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    create(
        &app,
        Config {
            name: "DROPPED".into(),
            subjects: vec!["dropped".into()],
            ..Default::default()
        },
    )
    .await;
    let before = app.metrics.unforwarded_messages().unwrap();
    let pending = app.jetstream.publish("dropped", "x".into()).await.unwrap();
    drop(pending);
    assert!(app.publish("dropped", body(10)).await, "{v}");
    // The abandoned answer arrived and nothing took it: the connection
    // audit shows it (the awaited one is taken).
    let unforwarded = || app.metrics.unforwarded_messages().unwrap();
    let what = "the abandoned answer in the audit";
    Wait::secs(what, 20)
        .every(std::time::Duration::from_millis(10))
        .until(|| unforwarded() == before + 1)
        .await;
    // The server stored both; only the awaited one counts as stored.
    let state = stream_state(js, "DROPPED").await;
    assert_eq!(state.messages, 2, "{v}");
    assert_eq!(app.stored(), 1, "{v}");
    app.assert_failures(&[("abandoned", 1)], &v);
}
