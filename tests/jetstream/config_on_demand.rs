//! The streams' and consumers' configuration read on demand
//! (`--jsz-config-interval`), against real servers: a new consumer has its
//! configuration once the read beside the scrapes ends, a changed limit is
//! seen after the first poll past the interval, a server restarted empty is
//! read afresh, and a filter added between reads is never counted as
//! removed messages.
use crate::common;
use crate::removed_before_delivery_support::{exporter, Acks, Lab, Reader, COUNTER};

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::value;
use nats_test_server::wait::{Text, Wait};
use nats_test_server::NatsServer;

const ACK_WAIT: Duration = Duration::from_secs(60);

/// Whether the scrape's `/jsz` poll of `server` asked for configuration.
fn config_read(text: &str, server: &str) -> Option<f64> {
    value(text, "nats_delivery_jsz_config_read", &[("server", server)])
}

/// The bytes of the scrape's `/jsz` replies from `server`.
fn jsz_bytes(text: &str, server: &str) -> f64 {
    let labels = [("server", server), ("source", "jsz")];
    value(text, "nats_delivery_scrape_reply_bytes", &labels).expect("reply bytes")
}

/// `name`'s value for consumer `consumer` of stream `stream` in `account`.
fn of_consumer(text: &str, name: &str, account: &str, stream: &str, consumer: &str) -> Option<f64> {
    let labels = [
        ("account", account),
        ("stream", stream),
        ("consumer", consumer),
    ];
    value(text, name, &labels)
}

/// A durable pull consumer `name` with `max_ack_pending`.
fn with_max_ack_pending(name: &str, max_ack_pending: i64) -> pull::Config {
    pull::Config {
        durable_name: Some(name.into()),
        max_ack_pending,
        ..Default::default()
    }
}

/// Asks for the configuration on the first poll, not on the next, and
/// beside the scrapes for an account with a consumer not seen before (over HTTP; polling
/// through the system account below).
#[tokio::test]
async fn a_new_consumer_has_its_configuration_on_its_first_poll() {
    let server = NatsServer::builder().jetstream().start();
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    new_consumer_read_at_once(&server, js, exporter(&server), "$G").await;
}

/// The same through the system account: the account is read again by its
/// name (`account` in the request's options).
#[tokio::test]
async fn a_new_consumer_has_its_configuration_on_its_first_poll_through_the_system_account() {
    let (server, app) = common::system_polling::server_and_app().await;
    let exporter = common::system_polling::system_exporter(&server.client_url(), "jsz").await;
    new_consumer_read_at_once(&server, jetstream::new(app), exporter, "APP").await;
}

/// Consumer `first` (max_ack_pending 5) read, then kept; consumer `late`
/// (7) made between two polls and read beside the scrapes, in `account`.
async fn new_consumer_read_at_once(
    server: &NatsServer,
    js: jetstream::Context,
    exporter: Exporter,
    account: &str,
) {
    let stream = stream::Config {
        name: "N".into(),
        subjects: vec!["n".into()],
        ..Default::default()
    };
    let st = js.create_stream(stream).await.unwrap();
    st.create_consumer(with_max_ack_pending("first", 5))
        .await
        .unwrap();
    let name = server.name.as_str();
    let max_ack_pending = |text: &str, consumer: &str| {
        of_consumer(
            text,
            "nats_delivery_consumer_max_ack_pending",
            account,
            "N",
            consumer,
        )
    };
    let first = common::scrape(&exporter).await;
    assert_eq!(config_read(&first, name), Some(1.0));
    let kept = common::scrape(&exporter).await;
    assert_eq!(config_read(&kept, name), Some(0.0));
    assert_eq!(max_ack_pending(&kept, "first"), Some(5.0));
    // Without the configuration the reply is smaller.
    assert!(jsz_bytes(&kept, name) < jsz_bytes(&first, name));
    assert!(jsz_bytes(&kept, name) > 0.0);
    st.create_consumer(with_max_ack_pending("late", 7))
        .await
        .unwrap();
    // Read beside the scrapes: until it is taken in, `late` has none.
    let text = Wait::secs("late's configuration", 60)
        .until_async(async || {
            let text = common::scrape(&exporter).await;
            assert_eq!(max_ack_pending(&text, "first"), Some(5.0));
            if max_ack_pending(&text, "late") == Some(7.0) {
                return Ok(text);
            }
            assert_eq!(max_ack_pending(&text, "late"), None, "{text}");
            assert_eq!(config_read(&text, name), Some(0.0));
            Err(Text(text))
        })
        .await;
    assert_eq!(config_read(&text, name), Some(1.0));
    let text = common::scrape(&exporter).await;
    assert_eq!(config_read(&text, name), Some(0.0));
    assert_eq!(max_ack_pending(&text, "late"), Some(7.0));
}

