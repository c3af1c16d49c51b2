//! Delivery lag and oldest unacknowledged age against a real server: the
//! estimate from the store times the exporter learned, and the exact values
//! read from the stored messages.
use crate::account_storage::unix_now;
use crate::common;
use crate::consumer_health::{exporter, publish, pull, take_all, EVERY_SERIES};

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

/// Publishes `n` messages to `l`, the first ten 200 ms apart, scraping
/// after every fifth.
async fn publish_spaced_then_burst(js: &jetstream::Context, exporter: &Exporter, n: u64) {
    for i in 1..=n {
        publish(js, "l", 1).await;
        if i % 5 == 0 {
            common::scrape(exporter).await;
        }
        if i <= 10 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Stream `name` of the one subject `subject`, and its pull consumer
/// "reader" (explicit acknowledgements).
async fn stream_and_reader(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
) -> (stream::Stream, jetstream::consumer::PullConsumer) {
    let s = js
        .create_stream(stream::Config {
            name: name.into(),
            subjects: vec![subject.into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let reader = s.create_consumer(pull("reader", subject)).await.unwrap();
    (s, reader)
}

/// When each of the sequences 1 to `n` of `s` was stored, in seconds, at
/// its sequence's index (index 0 unused).
async fn stored_times(s: &stream::Stream, n: u64) -> Vec<f64> {
    let mut stored = vec![0.0];
    for seq in 1..=n {
        let m = s.get_raw_message(seq).await.unwrap();
        stored.push(m.time.unix_timestamp_nanos() as f64 / 1e9);
    }
    stored
}

#[tokio::test]
async fn estimated_delivery_lag_is_within_the_bound_the_spacing_allows() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    let (s, reader) = stream_and_reader(&js, "L", "l").await;
    let exporter = exporter(&server, &EVERY_SERIES);
    // Ten messages 200 ms apart, then ten at once. The exporter polls after
    // every fifth, so it learns the store times of 1, 5, 10, 15 and 20.
    let n = 20u64;
    publish_spaced_then_burst(&js, &exporter, n).await;
    // The reader stops after 7: message 8 is the first it has not delivered.
    assert_eq!(take_all(&reader, 7, true).await, 7);
    let text = common::scrape(&exporter).await;
    let c = [("stream", "L"), ("consumer", "reader")];
    let lag = value(&text, "nats_delivery_consumer_delivery_lag_seconds", &c).unwrap();
    assert_eq!(
        value(&text, "nats_delivery_consumer_delivery_lag_exact", &c),
        Some(0.0)
    );
    // The server's clock at that poll: last delivery age + last delivery time.
    let age = value(
        &text,
        "nats_delivery_consumer_last_delivery_age_seconds",
        &c,
    )
    .unwrap();
    let mut reader = reader;
    let last_active = reader.info().await.unwrap().delivered.last_active.unwrap();
    let now = last_active.unix_timestamp_nanos() as f64 / 1e9 + age;
    // stored[k] is when sequence k was stored (stored[0] unused).
    let stored = stored_times(&s, n).await;
    let true_lag = now - stored[8];
    let error = lag - true_lag;
    // Message 8 lies between the known points 5 and 10, and the estimate
    // interpolates between their true times. Messages 5..=10 were sent at
    // an even pace: each true time lies within `spread` of the straight
    // line through 5 and 10, so the interpolation and the truth differ by
    // at most 2 x spread (and 1 ms for rounding). Whatever the pace, the
    // truth lies between the times of 5 and 10.
    let line = |k: usize| stored[5] + (stored[10] - stored[5]) * (k - 5) as f64 / 5.0;
    let spread = (5..=10)
        .map(|k| (stored[k] - line(k)).abs())
        .fold(0.0, f64::max);
    // Had only this poll's first and last points been kept (1 and 20, with
    // the burst at the end), the estimate would be far off.
    let one_poll = stored[1] + (stored[20] - stored[1]) * 7.0 / 19.0;
    let one_poll_error = stored[8] - one_poll;
    println!(
        "delivery lag {lag:.4} s, true {true_lag:.4} s, error {error:+.4} s \
         (bound {:.4} s; from one poll's points only the error would be {one_poll_error:+.4} s)",
        2.0 * spread + 0.001
    );
    assert!(error.abs() <= 2.0 * spread + 0.001, "error {error}");
    assert!(error.abs() <= stored[10] - stored[5]);
    assert!(
        one_poll_error.abs() > 0.3,
        "the history is what makes it close"
    );
    // Nothing acknowledged after 7 either: the same message.
    let unacked = value(
        &text,
        "nats_delivery_consumer_oldest_unacked_age_seconds",
        &c,
    )
    .unwrap();
    assert_eq!(unacked, lag);
}

/// With a timestamp reader, the lag and the age come from the stored
/// messages themselves: exact, and equal to the truth to the millisecond,
/// where the estimate from one poll's points is seconds off.
#[tokio::test]
async fn read_timestamps_make_lag_and_age_exact() {
    use nats_delivery_exporter::MessageTimestamps;
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let (s, reader) = stream_and_reader(&js, "R", "r").await;
    // Five messages 300 ms apart, then five at once: a straight line
    // between the first and the last is far from message 4.
    for i in 1..=10 {
        publish(&js, "r", 1).await;
        if i <= 5 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Delivered 1..=3 and not acknowledged: the oldest unacknowledged is 1,
    // the first undelivered is 4.
    assert_eq!(take_all(&reader, 3, false).await, 3);
    let flags = ["--sources", "varz,jsz", "--consumer-timestamp-reads", "2"];
    let mut exporter = common::exporter_builder(
        &[server.monitor_url()],
        &[&flags[..], &EVERY_SERIES].concat(),
    );
    exporter.read_timestamps(MessageTimestamps::new(client, "$G", 100));
    let exporter = exporter.build();
    let text = common::scrape(&exporter).await;
    let c = [("stream", "R"), ("consumer", "reader")];
    let get = |name: &str| value(&text, name, &c).unwrap();
    assert_eq!(get("nats_delivery_consumer_delivery_lag_exact"), 1.0);
    assert_eq!(get("nats_delivery_consumer_oldest_unacked_age_exact"), 1.0);
    // The server's clock at that poll: last delivery age + last delivery time.
    let mut reader = reader;
    let last_active = reader.info().await.unwrap().delivered.last_active.unwrap();
    let now = last_active.unix_timestamp_nanos() as f64 / 1e9
        + get("nats_delivery_consumer_last_delivery_age_seconds");
    let stored = |seq| {
        let s = s.clone();
        async move {
            let m = s.get_raw_message(seq).await.unwrap();
            m.time.unix_timestamp_nanos() as f64 / 1e9
        }
    };
    let lag = get("nats_delivery_consumer_delivery_lag_seconds");
    let age = get("nats_delivery_consumer_oldest_unacked_age_seconds");
    let (true_lag, true_age) = (now - stored(4).await, now - stored(1).await);
    println!("lag {lag:.4} (true {true_lag:.4}), age {age:.4} (true {true_age:.4})");
    assert!((lag - true_lag).abs() < 0.002, "lag {lag}, true {true_lag}");
    assert!((age - true_age).abs() < 0.002, "age {age}, true {true_age}");
    assert!(
        (lag - age).abs() > 0.8,
        "two different messages: 1 and 4 were stored 0.9 s apart"
    );
}

/// A stream idle between two bursts: the exporter saw its last sequence
/// still last at a poll during the pause, so the first message after it was
/// stored no earlier than that poll. The estimate of its time is never put
/// back into the pause (spread from the burst before, it was seconds early,
/// and the delivery lag as many seconds long).
#[tokio::test]
async fn traffic_after_an_idle_stream_is_not_timed_back_into_the_pause() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    let (s, reader) = stream_and_reader(&js, "I", "i").await;
    let exporter = exporter(&server, &EVERY_SERIES);
    publish(&js, "i", 5).await;
    assert_eq!(take_all(&reader, 5, true).await, 5);
    common::scrape(&exporter).await;
    // Idle for 2 s by the server's stored time of 5 (one clock: one machine).
    let fifth = stored_times(&s, 5).await[5];
    let idle = Duration::from_secs_f64((fifth + 2.0 - unix_now()).max(0.0));
    tokio::time::sleep(idle).await;
    // A poll of the idle stream, then the second burst, then a poll of it.
    let before_poll = unix_now();
    common::scrape(&exporter).await;
    publish(&js, "i", 5).await;
    let text = common::scrape(&exporter).await;
    let c = [("stream", "I"), ("consumer", "reader")];
    let get = |name: &str| value(&text, name, &c).unwrap();
    assert_eq!(get("nats_delivery_consumer_delivery_lag_exact"), 0.0);
    // The server's clock at that poll: last delivery age + last delivery time.
    let mut reader = reader;
    let last_active = reader.info().await.unwrap().delivered.last_active.unwrap();
    let now = last_active.unix_timestamp_nanos() as f64 / 1e9
        + get("nats_delivery_consumer_last_delivery_age_seconds");
    let stored = stored_times(&s, 10).await;
    // 6 is the first message the reader has not delivered.
    let estimated = now - get("nats_delivery_consumer_delivery_lag_seconds");
    let spread_back = stored[5] + (stored[10] - stored[5]) / 5.0;
    println!(
        "6 stored at {:.4}, estimated {estimated:.4}, the poll before at least {before_poll:.4}; \
         spread back from 5 it would be {spread_back:.4}",
        stored[6]
    );
    assert!(stored[6] - before_poll >= 0.0 && spread_back < before_poll - 0.1);
    // Rounding: the times are written to the millisecond at most.
    assert!(
        estimated >= before_poll - 0.002,
        "{estimated} {before_poll}"
    );
    assert!(estimated <= stored[6] + 0.002, "{estimated} {}", stored[6]);
}
