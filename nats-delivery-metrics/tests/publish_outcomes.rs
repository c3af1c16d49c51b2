//! JetStream publishes the server refused, counted by reason, against a real
//! server: for every reason the counter equals what the server refused, and
//! the acknowledged count equals what the stream holds.

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{Config, DiscardPolicy, State};
use async_nats::jetstream::Context;
use bytes::Bytes;
use nats_delivery_metrics::{ClientMetrics, InstrumentedClient, InstrumentedJetStream};
use nats_test_server::app::{exposition, sample};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

/// One instrumented connection with its registry.
struct Publisher {
    registry: Registry,
    metrics: ClientMetrics,
    client: InstrumentedClient,
    jetstream: InstrumentedJetStream,
}

impl Publisher {
    async fn connect(server: &NatsServer) -> Self {
        let mut registry = Registry::default();
        let metrics = ClientMetrics::new("app", &mut registry);
        let client = metrics
            .connect(async_nats::ConnectOptions::new(), server.client_url())
            .await
            .unwrap();
        let jetstream = client.jetstream();
        Publisher {
            registry,
            metrics,
            client,
            jetstream,
        }
    }

    fn text(&self) -> String {
        exposition(&self.registry)
    }

    fn failures(&self, reason: &str) -> u64 {
        let labels = [("client", "app"), ("reason", reason)];
        let name = "nats_delivery_client_jetstream_publish_failures_total";
        sample(&self.text(), name, &labels).expect(reason) as u64
    }

    fn counter(&self, name: &str) -> u64 {
        sample(&self.text(), name, &[("client", "app")]).expect(name) as u64
    }

    fn stored(&self) -> u64 {
        self.counter("nats_delivery_client_jetstream_published_messages_total")
    }

    /// Every reason but those in `expected` is 0, and those are as given.
    fn assert_failures(&self, expected: &[(&str, u64)], context: &str) {
        let reasons = [
            "max_messages",
            "max_bytes",
            "max_messages_per_subject",
            "wrong_last_sequence",
            "wrong_last_msg_id",
            "no_responders",
            "timed_out",
            "abandoned",
            "other",
        ];
        for reason in reasons {
            let want = expected
                .iter()
                .find(|(r, _)| *r == reason)
                .map_or(0, |(_, n)| *n);
            assert_eq!(self.failures(reason), want, "{context}: {reason}");
        }
    }

    /// Publishes `message` to `subject` and waits for the answer; true when
    /// the server acknowledged it.
    async fn publish(&self, subject: &str, message: PublishMessage) -> bool {
        let pending = self.jetstream.send_publish(subject.to_string(), message);
        match pending.await {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        }
    }
}

fn body(len: usize) -> PublishMessage {
    PublishMessage::build().payload(Bytes::from(vec![b'x'; len]))
}

async fn stream_state(js: &Context, stream: &str) -> State {
    let mut stream = js.get_stream(stream).await.unwrap();
    stream.info().await.unwrap().state.clone()
}

