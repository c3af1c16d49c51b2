//! Property tests (proptest) of the arithmetic on figures servers send:
//! the removal count and its check, consumer health (ages, forecast),
//! ephemerals folded per stream, and lost-data totals. Inputs mix the
//! extremes of `u64` with small and arbitrary values, consistent or not.
//! Each property: no panic (a debug build panics on an overflow), a counter
//! never falls, and a count never passes what there was to count. A failure
//! is shrunk to a small case and kept by proptest as a regression seed.

use std::sync::Arc;

use proptest::prelude::*;

use super::cardinality::fold::{EphemeralFolds, FoldedRow};
use super::consumer_health::{ConsumerHealth, Replies};
use super::removed_before_delivery::{
    could_count, ConsumerAt, CountingKind, RemovedTracker, StreamAt, StreamPolls,
};
use super::stream_lost::{Found, LostRecord};
use crate::sources::jsz::{ConsumerConfig, ConsumerInfo, StreamConfig, StreamDetail};

/// Enough cases to find the overflows the walks of `extreme_values` found,
/// few enough for the normal suite (under a second each in a debug build).
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

/// A figure as a server may send it: an extreme of `u64` or `i64`, a small
/// value, or anything.
fn figure() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => prop::sample::select(vec![
            0,
            1,
            2,
            u64::MAX,
            u64::MAX - 1,
            u64::MAX / 2,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
            1 << 53,
            (1 << 32) - 1,
        ]),
        4 => 0u64..100,
        2 => any::<u64>(),
    ]
}

/// A limit as a server sends it: none, negative, or any `i64`.
fn limit() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        Just(None),
        Just(Some(-1)),
        Just(Some(i64::MAX)),
        Just(Some(i64::MIN)),
        figure().prop_map(|v| Some(v as i64)),
    ]
}

fn kind() -> impl Strategy<Value = CountingKind> {
    (any::<bool>(), any::<bool>()).prop_map(|(filtered, no_redelivery)| CountingKind {
        filtered,
        no_redelivery,
    })
}

fn stream_at() -> impl Strategy<Value = StreamAt> {
    (figure(), figure(), figure(), figure()).prop_map(|(first_seq, last_seq, messages, deleted)| {
        StreamAt {
            first_seq,
            last_seq,
            messages,
            deleted,
        }
    })
}

fn consumer_at() -> impl Strategy<Value = ConsumerAt> {
    (figure(), figure(), figure(), figure()).prop_map(
        |(delivered, deliveries, pending, redelivered)| ConsumerAt {
            delivered,
            deliveries,
            pending,
            redelivered,
        },
    )
}

/// One consistent poll: the stream's window `first..=last`, what it holds,
/// and the consumer's position in it, from `base` on (near `u64::MAX` the
/// sequences themselves are extreme).
#[derive(Debug, Clone, Copy)]
struct Step {
    grow: u64,
    drop_front: u64,
    read: u64,
    deliveries: u64,
    interior: u64,
}

fn step() -> impl Strategy<Value = Step> {
    (0u64..20, 0u64..20, 0u64..20, 0u64..30, 0u64..3).prop_map(
        |(grow, drop_front, read, deliveries, interior)| Step {
            grow,
            drop_front,
            read,
            deliveries,
            interior,
        },
    )
}

/// The polls of a consistent walk of `steps` from sequence `base`.
fn consistent(base: u64, steps: &[Step]) -> Vec<(StreamAt, ConsumerAt)> {
    let (mut first, mut last, mut delivered, mut deliveries) = (base, base - 1, base - 1, 0u64);
    let mut out = Vec::new();
    for s in steps {
        last += s.grow;
        first = (first + s.drop_front).min(last + 1);
        delivered = (delivered + s.read).min(last);
        deliveries += s.deliveries.max(s.read);
        let held = last + 1 - first;
        let deleted = s.interior.min(held.saturating_sub(2));
        let stream = StreamAt {
            first_seq: first,
            last_seq: last,
            messages: held - deleted,
            deleted,
        };
        let consumer = ConsumerAt {
            delivered,
            deliveries,
            pending: last - delivered.max(first - 1),
            redelivered: 0,
        };
        out.push((stream, consumer));
    }
    out
}

