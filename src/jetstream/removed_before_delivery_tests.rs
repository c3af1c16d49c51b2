//! The arithmetic on positions a real server reported (nats-server 2.15.1,
//! a stream with `max_age`, one pull consumer, polls between steps).

use super::{ConsumerAt, CountingKind, Removed, RemovedTracker, StreamAt, StreamPolls};

/// (first, last, messages, deleted, delivered, deliveries, pending, redelivered)
type Row = (u64, u64, u64, u64, u64, u64, u64, u64);

fn split(r: Row) -> (StreamAt, ConsumerAt) {
    let (first_seq, last_seq, messages, deleted, delivered, deliveries, pending, redelivered) = r;
    let stream = StreamAt {
        first_seq,
        last_seq,
        messages,
        deleted,
    };
    let consumer = ConsumerAt {
        delivered,
        deliveries,
        pending,
        redelivered,
    };
    (stream, consumer)
}

/// The consumer polled at every row of `rows` whose `seen` is true; the
/// stream at every row.
fn run_seen(kind: CountingKind, rows: &[Row], seen: &[bool]) -> Vec<Removed> {
    let (mut stream, mut t, mut last) = (StreamPolls::default(), RemovedTracker::default(), (0, 0));
    let mut out = Vec::new();
    for (&r, &seen) in rows.iter().zip(seen) {
        let (at, consumer) = split(r);
        stream.record(at);
        if seen {
            out.push(t.record(&stream, last, consumer, kind));
            last = (consumer.delivered, consumer.pending);
        } else {
            t.keep_stream(&stream);
        }
    }
    out
}

fn run(kind: CountingKind, rows: &[Row]) -> Vec<Removed> {
    run_seen(kind, rows, &vec![true; rows.len()])
}

fn counts(out: &[Removed]) -> Vec<u64> {
    out.iter().map(|r| r.messages).collect()
}

const UNFILTERED: CountingKind = CountingKind {
    filtered: false,
    no_redelivery: false,
};

/// Fell behind (30 aged out), jumped the visible gap, jumped a gap that
/// opened and closed between polls, fell behind again after reading some,
/// an interior delete, a purge: the server's truth after each step is
/// 0, 0, 30, 30, 47, 74, 75, 75, 82, 82. The interior delete is counted
/// at the next poll (step 7): the first poll that sees it cannot tell it
/// from a delivery not yet committed (R3 streams, 2.11+).
const AGE_OUT: [Row; 10] = [
    (0, 0, 0, 0, 0, 0, 0, 0),
    (1, 10, 10, 0, 5, 5, 5, 0),
    (36, 35, 0, 0, 5, 5, 0, 0),
    (36, 40, 5, 0, 38, 8, 2, 0),
    (56, 60, 5, 0, 59, 12, 1, 0),
    (93, 92, 0, 0, 84, 18, 0, 0),
    (93, 98, 5, 1, 84, 18, 5, 0),
    (93, 98, 5, 1, 98, 23, 0, 0),
    (106, 105, 0, 0, 105, 23, 0, 0),
    (106, 108, 3, 0, 108, 26, 0, 0),
];

#[test]
fn every_step_of_a_consumer_that_fell_behind_equals_the_truth() {
    let out = run(UNFILTERED, &AGE_OUT);
    assert_eq!(counts(&out), [0, 0, 30, 30, 47, 74, 74, 75, 82, 82]);
    // Explicit acks: a redelivery could hide in the step where the
    // consumer read while messages aged out behind it.
    assert!(!out[9].exact);
    assert!(out[4].exact, "{:?}", out[4]);
}

#[test]
fn without_redelivery_every_step_is_exact() {
    let kind = CountingKind {
        filtered: false,
        no_redelivery: true,
    };
    let out = run(kind, &AGE_OUT);
    assert_eq!(counts(&out), [0, 0, 30, 30, 47, 74, 74, 75, 82, 82]);
    assert!(out.iter().all(|r| r.exact));
}

#[test]
fn a_gap_open_at_the_first_poll_is_not_counted_when_it_is_jumped() {
    // An exporter started at step 3: the 30 were removed before it ran.
    let out = run(UNFILTERED, &AGE_OUT[2..]);
    assert_eq!(counts(&out), [0, 0, 17, 44, 44, 45, 52, 52]);
}

