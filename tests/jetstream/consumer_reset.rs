//! A consumer reset (nats-server 2.14+): `$JS.API.CONSUMER.RESET.<stream>.<consumer>`
//! with `{"seq": N}` (an empty body: its ack floor) puts the consumer's
//! delivered position and ack floor at N - 1, forward or back, and starts
//! its delivery count (`delivered.consumer_seq`) again from 0. Messages a
//! reset moved the consumer past were not removed by the stream: the
//! removal count stays exact across resets, and never goes down; the
//! delivery count falls to exactly 0, a counter reset Prometheus counts right.
use crate::removed_before_delivery::limited;
use crate::removed_before_delivery_support::{counter, exporter, Acks, Lab, Reader};

use std::time::Duration;

use nats_test_server::NatsServer;
use serde_json::Value;

const ACK_WAIT: Duration = Duration::from_secs(60);

/// Resets `consumer` of `stream` to `seq` and returns its delivered stream
/// sequence and delivery count, as the server's answer gives them.
async fn reset(lab: &Lab, stream: &str, consumer: &str, seq: u64) -> (u64, u64) {
    // The context puts `$JS.API.` before the subject.
    let subject = format!("CONSUMER.RESET.{stream}.{consumer}");
    let body = serde_json::json!({ "seq": seq });
    let reply: Value = lab
        .js
        .request(subject, &body)
        .await
        .expect("reset answered");
    assert_eq!(reply["reset_seq"], seq, "{reply}");
    let delivered = &reply["delivered"];
    let at = |field: &str| delivered[field].as_u64().unwrap_or(0);
    (at("stream_seq"), at("consumer_seq"))
}

/// (count, `_exact`) of each consumer of `names`.
fn counts(text: &str, names: &[&str]) -> Vec<(u64, f64)> {
    names.iter().map(|c| counter(text, "reset", c)).collect()
}

/// Three consumers reset while the stream removes nothing: one that had
/// delivered nothing (reset forward, its delivery count stays 0), one reset
/// forward that then delivers more than it had before (its delivery count
/// ends above where it was), one reset back. None is counted; then the
/// stream's limit removes messages and each counts exactly those it had
/// not delivered since its reset.
#[tokio::test]
async fn a_reset_forward_or_back_is_not_counted_and_later_removals_are_exact() {
    let version = nats_test_server::version_numbers(&nats_test_server::version_under_test());
    if version < vec![2, 14] {
        eprintln!("no consumer reset before nats-server 2.14");
        return;
    }
    let server = NatsServer::builder().jetstream().start();
    let mut lab = Lab::new(&server, limited("reset", 30)).await;
    let names = ["fresh", "forward", "back"];
    let _fresh = Reader::new(&lab, "fresh", None, Acks::Explicit, ACK_WAIT).await;
    let mut forward = Reader::new(&lab, "forward", None, Acks::Explicit, ACK_WAIT).await;
    let mut back = Reader::new(&lab, "back", None, Acks::Explicit, ACK_WAIT).await;
    let exporter = exporter(&server);
    lab.publish("reset", 25).await;
    assert_eq!(forward.read(5).await, [1, 2, 3, 4, 5]);
    back.read(10).await;
    let (text, _) = lab.scrape(&exporter).await;
    assert_eq!(counts(&text, &names), [(0, 1.0); 3], "before the resets");

    assert_eq!(reset(&lab, "reset", "fresh", 10).await, (9, 0));
    assert_eq!(reset(&lab, "reset", "forward", 12).await, (11, 0));
    assert_eq!(forward.read(7).await, [12, 13, 14, 15, 16, 17, 18]);
    assert_eq!(reset(&lab, "reset", "back", 3).await, (2, 0));
    assert_eq!(back.read(4).await, [3, 4, 5, 6]);
    let (text, stored) = lab.scrape(&exporter).await;
    assert_eq!((stored.first, stored.last), (1, 25));
    assert_eq!(counts(&text, &names), [(0, 1.0); 3], "after the resets");

    // 15 more: the limit of 30 removes 1 to 10. Not delivered since its
    // reset: 10 for "fresh" (at 9), none for "forward" (at 18), 7 to 10 for
    // "back" (at 6).
    lab.publish("reset", 15).await;
    let (text, stored) = lab.scrape(&exporter).await;
    assert_eq!(stored.first, 11);
    assert_eq!(
        counts(&text, &names),
        [(1, 1.0), (0, 1.0), (4, 1.0)],
        "after the limit removed 1 to 10"
    );
}

/// `nats_delivery_consumer_deliveries_total` of consumer `name`.
fn deliveries(text: &str, name: &str) -> Option<f64> {
    nats_test_server::sample::value(
        text,
        "nats_delivery_consumer_deliveries_total",
        &[("stream", "again"), ("consumer", name)],
    )
}

/// What `increase()` makes of a counter's samples: a fall is a counter
/// reset, counted from 0.
fn increase(samples: &[f64]) -> f64 {
    samples
        .windows(2)
        .map(|w| if w[1] < w[0] { w[1] } else { w[1] - w[0] })
        .sum()
}

/// The delivery count is the server's (`delivered.consumer_seq`), which a
/// reset (2.14+) and a consumer made again under its name start again at
/// exactly 0: the counter falls to 0, a counter reset to Prometheus, and
/// `increase()` over the scrapes equals every delivery made. A count
/// carried across in the exporter's memory would fall at the exporter's
/// next restart instead, read as a reset that counts the server's whole
/// count again (METRICS.md).
#[tokio::test]
async fn deliveries_start_again_at_exactly_zero_after_a_reset_or_a_new_consumer() {
    let version = nats_test_server::version_numbers(&nats_test_server::version_under_test());
    let server = NatsServer::builder().jetstream().start();
    let mut lab = Lab::new(&server, limited("again", 1000)).await;
    let mut reader = Reader::new(&lab, "again", None, Acks::Explicit, ACK_WAIT).await;
    let flags = [
        "--consumer-opt-in-metrics",
        "nats_delivery_consumer_deliveries_total",
    ];
    let exporter = crate::consumer_health::exporter(&server, &flags);
    lab.publish("again", 30).await;
    let mut samples = Vec::new();
    let mut scrape = async |lab: &Lab, want: f64, when: &str| {
        let (text, _) = lab.scrape(&exporter).await;
        assert_eq!(deliveries(&text, "again"), Some(want), "{when}\n{text}");
        samples.push(want);
    };
    scrape(&lab, 0.0, "before any read").await;
    reader.read(8).await;
    scrape(&lab, 8.0, "8 read").await;
    let mut delivered = 8.0;
    if version >= vec![2, 14] {
        // Back to sequence 3: the count starts again at 0, then counts the
        // deliveries made since.
        assert_eq!(reset(&lab, "again", "again", 3).await, (2, 0));
        scrape(&lab, 0.0, "reset back").await;
        assert_eq!(reader.read(4).await, [3, 4, 5, 6]);
        scrape(&lab, 4.0, "4 read since the reset").await;
        delivered += 4.0;
    } else {
        eprintln!("no consumer reset before nats-server 2.14");
    }
    // Deleted and made again under its name: a new count from 0.
    lab.stream.delete_consumer("again").await.unwrap();
    let mut reader = Reader::new(&lab, "again", None, Acks::Explicit, ACK_WAIT).await;
    scrape(&lab, 0.0, "made again").await;
    assert_eq!(reader.read(3).await, [1, 2, 3]);
    scrape(&lab, 3.0, "3 read by the new consumer").await;
    delivered += 3.0;
    assert_eq!(increase(&samples), delivered, "{samples:?}");
}
