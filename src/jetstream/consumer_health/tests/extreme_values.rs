//! Hostile and inconsistent figures through the whole of consumer health:
//! the status, the ages, the removal count and its check, the forecast.
//! Random walks over the extremes of `u64` and `i64` (0, 1, `u64::MAX`,
//! either side of `i64::MAX`, 2^53, ...) mixed with small values, in no
//! consistent order: no panic (a debug build panics on an arithmetic
//! overflow), and nothing exported that a wrapped number would give (a
//! count that goes down, an age or a forecast below 0 or not finite).

use super::super::*;
use crate::jetstream::removed_before_delivery::could_count;
use crate::sources::jsz::{ConsumerConfig, StreamConfig, StreamDetail};

/// A xorshift generator, so that a failure is replayed by its walk number.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// An extreme value half the time, a small one otherwise.
    fn figure(&mut self) -> u64 {
        const EXTREMES: [u64; 10] = [
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
        ];
        if self.below(2) == 0 {
            EXTREMES[self.below(EXTREMES.len() as u64) as usize]
        } else {
            self.below(100)
        }
    }

    /// A limit as a server sends it: negative for none, or any `i64`.
    fn limit(&mut self) -> Option<i64> {
        match self.below(6) {
            0 => None,
            1 => Some(-1),
            2 => Some(i64::MAX),
            3 => Some(i64::MIN),
            _ => Some(self.figure() as i64),
        }
    }
}

fn stream(rng: &mut Rng, time: f64) -> StreamDetail {
    let mut s = StreamDetail {
        name: "S".into(),
        config: Some(StreamConfig {
            max_msgs: rng.limit(),
            max_bytes: rng.limit(),
            max_age: rng.limit(),
            discard_new: rng.below(2) == 0,
            metadata: None,
        }),
        ..StreamDetail::default()
    };
    let st = &mut s.state;
    (st.first_seq, st.last_seq) = (rng.figure(), rng.figure());
    (st.messages, st.bytes, st.num_deleted) = (rng.figure(), rng.figure(), rng.figure());
    st.first_ts = Some(time - rng.below(50) as f64);
    st.last_ts = Some(time - rng.below(5) as f64);
    s
}

fn consumer(rng: &mut Rng, name: &str) -> ConsumerInfo {
    let mut c = ConsumerInfo {
        name: name.into(),
        num_pending: rng.figure(),
        num_ack_pending: rng.figure(),
        num_redelivered: rng.figure(),
        num_waiting: rng.figure(),
        ..ConsumerInfo::default()
    };
    c.delivered.stream_seq = rng.figure();
    c.delivered.consumer_seq = rng.figure();
    c.ack_floor.stream_seq = rng.figure();
    c.config = Some(std::sync::Arc::new(ConsumerConfig {
        filter_subject: if rng.below(2) == 0 { "" } else { "S.a" }.into(),
        acks_none: rng.below(3) == 0,
        max_deliver: [None, Some(1), Some(-1)][rng.below(3) as usize],
        ..ConsumerConfig::default()
    }));
    c
}

/// A finite value at or above 0, when there is one.
fn sane(what: &str, value: Option<f64>, walk: u64) {
    if let Some(v) = value {
        assert!(v.is_finite() && v >= 0.0, "walk {walk}: {what} {v}");
    }
}

#[test]
fn extreme_and_inconsistent_figures_never_panic_nor_wrap() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for walk in 0..3_000 {
        let mut h = ConsumerHealth::new(std::time::Duration::from_secs(10));
        let mut shown = [0u64; 2];
        let mut before: Option<Vec<_>> = None;
        for poll in 0..8 {
            let now = 1_000_000.0 + 2.0 * f64::from(poll);
            let s = stream(&mut rng, now);
            let cs = [consumer(&mut rng, "a"), consumer(&mut rng, "b")];
            // A server's clock: the exporter's, an hour behind, or none.
            let clock = [Some(now), Some(now - 3600.0), None][rng.below(3) as usize];
            let streams = [("A", &s)];
            let rows: Vec<_> = cs.iter().map(|c| ("A", "S", c, clock)).collect();
            h.candidates((&streams, &rows), now, 5);
            let judged = h.update((&streams, &rows), now, &Replies::new());
            for (i, row) in judged.iter().enumerate() {
                let removed = row.removed().messages;
                assert!(removed >= shown[i], "walk {walk}: {removed} < {}", shown[i]);
                shown[i] = removed;
                sane("delivery lag", row.delivery_lag().map(|a| a.seconds), walk);
                sane(
                    "unacked age",
                    row.oldest_unacked_age().map(|a| a.seconds),
                    walk,
                );
                sane("forecast", row.removal_forecast(), walk);
            }
            // The check the configuration on demand asks, on the same figures.
            let now_figures: Vec<_> = cs
                .iter()
                .map(|c| (StreamAt::of(&s.state), ConsumerAt::of(c)))
                .collect();
            if let Some(before) = &before {
                for (b, (n, c)) in before.iter().zip(now_figures.iter().zip(&cs)) {
                    could_count(*b, *n, CountingKind::of(c.config.as_deref()));
                }
            }
            before = Some(now_figures);
        }
    }
}