/// A limit changed in place (the stream's `created` stays) is kept while
/// `--jsz-config-interval` has not passed since the last read, and seen at
/// the first poll past it.
#[tokio::test]
async fn a_changed_limit_is_seen_within_the_interval() {
    let server = NatsServer::builder().jetstream().start();
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    let mut config = stream::Config {
        name: "L".into(),
        subjects: vec!["l".into()],
        max_messages: 100,
        ..Default::default()
    };
    js.create_stream(config.clone()).await.unwrap();
    let with_interval = |interval: &str| {
        let flags = ["--sources", "varz,jsz", "--jsz-config-interval", interval];
        common::exporter(&[server.monitor_url()], &flags)
    };
    // An interval no run of this test outlasts, and one it does.
    let (long, short) = (with_interval("1h"), with_interval("2s"));
    let name = server.name.as_str();
    let max = |text: &str| {
        let labels = [("account", "$G"), ("stream", "L")];
        value(text, "nats_delivery_stream_max_messages", &labels)
    };
    let text = common::scrape(&long).await;
    assert_eq!(
        (max(&text), config_read(&text, name)),
        (Some(100.0), Some(1.0))
    );
    // `short` reads the configuration between these two instants.
    let asked = Instant::now();
    let text = common::scrape(&short).await;
    let read_by = Instant::now();
    assert_eq!(
        (max(&text), config_read(&text, name)),
        (Some(100.0), Some(1.0))
    );
    config.max_messages = 50;
    js.update_stream(&config).await.unwrap();
    // Within the interval: the configuration read before is kept.
    let text = common::scrape(&long).await;
    assert_eq!(
        (max(&text), config_read(&text, name)),
        (Some(100.0), Some(0.0))
    );
    // Past it: the first poll past the interval starts a read beside the
    // scrapes, a later one takes it in. Every poll before keeps 100, and
    // one that began before the interval could have passed never takes in.
    let interval = Duration::from_secs(2);
    let (ended, text) = Wait::secs("a poll that takes in the configuration again", 20)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let began = Instant::now();
            let text = common::scrape(&short).await;
            if config_read(&text, name) == Some(1.0) {
                assert!(began >= read_by + interval, "read before the interval");
                return Ok((Instant::now(), text));
            }
            assert_eq!(max(&text), Some(100.0), "kept until read again");
            Err(Text(text))
        })
        .await;
    assert!(ended >= asked + interval, "read again before the interval");
    assert_eq!(max(&text), Some(50.0));
}

async fn max_ack_pending(exporter: &Exporter) -> Option<f64> {
    let text = common::scrape(exporter).await;
    of_consumer(
        &text,
        "nats_delivery_consumer_max_ack_pending",
        "$G",
        "R",
        "c",
    )
}

