//! The status rules, their order, the window and forgetting, and exact ages.

use super::*;
use crate::sources::jsz::{ConsumerConfig, ConsumerInfo, StreamDetail};

pub(super) const W: f64 = 10.0;

pub(super) fn at(
    time: f64,
    delivered: u64,
    ack_floor: u64,
    pending: u64,
    ack_pending: u64,
) -> Sample {
    Sample {
        time,
        delivered,
        delivered_active: if delivered == 0 {
            f64::NAN
        } else {
            delivered as f64
        },
        ack_floor,
        pending,
        ack_pending,
        waiting: 0,
    }
}

/// The status after recording `samples` (one every 2 s from t=0).
pub(super) fn status_of(samples: &[Sample]) -> Status {
    let mut w = ConsumerWindow::default();
    for s in samples {
        w.record(*s, W);
    }
    w.status(samples.last().unwrap().time, W)
}

/// Six snapshots 2 s apart (t = 0..10): the window is full at the last.
pub(super) fn six(f: impl Fn(u64) -> (u64, u64, u64, u64)) -> Vec<Sample> {
    (0..6)
        .map(|i| {
            let (d, a, p, ap) = f(i);
            at(2.0 * i as f64, d, a, p, ap)
        })
        .collect()
}

#[test]
fn unknown_while_the_snapshots_held_do_not_decide() {
    // A growing backlog may be lagging: only a whole window can say.
    let lagging = six(|i| (i, i, 10 + i, 0));
    assert_eq!(status_of(&lagging[..5]), Status::Unknown);
    assert_eq!(status_of(&lagging), Status::Lagging);
    assert_eq!(status_of(&lagging[..1]), Status::Unknown);
}

#[test]
fn each_rule_and_the_order_they_are_tried_in() {
    // Rewound beats stopped: positions unchanged but for one step back.
    let mut back = six(|_| (5, 5, 3, 0));
    back[3].ack_floor = 4;
    assert_eq!(status_of(&back), Status::Rewound);
    let mut back = six(|i| (5 + i, 5 + i, 3, 1));
    back[2].delivered = 1;
    assert_eq!(status_of(&back), Status::Rewound);

    // Stopped: nothing delivered, messages wait, no pull waited.
    let stopped = six(|_| (5, 2, 4, 3));
    assert_eq!(status_of(&stopped), Status::Stopped);
    // A pull request that waited once: not stopped (the floor stuck: stalled).
    let mut waited = stopped.clone();
    waited[4].waiting = 1;
    assert_eq!(status_of(&waited), Status::Stalled);
    // Nothing waiting at one snapshot: not stopped (nor stalled, nor lagging).
    let mut idle = stopped.clone();
    idle[2].pending = 0;
    idle[2].ack_pending = 0;
    assert_eq!(status_of(&idle), Status::Ok);
    // Delivered at the same sequence but later (a redelivery): not stopped.
    let mut redelivered = stopped.clone();
    redelivered[5].delivered_active += 1.0;
    assert_eq!(status_of(&redelivered), Status::Stalled);

    // Stalled beats lagging: delivering, growing backlog, floor stuck.
    let stalled = six(|i| (10 + i, 2, 5 + i, 3));
    assert_eq!(status_of(&stalled), Status::Stalled);
    let mut acked_none_pending = stalled.clone();
    acked_none_pending[1].ack_pending = 0;
    assert_eq!(status_of(&acked_none_pending), Status::Lagging);

    // Lagging: backlog above 0 throughout, never fell, grew.
    let lagging = six(|i| (10 + i, 10 + i, 5 + i, 0));
    assert_eq!(status_of(&lagging), Status::Lagging);
    let mut fell = lagging.clone();
    fell[3].pending = fell[2].pending - 1;
    assert_eq!(status_of(&fell), Status::Ok);
    let mut empty_once = lagging.clone();
    empty_once[1].pending = 0;
    assert_eq!(status_of(&empty_once), Status::Ok);
    let flat = six(|i| (10 + i, 10 + i, 5, 0));
    assert_eq!(status_of(&flat), Status::Ok);
}

#[test]
fn snapshots_older_than_the_window_do_not_count() {
    // Went back at t=2, long before the window [t=4, t=14] of the last poll.
    let mut s = six(|i| (10 + i, 10 + i, 0, 0));
    s[1].delivered = 1;
    s.extend((6..8).map(|i| at(2.0 * i as f64, 10 + i, 10 + i, 0, 0)));
    assert_eq!(status_of(&s[..6]), Status::Rewound);
    assert_eq!(status_of(&s), Status::Ok);
}

