//! Messages a stream removed before a consumer delivered them, against a
//! real server: each test works out the truth from what it published and
//! what its pull consumers received, and the counter equals it where
//! METRICS.md says it is exact (estimates, purges, restarts:
//! `removed_before_delivery_bounds`, `removed_before_delivery_restart`).
use crate::removed_before_delivery_support::{
    assert_exact, counted, expect, exporter, Acks, Lab, Reader,
};

use std::time::Duration;

use async_nats::jetstream::stream;
use nats_test_server::NatsServer;

const ACK_WAIT: Duration = Duration::from_secs(60);

/// A stream `name` of subject `name`, keeping at most `max_messages`.
pub(crate) fn limited(name: &str, max_messages: i64) -> stream::Config {
    stream::Config {
        name: name.into(),
        subjects: vec![name.into()],
        max_messages,
        ..Default::default()
    }
}

/// `max_age` 2 s (a production stream's minutes scaled down): a
/// consumer that stops pulling while 50 messages arrive over about three
/// seconds, and one that keeps up.
#[tokio::test]
async fn a_consumer_that_stops_pulling_counts_what_aged_out_unseen() {
    let server = NatsServer::builder().jetstream().start();
    let config = stream::Config {
        max_age: Duration::from_secs(2),
        ..limited("age", -1)
    };
    let mut lab = Lab::new(&server, config).await;
    let mut stopped = Reader::new(&lab, "stopped", None, Acks::Explicit, ACK_WAIT).await;
    let mut kept_up = Reader::new(&lab, "kept_up", None, Acks::Explicit, ACK_WAIT).await;
    let exporter = exporter(&server);
    let step = lab.scrape(&exporter).await;
    let both = [expect(&stopped, true), expect(&kept_up, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "start"), [0, 0]);
    lab.publish("age", 5).await;
    assert_eq!(stopped.read(5).await, [1, 2, 3, 4, 5]);
    kept_up.read(5).await;
    let step = lab.scrape(&exporter).await;
    let both = [expect(&stopped, true), expect(&kept_up, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "read 5"), [0, 0]);
    // "stopped" reads no more. Ten times 5 messages, 300 ms apart (the
    // pace of arrivals, not a wait); "kept_up" reads each five at once.
    // Every scrape equals the truth of the moment, whatever aged out yet.
    let mut seen = Vec::new();
    for round in 1..=10 {
        lab.publish("age", 5).await;
        kept_up.read(5).await;
        let step = lab.scrape(&exporter).await;
        // kept_up's gauge stays 1 unless messages it read age out within
        // the interval it read them in (a scrape interval above max_age,
        // possible on a loaded machine): not checked here.
        let readers = [expect(&stopped, true), counted(&kept_up)];
        let counts = assert_exact(&step, &lab, &readers, &format!("round {round}"));
        assert_eq!(counts[1], 0);
        seen.push(counts[0]);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    println!("stopped's counter after each round: {seen:?}");
    lab.wait_removed(lab.last()).await;
    let step = lab.scrape(&exporter).await;
    let readers = [expect(&stopped, true), counted(&kept_up)];
    // Everything aged out: "stopped" lost the 50 it never pulled.
    assert_eq!(assert_exact(&step, &lab, &readers, "aged out"), [50, 0]);
    assert_eq!(stopped.truth(&lab, &step.1).matching, 55);
    nats_test_server::reference::assert_documented(&step.0);
}

/// `max_msgs` 10: between two scrapes the stream removes messages the
/// consumers never delivered and they jump past them; no visible gap at
/// either scrape. Explicit acks without redeliveries, and ack policy none.
#[tokio::test]
async fn a_gap_opened_and_jumped_between_two_scrapes_is_exact() {
    let server = NatsServer::builder().jetstream().start();
    let mut lab = Lab::new(&server, limited("jump", 10)).await;
    let mut acked = Reader::new(&lab, "acked", None, Acks::Explicit, ACK_WAIT).await;
    let mut no_ack = Reader::new(&lab, "no_ack", None, Acks::None, ACK_WAIT).await;
    let exporter = exporter(&server);
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, true), expect(&no_ack, true)];
    assert_exact(&step, &lab, &both, "start");
    lab.publish("jump", 10).await;
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(4).await, [1, 2, 3, 4]);
    }
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, true), expect(&no_ack, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "read 4"), [0, 0]);
    // 15 more: the stream keeps 16..=25, 5..=15 went unseen; each consumer
    // then jumps to 16.
    lab.publish("jump", 15).await;
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(3).await, [16, 17, 18]);
    }
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, true), expect(&no_ack, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "jumped"), [11, 11]);
    // Again: 12 more, the stream keeps 28..=37, 19..=27 went unseen.
    lab.publish("jump", 12).await;
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(2).await, [28, 29]);
    }
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, true), expect(&no_ack, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "jumped again"), [20, 20]);
}