#[test]
fn a_reset_consumer_keeps_its_count_and_counts_on() {
    let mut rows = AGE_OUT.to_vec();
    // Deleted and created again: back to the start of the stream.
    rows.push((106, 110, 5, 0, 105, 0, 5, 0));
    rows.push((120, 119, 0, 0, 105, 0, 0, 0));
    let out = run(UNFILTERED, &rows);
    assert_eq!(counts(&out)[9..], [82, 82, 96]);
}

#[test]
fn redeliveries_make_a_lower_bound() {
    // 2.15.1, explicit acks, 1 NAK and 4 ack-wait redeliveries in steps
    // where the consumer also jumped removed messages: truth 0, 0, 16, 16,
    // 36, 36, 62, 62.
    let rows = [
        (0, 0, 0, 0, 0, 0, 0, 0),
        (1, 10, 10, 0, 4, 4, 6, 0),
        (21, 40, 20, 0, 25, 9, 15, 0),
        (24, 43, 20, 0, 28, 12, 15, 0),
        (49, 68, 20, 0, 52, 17, 16, 0),
        (53, 72, 20, 0, 56, 21, 16, 0),
        (83, 102, 20, 0, 85, 28, 17, 0),
        (83, 102, 20, 0, 102, 45, 0, 0),
    ];
    let out = run(UNFILTERED, &rows);
    assert_eq!(counts(&out), [0, 0, 16, 16, 35, 35, 57, 57]);
    assert!(out[3].exact && !out[4].exact);
}

#[test]
fn a_filtered_consumer_is_estimated_within_its_bounds() {
    // Two subjects, the consumer takes s.a: 4 of 12 removed matched, then
    // 3 more with arrivals in the same step (truth 2 then 5).
    let kind = CountingKind {
        filtered: true,
        no_redelivery: false,
    };
    let rows = [
        (0, 0, 0, 0, 0, 0, 0, 0),
        (1, 12, 12, 0, 4, 2, 2, 0),
        (13, 12, 0, 0, 4, 2, 0, 0),
        (22, 27, 6, 0, 4, 2, 2, 0),
    ];
    let out = run(kind, &rows);
    assert_eq!(counts(&out)[..3], [0, 0, 2]);
    assert!(out[2].exact, "no arrivals: exact");
    assert!((2..=11).contains(&out[3].messages), "{:?}", out[3]);
    assert!(!out[3].exact);
}

#[test]
fn interior_deletes_the_consumer_already_passed_leave_it_exact() {
    // 2.15.1, explicit acks: 10 stored, 3 read; 6 and 8 deleted; read
    // past both; 5 more of which 2 read (the deletes now lie below the
    // delivered sequence); everything purged. Truth 0, 0, 2, 2, 2, 5; the
    // deletes are counted when passed, a poll after they happened.
    let rows = [
        (0, 0, 0, 0, 0, 0, 0, 0),
        (1, 10, 10, 0, 3, 3, 7, 0),
        (1, 10, 8, 2, 3, 3, 5, 0),
        (1, 10, 8, 2, 10, 8, 0, 0),
        (1, 15, 13, 2, 12, 10, 3, 0),
        (16, 15, 0, 0, 12, 10, 0, 0),
    ];
    let out = run(UNFILTERED, &rows);
    assert_eq!(counts(&out), [0, 0, 0, 2, 2, 5]);
    assert!(out.iter().all(|r| r.exact), "{out:?}");
}

/// nats-server 2.12.8, 3 nodes, an R3 stream with message 3 deleted and an
/// R3 consumer with ack policy none, polled on its leader right after each
/// delivery. At the third poll the consumer had delivered 112 but
/// `delivered` still said 111 (the committed position) while `num_pending`
/// counted from 112: `L - D - pending` = 1 looks like an interior delete
/// above `D`, but the only one (3) lies below. Nothing was removed unseen.
#[test]
fn a_delivery_not_yet_committed_is_not_an_interior_delete() {
    let rows = [
        (1, 300, 299, 1, 110, 109, 190, 0),
        (1, 300, 299, 1, 111, 110, 189, 0),
        (1, 300, 299, 1, 111, 110, 188, 0),
        (1, 300, 299, 1, 112, 111, 188, 0),
    ];
    for no_redelivery in [false, true] {
        let kind = CountingKind {
            filtered: false,
            no_redelivery,
        };
        let out = run(kind, &rows);
        assert_eq!(counts(&out), [0, 0, 0, 0], "{kind:?}");
    }
}