/// Runs a removal tracker over `polls` (the consumer seen at every poll);
/// the counts after each.
fn removal_counts(polls: &[(StreamAt, ConsumerAt)], kind: CountingKind) -> Vec<u64> {
    let (mut stream, mut tracker, mut last) =
        (StreamPolls::default(), RemovedTracker::default(), (0, 0));
    let mut out = Vec::new();
    for &(at, consumer) in polls {
        stream.record(at);
        out.push(tracker.record(&stream, last, consumer, kind).messages);
        last = (consumer.delivered, consumer.pending);
    }
    out
}

fn never_falls(counts: &[u64]) -> Result<(), TestCaseError> {
    for w in counts.windows(2) {
        prop_assert!(w[1] >= w[0], "fell: {counts:?}");
    }
    Ok(())
}

fn stream_detail(
    first_seq: u64,
    last_seq: u64,
    messages: u64,
    limits: (Option<i64>, Option<i64>, Option<i64>, bool),
    now: f64,
) -> StreamDetail {
    let (max_msgs, max_bytes, max_age, discard_new) = limits;
    let mut s = StreamDetail {
        name: "S".into(),
        config: Some(StreamConfig {
            max_msgs,
            max_bytes,
            max_age,
            discard_new,
            metadata: None,
        }),
        ..StreamDetail::default()
    };
    let st = &mut s.state;
    (st.first_seq, st.last_seq, st.messages) = (first_seq, last_seq, messages);
    st.bytes = messages.saturating_mul(100);
    st.first_ts = Some(now - 30.0);
    st.last_ts = Some(now - 1.0);
    s
}

fn consumer_info(name: &str, at: ConsumerAt, ack_floor: u64, filtered: bool) -> ConsumerInfo {
    let mut c = ConsumerInfo {
        name: name.into(),
        num_pending: at.pending,
        num_ack_pending: at.delivered.saturating_sub(ack_floor),
        num_redelivered: at.redelivered,
        ..ConsumerInfo::default()
    };
    c.delivered.stream_seq = at.delivered;
    c.delivered.consumer_seq = at.deliveries;
    c.ack_floor.stream_seq = ack_floor;
    c.config = Some(Arc::new(ConsumerConfig {
        filter_subject: if filtered { "S.a" } else { "" }.into(),
        ..ConsumerConfig::default()
    }));
    c
}