fn version() -> String {
    nats_test_server::version_under_test()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_under_discard_new_refusals_are_counted_by_limit() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();

    // max_msgs 5: of 12 publishes the last 7 are refused.
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    js.create_stream(Config {
        name: "MSGS".into(),
        subjects: vec!["msgs".into()],
        max_messages: 5,
        discard: DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .unwrap();
    // Replies to the stream's creation were not taken by the crate; the
    // publishes' acknowledgements and refusals are.
    let before = app.metrics.unforwarded_messages();
    let mut acked = 0;
    for _ in 0..12 {
        acked += u64::from(app.publish("msgs", body(10)).await);
    }
    assert_eq!(app.metrics.unforwarded_messages(), before, "{v}");
    let state = stream_state(js, "MSGS").await;
    assert_eq!(
        (acked, state.messages, state.last_sequence),
        (5, 5, 5),
        "{v}"
    );
    assert_eq!(app.stored(), 5, "{v}");
    app.assert_failures(&[("max_messages", 7)], &format!("{v} max_msgs"));
    nats_test_server::reference::assert_documented(&app.text());

    // max_bytes 4,000 with 100-byte payloads: the server decides how many
    // fit (its per-message overhead differs between stores and versions);
    // every publish it did not store is counted as max_bytes.
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    js.create_stream(Config {
        name: "BYTES".into(),
        subjects: vec!["bytes".into()],
        max_bytes: 4000,
        discard: DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut acked = 0;
    for _ in 0..60 {
        acked += u64::from(app.publish("bytes", body(100)).await);
    }
    let state = stream_state(js, "BYTES").await;
    eprintln!(
        "{v}: max_bytes 4000: {acked} of 60 stored, {} bytes",
        state.bytes
    );
    assert_eq!(state.messages, acked, "{v}");
    assert_eq!(state.last_sequence, acked, "{v}");
    assert!(state.bytes <= 4000, "{v}: {} bytes", state.bytes);
    assert!(acked < 60, "{v}: the stream refused nothing");
    assert_eq!(app.stored(), acked, "{v}");
    app.assert_failures(&[("max_bytes", 60 - acked)], &format!("{v} max_bytes"));

    // max_bytes 4,140: after 30 messages (4,020 bytes stored, 134 per
    // message) a 100-byte payload fits but its record does not. 2.10 and
    // later count the record and refuse; 2.9 counts the payload, stores the
    // message and then removes the stream's oldest to get back under
    // max_bytes: acknowledged, and a message lost without any refusal.
    let app = Publisher::connect(&server).await;
    let server_version = app.client.client().server_info().version;
    let js = app.jetstream.context();
    js.create_stream(Config {
        name: "BYTES_EDGE".into(),
        subjects: vec!["edge".into()],
        max_bytes: 4140,
        discard: DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut acked = 0;
    for _ in 0..60 {
        acked += u64::from(app.publish("edge", body(100)).await);
    }
    let state = stream_state(js, "BYTES_EDGE").await;
    eprintln!(
        "{v}: max_bytes 4140: {acked} of 60 acknowledged, {} held, {} bytes",
        state.messages, state.bytes
    );
    assert_eq!(state.last_sequence, acked, "{v}");
    assert_eq!(app.stored(), acked, "{v}");
    app.assert_failures(&[("max_bytes", 60 - acked)], &format!("{v} edge"));
    if nats_test_server::version_numbers(&server_version) < vec![2, 10] {
        // The first 30 are gone, removed as under discard old.
        assert_eq!(
            (acked, state.messages, state.first_sequence),
            (60, 30, 31),
            "{v}"
        );
    } else {
        assert_eq!((acked, state.messages), (30, 30), "{v}");
    }

    // max_msgs_per_subject 2 with discard_new_per_subject: 4 publishes to
    // each of 3 subjects, 2 of each refused.
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    js.create_stream(Config {
        name: "PERSUBJECT".into(),
        subjects: vec!["per.>".into()],
        max_messages_per_subject: 2,
        discard: DiscardPolicy::New,
        discard_new_per_subject: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut acked = 0;
    for subject in ["per.a", "per.b", "per.c"] {
        for _ in 0..4 {
            acked += u64::from(app.publish(subject, body(10)).await);
        }
    }
    let state = stream_state(js, "PERSUBJECT").await;
    assert_eq!(
        (acked, state.messages, state.last_sequence),
        (6, 6, 6),
        "{v}"
    );
    assert_eq!(app.stored(), 6, "{v}");
    let context = format!("{v} max_msgs_per_subject");
    app.assert_failures(&[("max_messages_per_subject", 6)], &context);

    // The same limit without discard_new_per_subject refuses nothing: the
    // oldest message of the subject goes instead.
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    js.create_stream(Config {
        name: "REPLACING".into(),
        subjects: vec!["replacing.>".into()],
        max_messages_per_subject: 2,
        discard: DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .unwrap();
    for subject in ["replacing.a", "replacing.b", "replacing.c"] {
        for _ in 0..4 {
            assert!(app.publish(subject, body(10)).await, "{v}");
        }
    }
    let state = stream_state(js, "REPLACING").await;
    assert_eq!((state.messages, state.last_sequence), (6, 12), "{v}");
    assert_eq!(app.stored(), 12, "{v}");
    app.assert_failures(&[], &format!("{v} replacing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expectations_that_do_not_hold_are_counted_and_duplicates_apart() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    js.create_stream(Config {
        name: "SEQ".into(),
        subjects: vec!["seq.>".into()],
        max_message_size: 256,
        ..Default::default()
    })
    .await
    .unwrap();
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
    for _ in 0..3 {
        assert!(!app.publish("nowhere", body(10)).await, "{v}");
    }
    // A core subscriber on another connection listens and never answers.
    let other = async_nats::connect(server.client_url()).await.unwrap();
    let _silent = other.subscribe("silent").await.unwrap();
    other.flush().await.unwrap();
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
    other.flush().await.unwrap();
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_whose_answer_is_not_awaited_is_counted_as_abandoned() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let js = app.jetstream.context();
    js.create_stream(Config {
        name: "DROPPED".into(),
        subjects: vec!["dropped".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let before = app.metrics.unforwarded_messages().unwrap();
    let pending = app.jetstream.publish("dropped", "x".into()).await.unwrap();
    drop(pending);
    assert!(app.publish("dropped", body(10)).await, "{v}");
    // The abandoned answer arrived and nothing took it: the connection
    // audit shows it (the awaited one is taken).
    let unforwarded = || app.metrics.unforwarded_messages().unwrap();
    let what = "the abandoned answer in the audit";
    nats_test_server::app::wait_for(what, || unforwarded() == before + 1).await;
    // The server stored both; only the awaited one counts as stored.
    let state = stream_state(js, "DROPPED").await;
    assert_eq!(state.messages, 2, "{v}");
    assert_eq!(app.stored(), 1, "{v}");
    app.assert_failures(&[("abandoned", 1)], &v);
}