#[test]
fn frequent_polls_are_merged_without_losing_what_the_rules_need() {
    let mut w = ConsumerWindow::default();
    // 1,000 polls 0.1 s apart: a growing backlog...
    for i in 0..1000u64 {
        let mut s = at(i as f64 / 10.0, i, i, 100 + i, 0);
        // ...that was empty once, inside the window, between kept entries.
        if i == 995 {
            s.pending = 0;
        }
        w.record(s, W);
        assert!(w.len() <= window::MAX_ENTRIES, "{} entries", w.len());
    }
    assert_eq!(w.status(99.9, W), Status::Ok);
    // The same without the empty moment: lagging.
    let mut w = ConsumerWindow::default();
    for i in 0..1000u64 {
        w.record(at(i as f64 / 10.0, i, i, 100 + i, 0), W);
    }
    assert_eq!(w.status(99.9, W), Status::Lagging);
    // Irregular polls (bursts and gaps) stay within the bound too.
    let mut w = ConsumerWindow::default();
    let mut t = 0.0;
    for i in 0..2000u64 {
        t += [0.01, 1.3, 0.2, 0.9, 0.05][i as usize % 5];
        w.record(at(t, i, i, 100 + i, 0), W);
        assert!(w.len() <= window::MAX_ENTRIES, "{} entries at {t}", w.len());
    }
    assert_eq!(w.status(t, W), Status::Lagging);
}

fn stream(name: &str, first: (u64, f64), last: (u64, f64)) -> StreamDetail {
    let mut s = StreamDetail {
        name: name.into(),
        ..StreamDetail::default()
    };
    s.state.first_seq = first.0;
    s.state.first_ts = Some(first.1);
    s.state.last_seq = last.0;
    s.state.last_ts = Some(last.1);
    s
}

fn consumer(
    name: &str,
    delivered: u64,
    ack_floor: u64,
    pending: u64,
    ack_pending: u64,
) -> ConsumerInfo {
    let mut c = ConsumerInfo {
        name: name.into(),
        num_pending: pending,
        num_ack_pending: ack_pending,
        ..ConsumerInfo::default()
    };
    c.delivered.stream_seq = delivered;
    c.ack_floor.stream_seq = ack_floor;
    c
}

#[test]
fn a_health_row_gives_back_what_it_was_made_of() {
    assert_eq!(std::mem::size_of::<ConsumerHealthRow>(), 40);
    let ages = [
        None,
        Some(Age {
            seconds: 0.0,
            exact: true,
        }),
        Some(Age {
            seconds: 12.5,
            exact: false,
        }),
    ];
    for lag in ages {
        for unacked in ages {
            for forecast in [None, Some(0.0), Some(3.25)] {
                for exact in [true, false] {
                    let removed = Removed { messages: 7, exact };
                    let row =
                        ConsumerHealthRow::new(Status::Stalled, (lag, unacked), removed, forecast);
                    assert_eq!(row.status, Status::Stalled);
                    assert_eq!(row.delivery_lag(), lag);
                    assert_eq!(row.oldest_unacked_age(), unacked);
                    assert_eq!(row.removed(), removed);
                    assert_eq!(row.removal_forecast(), forecast);
                }
            }
        }
    }
    let unjudged = ConsumerHealthRow::UNJUDGED;
    assert_eq!(
        (unjudged.status, unjudged.delivery_lag()),
        (Status::Unknown, None)
    );
    let nothing = Removed {
        messages: 0,
        exact: true,
    };
    assert_eq!(
        (unjudged.removed(), unjudged.removal_forecast()),
        (nothing, None)
    );
}

#[test]
fn ages_are_estimated_or_exact_with_a_read_timestamp() {
    let mut h = ConsumerHealth::new(std::time::Duration::from_secs(10));
    // Messages 1..=101 stored from t=1000 to t=1100, one a second.
    let s = stream("S", (1, 1000.0), (101, 1100.0));
    let streams = [("A", &s)];
    // Delivered up to 60, acknowledged up to 40.
    let c = consumer("C", 60, 40, 41, 20);
    let consumers = [("A", "S", &c, Some(1200.0))];
    let rows = h.update((&streams, &consumers), 0.0, &Replies::new());
    let est = |seconds| {
        Some(Age {
            seconds,
            exact: false,
        })
    };
    assert_eq!(rows[0].status, Status::Unknown);
    assert_eq!(rows[0].delivery_lag(), est(1200.0 - 1060.0));
    assert_eq!(rows[0].oldest_unacked_age(), est(1200.0 - 1040.0));

    // The candidates: oldest unacknowledged first, then delivery lag.
    let wanted = h.candidates((&streams, &consumers), 0.0, 50);
    assert_eq!(
        wanted.iter().map(|r| r.from_seq).collect::<Vec<_>>(),
        [41, 61]
    );
    assert_eq!(h.candidates((&streams, &consumers), 0.0, 1).len(), 1);
    let mut replies = Replies::new();
    replies.insert(
        wanted[1].clone(),
        TimestampReply::Found {
            seq: 61,
            unix_seconds: 1061.5,
        },
    );
    replies.insert(wanted[0].clone(), TimestampReply::NoMessage);
    let rows = h.update((&streams, &consumers), 0.0, &replies);
    assert_eq!(
        rows[0].delivery_lag(),
        Some(Age {
            seconds: 138.5,
            exact: true
        })
    );
    assert_eq!(
        rows[0].oldest_unacked_age(),
        Some(Age {
            seconds: 0.0,
            exact: true
        })
    );

    // Nothing pending or unacknowledged: 0, exactly.
    let done = consumer("D", 101, 101, 0, 0);
    let consumers = [("A", "S", &done, Some(1200.0))];
    let rows = h.update((&streams, &consumers), 0.0, &Replies::new());
    let zero = Some(Age {
        seconds: 0.0,
        exact: true,
    });
    assert_eq!(
        (rows[0].delivery_lag(), rows[0].oldest_unacked_age()),
        (zero, zero)
    );
    assert!(h.candidates((&streams, &consumers), 0.0, 50).is_empty());
}