proptest! {
    #![proptest_config(config())]

    /// Any figures, in any order: the count never falls, and whenever it
    /// grows `could_count` said it could (the configuration on demand reads
    /// a consumer's filter before such a poll, relying on it).
    #[test]
    fn removal_count_on_any_figures(
        polls in prop::collection::vec((stream_at(), consumer_at()), 1..10),
        kind in kind(),
    ) {
        let counts = removal_counts(&polls, kind);
        never_falls(&counts)?;
        for i in 1..polls.len() {
            // No panic on any pair; its answer is checked where it matters.
            let could = could_count(polls[i - 1], polls[i], kind);
            if counts[i] > counts[i - 1] {
                prop_assert!(could, "grew without could_count: {:?} -> {:?}", polls[i - 1], polls[i]);
            }
        }
    }

    /// A consistent stream and consumer, from sequence 1 or from near
    /// `u64::MAX`: the count never falls and never passes the messages the
    /// stream ever held (`last_seq - base + 1`).
    #[test]
    fn removal_count_never_passes_what_existed(
        base in prop_oneof![Just(1u64), Just(u64::MAX - 1_000), 1u64..1_000_000],
        steps in prop::collection::vec(step(), 1..12),
        kind in kind(),
    ) {
        let polls = consistent(base, &steps);
        let counts = removal_counts(&polls, kind);
        never_falls(&counts)?;
        let (last, _) = polls[polls.len() - 1];
        let existed = (last.last_seq + 1) - base;
        prop_assert!(counts[counts.len() - 1] <= existed, "{counts:?} of {existed}: {polls:?}");
    }

    /// Consumer health on any figures and limits, over a few polls: the
    /// removal count shown never falls, ages and forecasts are finite and
    /// at or above 0.
    #[test]
    fn consumer_health_on_any_figures(
        polls in prop::collection::vec(
            (
                stream_at(),
                (limit(), limit(), limit(), any::<bool>()),
                consumer_at(),
                figure(),
                any::<bool>(),
                0usize..3,
            ),
            1..8,
        ),
    ) {
        let mut h = ConsumerHealth::new(std::time::Duration::from_secs(10));
        let mut shown = 0;
        for (i, (s, limits, c, ack_floor, filtered, clock)) in polls.into_iter().enumerate() {
            let now = 1_000_000.0 + 2.0 * i as f64;
            let stream = stream_detail(s.first_seq, s.last_seq, s.messages, limits, now);
            let consumer = consumer_info("c", c, ack_floor, filtered);
            let clock = [Some(now), Some(now - 3600.0), None][clock];
            let streams = [("A", &stream)];
            let rows = [("A", "S", &consumer, clock)];
            h.candidates((&streams, &rows), now, 5);
            for row in h.update((&streams, &rows), now, &Replies::new()) {
                let removed = row.removed().messages;
                prop_assert!(removed >= shown, "fell: {removed} < {shown}");
                shown = removed;
                for (what, v) in [
                    ("delivery lag", row.delivery_lag().map(|a| a.seconds)),
                    ("unacked age", row.oldest_unacked_age().map(|a| a.seconds)),
                    ("forecast", row.removal_forecast()),
                ] {
                    if let Some(v) = v {
                        prop_assert!(v.is_finite() && v >= 0.0, "{what} {v}");
                    }
                }
            }
        }
    }

    /// Ephemerals of one stream coming, going and coming back with any
    /// delivery counts: the folded deliveries never fall and hold at least
    /// what each present ephemeral delivered.
    #[test]
    fn folded_deliveries_never_fall(
        polls in prop::collection::vec(
            prop::collection::vec((0usize..4, figure()), 0..4),
            1..10,
        ),
    ) {
        let mut folds = EphemeralFolds::default();
        let stream = StreamDetail { name: "S".into(), ..StreamDetail::default() };
        let mut last = 0;
        for poll in polls {
            let mut consumers: Vec<ConsumerInfo> = Vec::new();
            for (name, seq) in poll {
                let name = format!("e{name}");
                if consumers.iter().any(|c| *c.name == *name) {
                    continue;
                }
                let mut c = ConsumerInfo { name: name.into(), ..ConsumerInfo::default() };
                c.delivered.consumer_seq = seq;
                c.config = Some(Arc::new(ConsumerConfig::default()));
                consumers.push(c);
            }
            let rows: Vec<_> = consumers.iter().map(|c| ("A", "S", c, None)).collect();
            let ephemerals: Vec<_> = rows.iter().collect();
            let out: Vec<FoldedRow> = folds.update(&[("A", &stream)], &ephemerals);
            let deliveries = out.first().map_or(last, |r| r.deliveries);
            prop_assert!(deliveries >= last, "fell: {deliveries} < {last}");
            for c in &consumers {
                prop_assert!(deliveries >= c.delivered.consumer_seq);
            }
            last = deliveries;
        }
    }

    /// Lost-data records of any sequences, bytes, first sequence and
    /// incarnation: the totals never fall, and the messages counted never
    /// pass the sequences reported.
    #[test]
    fn lost_totals_never_fall(
        records in prop::collection::vec(
            (prop::collection::vec(figure(), 0..6), figure(), figure(), any::<bool>()),
            1..10,
        ),
    ) {
        let mut found = Found::default();
        let (mut last, mut reported) = ((0, 0), 0u64);
        for (mut sequences, bytes, first_seq, again) in records {
            sequences.sort_unstable();
            sequences.dedup();
            reported += sequences.len() as u64;
            let record = LostRecord {
                sequences,
                bytes,
                first_seq,
                created: if again { "2" } else { "1" }.into(),
            };
            found.absorb(&record);
            let now = found.counted();
            prop_assert!(now.0 >= last.0 && now.1 >= last.1, "fell: {now:?} < {last:?}");
            prop_assert!(now.0 <= reported, "{now:?} of {reported} reported");
            last = now;
        }
    }
}