#[test]
fn an_interior_delete_ahead_of_a_resting_consumer_is_counted_at_the_next_poll() {
    // Stored 1..20, the consumer at 5; 12 deleted; a stable poll confirms
    // it; then the consumer passes it (13..20 delivered).
    let rows = [
        (1, 20, 20, 0, 5, 5, 15, 0),
        (1, 20, 19, 1, 5, 5, 14, 0),
        (1, 20, 19, 1, 5, 5, 14, 0),
        (1, 20, 19, 1, 20, 19, 0, 0),
    ];
    let kind = CountingKind {
        filtered: false,
        no_redelivery: true,
    };
    let out = run(kind, &rows);
    assert_eq!(counts(&out), [0, 0, 1, 1]);
    // Passed before a second poll saw it: counted when passed.
    let out = run(kind, &[rows[0], rows[1], rows[3]]);
    assert_eq!(counts(&out), [0, 0, 1]);
}

/// nats-server 2.10.26, 3 nodes, R3 stream keeping 10 and an R3 consumer
/// with explicit acks at 33. While a server was down 41..45 were published
/// and 44 deleted, and the new leader's `num_pending` came out 8 where 9
/// were stored above 33 (and stayed one short). Later 46..55 were
/// published, 46 and 47 delivered, then 47 deleted: `L - D - pending` = 1
/// looked like an interior delete above 47, but the only one was 47 itself.
/// Removed unseen since the first poll: 34 and 44, then nothing; and once
/// the server's count is seen right again, 50 deleted unread counts.
#[test]
fn a_num_pending_seen_short_is_not_taken_for_interior_deletes() {
    let rows = [
        (31, 40, 8, 2, 33, 12, 6, 0),
        (36, 45, 9, 1, 33, 12, 8, 0),
        (36, 45, 9, 1, 33, 12, 8, 0),
        (36, 45, 9, 1, 45, 21, 0, 0),
        (36, 45, 9, 1, 45, 21, 0, 0),
        (46, 55, 9, 1, 47, 23, 7, 0),
        (46, 55, 9, 1, 47, 23, 7, 0),
        (46, 55, 9, 1, 47, 23, 7, 0),
        (46, 55, 9, 1, 47, 23, 8, 0),
        (46, 55, 9, 1, 47, 23, 8, 0),
        (46, 55, 8, 2, 47, 23, 7, 0),
        (46, 55, 8, 2, 47, 23, 7, 0),
    ];
    let out = run(UNFILTERED, &rows);
    assert_eq!(counts(&out), [0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3]);
}

/// One server, explicit acks, 10 stored and 3 read; 6 and 8 deleted. On
/// nats-server 2.11.11 a rule that took one reply's shortfall counted 1 of
/// these 2 (a CI run of `deleted_and_purged_messages_are_counted`), which
/// takes a reply with `num_pending` one short, as here (4 where 5 were
/// stored above 3) before the next says 5: a count a moment off, not a
/// shortfall. Both deletes count, a poll after they were seen.
#[test]
fn a_num_pending_off_in_one_reply_is_not_a_shortfall() {
    let rows = [
        (1, 10, 10, 0, 3, 3, 7, 0),
        (1, 10, 10, 0, 3, 3, 7, 0),
        (1, 10, 8, 2, 3, 3, 4, 0),
        (1, 10, 8, 2, 3, 3, 5, 0),
        (1, 10, 8, 2, 3, 3, 5, 0),
    ];
    let out = run(UNFILTERED, &rows);
    assert_eq!(counts(&out), [0, 0, 0, 2, 2]);
}

/// A consumer at rest at 10 on a stream that keeps receiving, its server's
/// `num_pending` one short (nothing deleted, `L - D - pending` = 1 at two
/// polls); then 5, below it, deleted: nothing was removed unseen.
#[test]
fn a_shortfall_shows_on_a_busy_stream_too() {
    let rows = [
        (1, 20, 20, 0, 10, 10, 9, 0),
        (1, 21, 21, 0, 10, 10, 10, 0),
        (1, 22, 21, 1, 10, 10, 11, 0),
        (1, 23, 22, 1, 10, 10, 12, 0),
    ];
    let out = run(UNFILTERED, &rows);
    assert_eq!(counts(&out), [0, 0, 0, 0]);
}

/// A consumer missing from polls its stream was in (a leader election)
/// counts as if those polls had not happened: the stream's figures at its
/// last poll are kept for it.
#[test]
fn a_consumer_missing_from_polls_counts_as_if_they_had_not_happened() {
    let seen = [
        true, true, false, false, true, false, true, true, true, true,
    ];
    let rows: Vec<Row> = AGE_OUT.to_vec();
    let skipped: Vec<Row> = rows
        .iter()
        .zip(seen)
        .filter_map(|(&r, seen)| seen.then_some(r))
        .collect();
    let missing = run_seen(UNFILTERED, &rows, &seen);
    assert_eq!(missing, run(UNFILTERED, &skipped));
    assert_eq!(counts(&missing).last(), Some(&82));
}

