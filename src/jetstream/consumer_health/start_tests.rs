//! The status at start-up: given as soon as the snapshots held decide it.

use super::tests::{at, six, status_of, W};
use super::*;

/// The status after the snapshots `samples` (2 s apart from t=0), all
/// taken within the first window after the exporter started.
fn at_start(samples: &[(u64, u64, u64, u64)]) -> Status {
    let samples: Vec<Sample> = samples
        .iter()
        .enumerate()
        .map(|(i, &(d, a, p, ap))| at(2.0 * i as f64, d, a, p, ap))
        .collect();
    assert!(samples.last().unwrap().time < W);
    status_of(&samples)
}

#[test]
fn at_start_nothing_waiting_is_ok_at_once() {
    // Nothing pending or unacknowledged at one snapshot: the consumer
    // cannot be stopped, stalled or lagging over any window holding it.
    assert_eq!(at_start(&[(7, 7, 0, 0)]), Status::Ok);
    assert_eq!(at_start(&[(7, 5, 3, 2), (7, 7, 0, 0)]), Status::Ok);
    // Something waits at every snapshot held: not decided.
    assert_eq!(at_start(&[(7, 5, 3, 2)]), Status::Unknown);
    assert_eq!(at_start(&[(7, 5, 3, 2), (7, 5, 3, 2)]), Status::Unknown);
}

#[test]
fn at_start_a_step_back_is_rewound_at_once() {
    assert_eq!(at_start(&[(9, 9, 0, 0), (4, 4, 0, 0)]), Status::Rewound);
    assert_eq!(at_start(&[(9, 6, 0, 3), (9, 5, 0, 4)]), Status::Rewound);
    // It stays rewound for a window after the step, then goes.
    let mut s = six(|i| (10 + i, 10 + i, 0, 0));
    s[1].delivered = 1;
    assert_eq!(status_of(&s[..2]), Status::Rewound);
    assert_eq!(status_of(&s[..5]), Status::Rewound);
}

#[test]
fn at_start_progress_on_every_front_is_ok() {
    // Delivering (not stopped), the floor moving (not stalled), the backlog
    // falling (not lagging): ok after two snapshots.
    assert_eq!(at_start(&[(10, 5, 20, 5), (14, 8, 16, 6)]), Status::Ok);
    // Each fact alone rules out only its own status.
    let not_lagging_only = [(10, 5, 20, 5), (10, 5, 19, 5)];
    assert_eq!(at_start(&not_lagging_only), Status::Unknown);
    // A backlog that fell and the floor that moved, nothing delivered: may
    // still be stopped (a pull may never have waited).
    assert_eq!(at_start(&[(10, 5, 20, 5), (10, 6, 19, 4)]), Status::Unknown);
    // A pull request waiting rules out stopped; the floor moving, stalled;
    // the backlog empty once, lagging.
    let mut waited = [at(0.0, 10, 5, 20, 5), at(2.0, 10, 6, 0, 4)];
    waited[1].waiting = 1;
    assert_eq!(status_of(&waited), Status::Ok);
}

#[test]
fn at_start_stopped_stalled_and_lagging_wait_for_a_whole_window() {
    // Each looks like its status from the first snapshot, but the unseen
    // start of the window could still rule it out.
    let stopped = six(|_| (5, 2, 4, 3));
    let stalled = six(|i| (10 + i, 2, 5 + i, 3));
    let lagging = six(|i| (10 + i, 10 + i, 5 + i, 0));
    for (samples, full) in [
        (stopped, Status::Stopped),
        (stalled, Status::Stalled),
        (lagging, Status::Lagging),
    ] {
        for n in 1..samples.len() {
            assert_eq!(status_of(&samples[..n]), Status::Unknown, "{full:?} {n}");
        }
        assert_eq!(status_of(&samples), full);
    }
}
