//! A stream (or subject) full under discard new: every publish the server
//! refused is counted under its limit, and the publishes counted as stored
//! are what the stream holds, on every server version.

mod publish_support;

use async_nats::jetstream::stream::{Config, DiscardPolicy};
use nats_test_server::NatsServer;
use publish_support::*;

fn discard_new(name: &str, subject: &str) -> Config {
    Config {
        name: name.into(),
        subjects: vec![subject.into()],
        discard: DiscardPolicy::New,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_messages_refusals_are_counted() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let config = discard_new("MSGS", "msgs");
    create(
        &app,
        Config {
            max_messages: 5,
            ..config
        },
    )
    .await;
    // Replies to the stream's creation were not taken by the crate; the
    // publishes' acknowledgements and refusals are.
    let before = app.metrics.unforwarded_messages();
    // max_msgs 5: of 12 publishes the last 7 are refused.
    let acked = publish_n(&app, "msgs", 12, 10).await;
    assert_eq!(app.metrics.unforwarded_messages(), before, "{v}");
    let state = stream_state(app.jetstream.context(), "MSGS").await;
    assert_eq!(
        (acked, state.messages, state.last_sequence),
        (5, 5, 5),
        "{v}"
    );
    assert_eq!(app.stored(), 5, "{v}");
    app.assert_failures(&[("max_messages", 7)], &v);
    nats_test_server::reference::assert_documented(&app.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_refusals_are_counted() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let config = discard_new("BYTES", "bytes");
    create(
        &app,
        Config {
            max_bytes: 4000,
            ..config
        },
    )
    .await;
    // 100-byte payloads take 135 bytes each in the store: 29 fit.
    let acked = publish_n(&app, "bytes", 60, 100).await;
    let state = stream_state(app.jetstream.context(), "BYTES").await;
    assert_eq!(
        (acked, state.messages, state.last_sequence),
        (29, 29, 29),
        "{v}"
    );
    assert_eq!(state.bytes, 3915, "{v}");
    assert_eq!(app.stored(), 29, "{v}");
    app.assert_failures(&[("max_bytes", 31)], &v);
}

/// max_bytes 4,140: after 30 messages (4,020 bytes stored, 134 per
/// message) a 100-byte payload fits but its record does not. 2.10 and later
/// count the record and refuse; 2.9 counts the payload, stores the message
/// and then removes the stream's oldest to get back under max_bytes:
/// acknowledged, and a message lost without any refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_counts_the_record_from_2_10_and_the_payload_before() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let server_version = app.client.client().server_info().version;
    let config = discard_new("EDGE", "edge");
    create(
        &app,
        Config {
            max_bytes: 4140,
            ..config
        },
    )
    .await;
    let acked = publish_n(&app, "edge", 60, 100).await;
    let state = stream_state(app.jetstream.context(), "EDGE").await;
    assert_eq!(state.last_sequence, acked, "{v}");
    assert_eq!(state.bytes, 4020, "{v}");
    assert_eq!(app.stored(), acked, "{v}");
    app.assert_failures(&[("max_bytes", 60 - acked)], &v);
    let held = (acked, state.messages, state.first_sequence);
    if nats_test_server::version_numbers(&server_version) < vec![2, 10] {
        // The first 30 are gone, removed as under discard old.
        assert_eq!(held, (60, 30, 31), "{v}");
    } else {
        assert_eq!(held, (30, 30, 1), "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_messages_per_subject_refusals_are_counted() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let config = Config {
        max_messages_per_subject: 2,
        discard_new_per_subject: true,
        ..discard_new("PERSUBJECT", "per.>")
    };
    create(&app, config).await;
    // 4 publishes to each of 3 subjects: 2 of each refused.
    let mut acked = 0;
    for subject in ["per.a", "per.b", "per.c"] {
        acked += publish_n(&app, subject, 4, 10).await;
    }
    let state = stream_state(app.jetstream.context(), "PERSUBJECT").await;
    assert_eq!(
        (acked, state.messages, state.last_sequence),
        (6, 6, 6),
        "{v}"
    );
    assert_eq!(app.stored(), 6, "{v}");
    app.assert_failures(&[("max_messages_per_subject", 6)], &v);
}

/// The same limit without discard_new_per_subject refuses nothing: the
/// oldest message of the subject goes instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_messages_per_subject_without_the_flag_replaces_and_refuses_nothing() {
    let server = NatsServer::builder().jetstream().start();
    let v = version();
    let app = Publisher::connect(&server).await;
    let config = Config {
        max_messages_per_subject: 2,
        ..discard_new("REPLACING", "replacing.>")
    };
    create(&app, config).await;
    let mut acked = 0;
    for subject in ["replacing.a", "replacing.b", "replacing.c"] {
        acked += publish_n(&app, subject, 4, 10).await;
    }
    let state = stream_state(app.jetstream.context(), "REPLACING").await;
    assert_eq!(
        (acked, state.messages, state.last_sequence),
        (12, 6, 12),
        "{v}"
    );
    assert_eq!(app.stored(), 12, "{v}");
    app.assert_failures(&[], &v);
}