/// Two histories with the same polls (METRICS.md): explicit acks, a stream
/// keeping 10 messages. In one, message 5 was redelivered and 6 to 10 aged
/// out unseen (5 removed); in the other 6 was delivered first and 7 to 10
/// aged out (4). The counter takes the fewest and says it is not exact.
#[test]
fn a_redelivery_and_a_skip_look_alike() {
    let rows = [(1, 10, 10, 0, 5, 5, 5, 0), (11, 20, 10, 0, 20, 16, 0, 0)];
    let out = run(UNFILTERED, &rows);
    assert_eq!(counts(&out), [0, 4]);
    assert!(!out[1].exact);
}

/// `could_count` is false only where the count cannot grow: over random
/// walks of positions (consistent or not), every poll that made the count
/// grow was one it said could. The configuration on demand relies on it to
/// read a consumer's filter before any such poll.
#[test]
fn could_count_holds_whenever_the_count_grows() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut grew, mut said) = (0, 0);
    for walk in 0..4_000 {
        let kind = CountingKind {
            filtered: walk % 2 == 1,
            no_redelivery: walk % 4 >= 2,
        };
        let mut row: Row = (1, 10, 10, 0, 2, 2, 8, 0);
        let mut rows = vec![row];
        for _ in 0..8 {
            let (f, l, m, x, d, c, p, r) = row;
            let l = l + next(6);
            let f = (f + next(4)).min(l + 1);
            let d = (d + next(5)).min(l);
            let c = c + next(5);
            let (m, x) = (m.min(l + 1 - f) + next(3), x + next(2) * next(2));
            let (p, r) = (p / 2 + next(12), r + next(3) - next(2).min(r));
            row = (f, l, m, x, d, c, p, r);
            rows.push(row);
        }
        let out = counts(&run(kind, &rows));
        for i in 1..rows.len() {
            let could = super::could_count(split(rows[i - 1]), split(rows[i]), kind);
            if out[i] > out[i - 1] {
                grew += 1;
                assert!(
                    could,
                    "{kind:?}: {:?} -> {:?}, {out:?}",
                    rows[i - 1],
                    rows[i]
                );
            }
            said += u32::from(could);
        }
    }
    // Not trivially true: the walks make the count grow, and the check is
    // not always yes.
    assert!(grew > 1_000, "{grew} polls grew");
    assert!(said < 32_000, "said yes {said} times of 32000");
}

/// A stream whose first sequence jumps to `u64::MAX`: every message above
/// the consumer's is gone, more than the running sum holds; the count is
/// held at `i64::MAX` (unfiltered, it was 0: the open count, taken as an
/// `i64`, was negative; filtered, the estimate). Then figures that overflowed a sum (`first - 1 - D` plus
/// `u64::MAX` interior deletes, `last - last' + messages'`): the count
/// stays where it is held.
#[test]
fn figures_past_what_the_count_holds_are_held_not_wrapped() {
    let max = u64::MAX;
    let rows: &[Row] = &[
        (1, 10, 10, 0, 2, 2, 8, 0),
        (max, max, 1, 0, 2, 2, 0, 0),
        (max, max, max, max, max - 1, 2, max, 0),
        (max, max, max, max, max, 3, 0, max),
    ];
    let held = i64::MAX as u64;
    let filtered = CountingKind {
        filtered: true,
        no_redelivery: true,
    };
    for kind in [UNFILTERED, filtered] {
        assert_eq!(counts(&run(kind, rows)), [0, held, held, held], "{kind:?}");
    }
}

/// A filtered consumer reset forward (2.14+) while the stream's limit
/// removed 5 messages: its `num_pending` fell by 19, the consumer
/// delivered nothing. At most the 5 the stream removed are counted (19
/// before: the fall of `num_pending` was taken for removals).
#[test]
fn a_filtered_consumer_reset_forward_counts_at_most_what_the_stream_removed() {
    let filtered = CountingKind {
        filtered: true,
        no_redelivery: false,
    };
    let rows: &[Row] = &[(1, 25, 25, 0, 0, 0, 25, 0), (6, 35, 30, 0, 29, 0, 6, 0)];
    assert_eq!(counts(&run(filtered, rows)), [0, 5]);
}