/// `max_msgs` 10: consumers fall behind, read some, fall behind again;
/// first with a scrape after each step, then all within one interval.
#[tokio::test]
async fn a_consumer_that_fell_behind_read_some_and_fell_behind_again_is_exact() {
    let server = NatsServer::builder().jetstream().start();
    let mut lab = Lab::new(&server, limited("behind", 10)).await;
    let mut acked = Reader::new(&lab, "acked", None, Acks::Explicit, ACK_WAIT).await;
    let mut no_ack = Reader::new(&lab, "no_ack", None, Acks::None, ACK_WAIT).await;
    let exporter = exporter(&server);
    lab.scrape(&exporter).await;
    lab.publish("behind", 10).await;
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(2).await, [1, 2]);
    }
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, true), expect(&no_ack, true)];
    assert_eq!(assert_exact(&step, &lab, &both, "read 1..=2"), [0, 0]);
    // Each step scraped: a gap is counted once the stream removed it, and
    // not again when the consumer jumps it.
    let steps: [(usize, usize, [u64; 2], &str); 4] = [
        (10, 0, [8, 8], "fell behind: 3..=10 removed unseen"),
        (0, 3, [8, 8], "read 11..=13"),
        (10, 0, [15, 15], "fell behind again: 14..=20 removed unseen"),
        (0, 2, [15, 15], "read 21..=22"),
    ];
    for (publish, read, want, label) in steps {
        lab.publish("behind", publish).await;
        for r in [&mut acked, &mut no_ack] {
            r.read(read).await;
        }
        let step = lab.scrape(&exporter).await;
        let both = [expect(&acked, true), expect(&no_ack, true)];
        assert_eq!(assert_exact(&step, &lab, &both, label), want);
    }
    // All within one interval: 23..=30 removed unseen, 31..=33 read,
    // 34..=40 removed unseen. The explicit consumer's count is the truth
    // (it redelivered nothing), but its gauge goes to 0: the messages it
    // read were removed in the same interval, and a redelivery there would
    // look the same in /jsz (METRICS.md: a lower bound).
    lab.publish("behind", 10).await;
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(3).await, [31, 32, 33]);
    }
    lab.publish("behind", 10).await;
    let step = lab.scrape(&exporter).await;
    let both = [expect(&acked, false), expect(&no_ack, true)];
    assert_eq!(
        assert_exact(&step, &lab, &both, "in one interval"),
        [30, 30]
    );
}