/// A server restarted with an empty store, its stream and consumer made
/// again under the same names with other settings: read afresh.
#[tokio::test]
async fn a_server_restarted_empty_is_read_afresh() {
    let mut server = NatsServer::builder().jetstream().start();
    let make = |server: &NatsServer, max_ack_pending: i64| {
        let url = server.client_url();
        async move {
            let js = jetstream::new(async_nats::connect(url).await.unwrap());
            let st = js
                .create_stream(stream::Config {
                    name: "R".into(),
                    subjects: vec!["r".into()],
                    ..Default::default()
                })
                .await
                .unwrap();
            st.create_consumer(with_max_ack_pending("c", max_ack_pending))
                .await
                .unwrap();
        }
    };
    make(&server, 5).await;
    let exporter = exporter(&server);
    assert_eq!(max_ack_pending(&exporter).await, Some(5.0));
    server.kill_and_restart(true);
    make(&server, 9).await;
    // Read beside the scrapes: never the 5 kept for the consumer before.
    Wait::secs("the new consumer's configuration", 60)
        .until_async(async || match max_ack_pending(&exporter).await {
            Some(9.0) => Ok(()),
            seen => {
                assert_eq!(seen, None, "the configuration of the one before");
                Err(seen)
            }
        })
        .await;
    let text = common::scrape(&exporter).await;
    assert_eq!(config_read(&text, &server.name), Some(0.0));
    let labels = [("account", "$G"), ("stream", "R"), ("consumer", "c")];
    assert_eq!(
        value(&text, "nats_delivery_consumer_max_ack_pending", &labels),
        Some(9.0)
    );
}

/// A filter added to a consumer with messages pending, while the stream
/// removes delivered messages: `num_pending` falls by the messages the
/// filter leaves out, and the consumer's delivered sequence later jumps
/// over them. Nothing is counted, with a scrape between the change and the
/// jump (the configuration kept, then read again) or not.
#[tokio::test]
async fn a_filter_added_between_config_reads_is_never_counted_as_a_removal() {
    filter_added(true).await;
}

/// [`a_filter_added_between_config_reads_is_never_counted_as_a_removal`]
/// with one interval over the change and the jump.
#[tokio::test]
async fn a_filter_added_within_one_poll_interval_is_never_counted_as_a_removal() {
    filter_added(false).await;
}

async fn filter_added(scrape_between: bool) {
    let server = NatsServer::builder().jetstream().start();
    let config = stream::Config {
        name: "F".into(),
        subjects: vec!["f.>".into()],
        max_messages: 11,
        ..Default::default()
    };
    let mut lab = Lab::new(&server, config).await;
    let mut reader = Reader::new(&lab, "reader", None, Acks::Explicit, ACK_WAIT).await;
    let exporter = exporter(&server);
    lab.publish("f.a", 5).await;
    lab.publish("f.b", 5).await;
    assert_eq!(reader.read(1).await, [1]);
    let counted = |text: &str| of_consumer(text, COUNTER, "$G", "F", "reader");
    let text = common::scrape(&exporter).await;
    assert_eq!(counted(&text), Some(0.0));
    assert_eq!(config_read(&text, &server.name), Some(1.0));
    // The filter: 4 of the 9 pending stay the consumer's. Two more
    // messages, and the stream (at most 11) removes sequence 1, delivered.
    let filtered = pull::Config {
        durable_name: Some("reader".into()),
        filter_subject: "f.a".into(),
        ack_wait: ACK_WAIT,
        ..Default::default()
    };
    lab.stream.create_consumer(filtered).await.unwrap();
    lab.publish("f.b", 2).await;
    assert_eq!(reader.position().await.1, 4);
    if scrape_between {
        let text = common::scrape(&exporter).await;
        assert_eq!(counted(&text), Some(0.0));
        assert_eq!(config_read(&text, &server.name), Some(0.0));
    }
    // The consumer reads its 4, then one more past the f.b messages (the
    // stream removes sequence 2, delivered).
    assert_eq!(reader.read(4).await, [2, 3, 4, 5]);
    lab.publish("f.a", 1).await;
    assert_eq!(reader.read(1).await, [13]);
    let text = common::scrape(&exporter).await;
    assert_eq!(counted(&text), Some(0.0));
    assert_eq!(config_read(&text, &server.name), Some(1.0));
    let text = common::scrape(&exporter).await;
    assert_eq!(counted(&text), Some(0.0));
    assert_eq!(config_read(&text, &server.name), Some(0.0));
}