#[test]
fn paused_comes_first_and_the_unseen_are_forgotten() {
    let mut h = ConsumerHealth::new(std::time::Duration::from_secs(10));
    let s = stream("S", (1, 1000.0), (101, 1100.0));
    let streams = [("A", &s)];
    let mut paused = consumer("P", 1, 1, 100, 0);
    paused.paused = Some(true);
    let other = consumer("O", 1, 1, 100, 0);
    let both = [
        ("A", "S", &paused, Some(2000.0)),
        ("A", "S", &other, Some(2000.0)),
    ];
    let rows = h.update((&streams, &both), 2000.0, &Replies::new());
    assert_eq!(rows[0].status, Status::Paused);
    assert_eq!(rows[1].status, Status::Unknown);
    assert_eq!(h.held(), (2, 1));
    // Only O is seen from now on; P goes once unseen for longer than the window.
    for t in [2005.0, 2010.0] {
        h.update(
            (&streams, &[("A", "S", &other, Some(t))]),
            t,
            &Replies::new(),
        );
        assert_eq!(h.held(), (2, 1), "{t}");
    }
    h.update(
        (&streams, &[("A", "S", &other, Some(2010.5))]),
        2010.5,
        &Replies::new(),
    );
    assert_eq!(h.held(), (1, 1));
    // The stream too, once gone for longer than the window.
    h.update((&[], &[]), 2030.0, &Replies::new());
    assert_eq!(h.held(), (0, 0));
}

#[test]
fn candidates_fill_the_budget_past_consumers_that_share_a_position() {
    let mut h = ConsumerHealth::new(std::time::Duration::from_secs(10));
    let s = stream("S", (1, 1000.0), (101, 1100.0));
    let streams = [("A", &s)];
    // Two consumers at the same positions (one pair of requests), one behind less.
    let (a, b, c) = (
        consumer("A1", 20, 10, 81, 10),
        consumer("A2", 20, 10, 81, 10),
        consumer("B", 50, 40, 51, 10),
    );
    let rows = [
        ("A", "S", &a, Some(1200.0)),
        ("A", "S", &b, Some(1200.0)),
        ("A", "S", &c, Some(1200.0)),
    ];
    let wanted = h.candidates((&streams, &rows), 0.0, 3);
    let seqs: Vec<_> = wanted.iter().map(|r| r.from_seq).collect();
    assert_eq!(seqs, [11, 21, 41]);
    assert!(wanted
        .iter()
        .all(|r| r.account == "A" && r.stream == "S" && r.filters.is_empty()));
    assert_eq!(h.candidates((&streams, &rows), 0.0, 0), Vec::new());
    // A filtered consumer's requests carry its filters (one, or several).
    let mut f = consumer("F", 20, 10, 81, 10);
    f.config = Some(
        ConsumerConfig {
            filter_subject: "s.one".into(),
            ..ConsumerConfig::default()
        }
        .into(),
    );
    let one = [("A", "S", &f, Some(1200.0))];
    assert_eq!(h.candidates((&streams, &one), 0.0, 1)[0].filters, ["s.one"]);
    std::sync::Arc::make_mut(f.config.as_mut().unwrap()).filter_subjects =
        vec!["s.a".into(), "s.b".into()].into();
    let many = [("A", "S", &f, Some(1200.0))];
    assert_eq!(
        h.candidates((&streams, &many), 0.0, 1)[0].filters,
        ["s.a", "s.b"]
    );
}

mod by_the_letter;
mod extreme_values;
