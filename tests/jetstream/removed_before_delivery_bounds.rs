//! Removed before delivery where METRICS.md says the counter is not exact:
//! redeliveries beside a jump (a lower bound) and a consumer with a subject
//! filter (exact without arrivals, an estimate within its bounds with
//! them), against a real server.
use crate::removed_before_delivery::limited;
use crate::removed_before_delivery_support::{
    assert_exact, assert_lower_bound, counter, expect, exporter, Acks, Lab, Reader, Stored,
};

use std::time::Duration;

use async_nats::jetstream::{stream, AckKind};
use nats_test_server::NatsServer;

const ACK_WAIT: Duration = Duration::from_secs(60);

/// One message redelivered after a NAK, one after its ack wait ran out, in
/// the interval where each consumer also jumps 10 removed messages: the
/// counter is a lower bound, short by the one redelivery /jsz cannot tell
/// from a skip.
#[tokio::test]
async fn a_redelivery_beside_a_jump_makes_a_lower_bound() {
    let server = NatsServer::builder().jetstream().start();
    let mut lab = Lab::new(&server, limited("redeliver", 10)).await;
    let mut naked = Reader::new(&lab, "naked", None, Acks::Hold, ACK_WAIT).await;
    let one_second = Duration::from_secs(1);
    let mut expired = Reader::new(&lab, "expired", None, Acks::Hold, one_second).await;
    let exporter = exporter(&server);
    lab.scrape(&exporter).await;
    lab.publish("redeliver", 4).await;
    for r in [&mut naked, &mut expired] {
        assert_eq!(r.read(4).await, [1, 2, 3, 4]);
    }
    let step = lab.scrape(&exporter).await;
    let both = [expect(&naked, true), expect(&expired, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "4 held"), [0, 0]);
    // 1 is refused by "naked" and left to its ack wait by "expired"; each
    // receives it again (the only message it can be given), then
    // acknowledges everything.
    naked
        .settle(|seq| {
            Some(if seq == 1 {
                AckKind::Nak(None)
            } else {
                AckKind::Ack
            })
        })
        .await;
    expired
        .settle(|seq| (seq != 1).then_some(AckKind::Ack))
        .await;
    for r in [&mut naked, &mut expired] {
        assert_eq!(r.read(1).await, [1]);
        assert_eq!(r.redelivered, 1, "{}", r.name);
        r.settle(|_| Some(AckKind::Ack)).await;
        r.acks = Acks::Explicit;
    }
    // 20 more: the stream keeps 15..=24, 5..=14 went unseen; each jumps.
    lab.publish("redeliver", 20).await;
    for r in [&mut naked, &mut expired] {
        assert_eq!(r.read(3).await, [15, 16, 17]);
    }
    // delivered.stream_seq went 4 -> 17 and delivered.consumer_seq 4 -> 8
    // (one redelivery, three first deliveries): 13 - 4 = 9 skipped as far
    // as /jsz shows, against 10 in truth.
    let step = lab.scrape(&exporter).await;
    let figures = assert_lower_bound(&step, &lab, &[&naked, &expired], "redelivered, jumped");
    assert_eq!(figures, [(9, 10), (9, 10)]);
    // Without redeliveries the next jump is counted exactly: 18..=24 go
    // unseen, the counter stays one short.
    lab.publish("redeliver", 10).await;
    for r in [&mut naked, &mut expired] {
        assert_eq!(r.read(2).await, [25, 26]);
    }
    let step = lab.scrape(&exporter).await;
    let figures = assert_lower_bound(&step, &lab, &[&naked, &expired], "jumped again");
    assert_eq!(figures, [(16, 17), (16, 17)]);
}

/// Publishes `n` messages to `filtered.a`, `filtered.b`, `filtered.b`,
/// in turn.
async fn publish_mixed(lab: &mut Lab, n: usize) {
    for i in 0..n {
        let subject = if i % 3 == 0 {
            "filtered.a"
        } else {
            "filtered.b"
        };
        lab.publish(subject, 1).await;
    }
}

