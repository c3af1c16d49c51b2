//! The window against the rules as METRICS.md writes them, on random walks.

use super::super::*;
use super::{at, W};

/// The rules as METRICS.md writes them, over every snapshot held (nothing
/// merged): the window's start is the newest snapshot at least a window
/// old, and start and end are compared as values. Before there is one, the
/// snapshots held decide what they can: a step back is `rewound`; a status
/// that a held snapshot or step rules out can never be the window's, and
/// with `stopped`, `stalled` and `lagging` all ruled out the status is `ok`.
fn status_by_the_letter(samples: &[Sample], now: f64, window: f64) -> Status {
    let full = samples.iter().rposition(|s| s.time <= now - window);
    let start = full.unwrap_or(0);
    let (first, end) = (&samples[start], samples.last().unwrap());
    let span = &samples[start..];
    let every = |f: &dyn Fn(&Sample) -> bool| span.iter().all(f);
    let steps = || span.windows(2);
    if steps().any(|w| w[1].delivered < w[0].delivered || w[1].ack_floor < w[0].ack_floor) {
        return Status::Rewound;
    }
    let same_delivery = first.delivered == end.delivered
        && first.delivered_active.to_bits() == end.delivered_active.to_bits();
    let stopped =
        same_delivery && every(&|s| s.pending + s.ack_pending > 0) && every(&|s| s.waiting == 0);
    let stalled = first.ack_floor == end.ack_floor && every(&|s| s.ack_pending > 0);
    let never_fell = steps().all(|w| w[1].pending >= w[0].pending);
    let lagging = every(&|s| s.pending > 0) && never_fell;
    if full.is_none() {
        // Not ruled out by what is held: the unseen start may decide it.
        return if stopped || stalled || lagging {
            Status::Unknown
        } else {
            Status::Ok
        };
    }
    if stopped {
        return Status::Stopped;
    }
    if stalled {
        return Status::Stalled;
    }
    if lagging && end.pending > first.pending {
        return Status::Lagging;
    }
    Status::Ok
}

#[test]
fn the_window_agrees_with_the_rules_applied_to_every_snapshot() {
    // Polls at least a slice apart (nothing is merged), in random walks that
    // reach every status; each status is checked after every poll. The
    // window keeps times to about 1e-7 of its span: the steps are multiples
    // of pi microseconds, so no snapshot lands exactly a window before
    // another, where that could tip the choice of the start.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3000 {
        let mut w = ConsumerWindow::default();
        let mut samples = Vec::new();
        let mut s = at(1_700_000_000.25, rnd(3), 0, rnd(3), rnd(2));
        for _ in 0..=rnd(60) {
            s.time += W / 8.0 + (1 + rnd(3_000_000)) as f64 * 1e-6 * std::f64::consts::PI;
            match rnd(12) {
                0 => s.delivered += 1,
                1 => s.delivered_active = s.time,
                2 => s.ack_floor = (s.ack_floor + 1).min(s.delivered),
                3 => s.pending = s.pending.saturating_sub(1),
                4 | 5 => s.pending += 1,
                6 => s.ack_pending = rnd(2),
                7 => s.waiting = u64::from(rnd(6) == 0),
                8 if rnd(10) == 0 => s.delivered = s.delivered.saturating_sub(1),
                _ => {}
            }
            samples.push(s);
            w.record(s, W);
            let expected = status_by_the_letter(&samples, s.time, W);
            assert_eq!(w.status(s.time, W), expected, "{samples:?}");
            seen.insert(format!("{expected:?}"));
        }
    }
    assert_eq!(
        seen.len(),
        6,
        "every status but paused was reached: {seen:?}"
    );
}