/// Removed by hand: two interior deletes, then a purge, of messages the
/// consumers had not delivered.
#[tokio::test]
async fn deleted_and_purged_messages_are_counted() {
    let server = NatsServer::builder().jetstream().start();
    let mut lab = Lab::new(&server, limited("purged", -1)).await;
    let mut acked = Reader::new(&lab, "acked", None, Acks::Explicit, ACK_WAIT).await;
    let mut no_ack = Reader::new(&lab, "no_ack", None, Acks::None, ACK_WAIT).await;
    // Holds what it reads unacknowledged: removed, those are terminated
    // (an advisory), not counted here.
    let mut held = Reader::new(&lab, "held", None, Acks::Hold, ACK_WAIT).await;
    let exporter = exporter(&server);
    lab.scrape(&exporter).await;
    lab.publish("purged", 10).await;
    for r in [&mut acked, &mut no_ack, &mut held] {
        assert_eq!(r.read(3).await, [1, 2, 3]);
    }
    let step = lab.scrape(&exporter).await;
    let all = [
        expect(&acked, true),
        expect(&no_ack, true),
        expect(&held, true),
    ];
    assert_eq!(assert_exact(&step, &lab, &all, "read 1..=3"), [0, 0, 0]);
    for seq in [6, 8] {
        assert!(lab.stream.delete_message(seq).await.unwrap());
    }
    let step = lab.scrape(&exporter).await;
    let all = [
        expect(&acked, true),
        expect(&no_ack, true),
        expect(&held, true),
    ];
    assert_eq!(assert_exact(&step, &lab, &all, "deleted 6, 8"), [2, 2, 2]);
    // "acked" reads past both deletes, "no_ack" past one (with ack policy
    // none a jump is exact wherever the deletes lie).
    assert_eq!(acked.read(5).await, [4, 5, 7, 9, 10]);
    assert_eq!(no_ack.read(3).await, [4, 5, 7]);
    let step = lab.scrape(&exporter).await;
    let all = [
        expect(&acked, true),
        expect(&no_ack, true),
        expect(&held, true),
    ];
    assert_eq!(assert_exact(&step, &lab, &all, "jumped"), [2, 2, 2]);
    // Five more, "acked" reads two of them; then everything is purged.
    lab.publish("purged", 5).await;
    assert_eq!(acked.read(2).await, [11, 12]);
    lab.scrape(&exporter).await;
    let purged = lab.stream.purge().await.unwrap().purged;
    assert_eq!(purged, 13);
    let step = lab.scrape(&exporter).await;
    let all = [
        expect(&acked, true),
        expect(&no_ack, true),
        expect(&held, true),
    ];
    // acked: 13..=15; no_ack: 9, 10 and 11..=15; held: all but 1..=3.
    assert_eq!(assert_exact(&step, &lab, &all, "purged"), [5, 9, 12]);
}

/// Publishes one message to `per_subject.<s>` for each word `s`, in order.
async fn publish_each(lab: &mut Lab, subjects: &str) {
    for s in subjects.split(' ') {
        lab.publish(&format!("per_subject.{s}"), 1).await;
    }
}

/// `max_msgs_per_subject` 2 (discard old): the limit removes messages from
/// the middle of the stream, which /jsz shows only as a count of interior
/// deletes.
#[tokio::test]
async fn messages_removed_by_the_per_subject_limit_are_counted() {
    let server = NatsServer::builder().jetstream().start();
    let config = stream::Config {
        subjects: vec!["per_subject.>".into()],
        max_messages_per_subject: 2,
        ..limited("per_subject", -1)
    };
    let mut lab = Lab::new(&server, config).await;
    let mut acked = Reader::new(&lab, "acked", None, Acks::Explicit, ACK_WAIT).await;
    let mut no_ack = Reader::new(&lab, "no_ack", None, Acks::None, ACK_WAIT).await;
    let mut partly = Reader::new(&lab, "partly", None, Acks::Explicit, ACK_WAIT).await;
    let exporter = exporter(&server);
    lab.scrape(&exporter).await;
    publish_each(&mut lab, "a b c a b c").await;
    for r in [&mut acked, &mut no_ack, &mut partly] {
        assert_eq!(r.read(2).await, [1, 2]);
    }
    let step = lab.scrape(&exporter).await;
    let all = [
        expect(&acked, true),
        expect(&no_ack, true),
        expect(&partly, true),
    ];
    assert_eq!(assert_exact(&step, &lab, &all, "read 1, 2"), [0, 0, 0]);
    // a at 7, 8 pushes out 1 and 4, b at 9 pushes out 2, d at 12 pushes
    // out 10: 4 and 10 went unseen (1 and 2 were read).
    publish_each(&mut lab, "a a b d d d").await;
    let step = lab.scrape(&exporter).await;
    let all = [
        expect(&acked, true),
        expect(&no_ack, true),
        expect(&partly, true),
    ];
    assert_eq!(assert_exact(&step, &lab, &all, "limit"), [2, 2, 2]);
    // "acked" reads past both, the others past 4 only. With explicit acks
    // the count stays right but the gauge of "partly" goes to 0: /jsz
    // counts interior deletes without placing them, so which of them it
    // jumped (and whether a redelivery hid beside) cannot be told.
    assert_eq!(acked.read(8).await, [3, 5, 6, 7, 8, 9, 11, 12]);
    for r in [&mut no_ack, &mut partly] {
        assert_eq!(r.read(3).await, [3, 5, 6]);
    }
    let step = lab.scrape(&exporter).await;
    let all = [
        expect(&acked, true),
        expect(&no_ack, true),
        expect(&partly, false),
    ];
    assert_eq!(assert_exact(&step, &lab, &all, "jumped"), [2, 2, 2]);
}