/// What the documented bounds of a filtered consumer need of one poll.
#[derive(Debug, Clone, Copy)]
struct Seen {
    last: u64,
    messages: u64,
    deliveries: u64,
    pending: u64,
}

async fn seen(reader: &mut Reader, stored: &Stored) -> Seen {
    let (deliveries, pending) = reader.position().await;
    Seen {
        last: stored.last,
        messages: stored.messages,
        deliveries,
        pending,
    }
}

/// METRICS.md's bounds of one interval for a filtered consumer: removed
/// matching = matching arrivals - first deliveries - Δnum_pending, the
/// matching arrivals between 0 and ΔL (first deliveries between 0 and ΔC,
/// or ΔC without redeliveries), at most what the stream removed.
fn documented_bounds(p: Seen, s: Seen, no_redelivery: bool) -> (i64, i64) {
    let arrivals = (s.last - p.last) as i64;
    let removed_by_stream = arrivals + p.messages as i64 - s.messages as i64;
    let deliveries = (s.deliveries - p.deliveries) as i64;
    let fell = p.pending as i64 - s.pending as i64;
    let first_low = if no_redelivery { deliveries } else { 0 };
    let low = (fell - deliveries).max(0);
    let high = (arrivals + fell - first_low)
        .min(removed_by_stream)
        .max(low);
    (low, high)
}

/// Consumers of `filtered.a` on a stream of `filtered.>` keeping 12
/// messages, explicit acks and ack policy none.
#[tokio::test]
async fn a_filtered_consumer_is_exact_without_arrivals_and_bounded_with_them() {
    let server = NatsServer::builder().jetstream().start();
    let config = stream::Config {
        subjects: vec!["filtered.>".into()],
        ..limited("filtered", 12)
    };
    let mut lab = Lab::new(&server, config).await;
    let a = Some("filtered.a");
    let mut acked = Reader::new(&lab, "acked", a, Acks::Explicit, ACK_WAIT).await;
    let mut no_ack = Reader::new(&lab, "no_ack", a, Acks::None, ACK_WAIT).await;
    let exporter = exporter(&server);
    lab.scrape(&exporter).await;
    // 12 arrive (filtered.a at 1, 4, 7, 10), nothing removed: exact.
    publish_mixed(&mut lab, 12).await;
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(2).await, [1, 4]);
    }
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, true), expect(&no_ack, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "arrivals"), [0, 0]);
    // Nothing arrives, everything below 9 is purged: 7 went unseen. Exact.
    lab.stream.purge().sequence(9).await.unwrap();
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, true), expect(&no_ack, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "purged"), [1, 1]);
    // 12 arrive (filtered.a at 13, 16, 19, 22) and push 9..=12 out (10
    // unseen): an estimate within the documented bounds, gauge 0.
    let before = [
        seen(&mut acked, &step.1).await,
        seen(&mut no_ack, &step.1).await,
    ];
    publish_mixed(&mut lab, 12).await;
    let step = lab.scrape(&exporter).await;
    for (r, p) in [(&mut acked, before[0]), (&mut no_ack, before[1])] {
        let s = seen(r, &step.1).await;
        let (low, high) = documented_bounds(p, s, r.acks == Acks::None);
        let (count, gauge) = counter(&step.0, "filtered", r.name);
        let truth = r.truth(&lab, &step.1).removed();
        println!(
            "{}: counter 1 -> {count}, truth 1 -> {truth}, bounds of the increase [{low}, {high}], _exact {gauge}",
            r.name
        );
        let (increase, true_increase) = (count as i64 - 1, truth as i64 - 1);
        assert!((low..=high).contains(&increase), "{}: {increase}", r.name);
        assert!((low..=high).contains(&true_increase), "{}", r.name);
        assert_eq!((truth, gauge), (2, 0.0), "{}", r.name);
    }
}
