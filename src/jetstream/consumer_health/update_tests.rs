//! Two threads judge exactly as one does.

use super::*;
use crate::sources::jsz::StreamDetail;

/// Stream `i` of a poll at time `t`: its first sequence moves up (limits
/// remove messages) from poll to poll, faster for some streams.
fn stream(i: u64, t: u64) -> StreamDetail {
    let mut s = StreamDetail {
        name: format!("S{i}"),
        ..StreamDetail::default()
    };
    s.state.first_seq = 1 + 20 * t * (i % 3);
    s.state.first_ts = Some(1000.0 + s.state.first_seq as f64);
    s.state.last_seq = 200 + 10 * t;
    s.state.last_ts = Some(1000.0 + s.state.last_seq as f64);
    s.state.messages = s.state.last_seq + 1 - s.state.first_seq;
    s
}

/// Consumer `j` of stream `i` at poll `t`: some keep up, some fall behind,
/// some stop.
fn consumer(i: u64, j: u64, t: u64) -> ConsumerInfo {
    let last = 200 + 10 * t;
    let delivered = match j % 4 {
        0 => last,
        1 => 100 + 5 * t,
        2 => 50,
        _ => (i * 7 + j + t * 3) % last,
    };
    let mut c = ConsumerInfo {
        name: format!("C{j}").into(),
        num_pending: last - delivered,
        num_ack_pending: j % 5,
        ..ConsumerInfo::default()
    };
    c.delivered.stream_seq = delivered;
    c.delivered.consumer_seq = delivered + j % 3;
    c.ack_floor.stream_seq = delivered.saturating_sub(j % 5);
    c.paused = Some(j.is_multiple_of(11));
    c
}

/// Every poll's rows judged by a state that uses two threads from
/// `two_threads_from` consumers on.
fn judged(two_threads_from: usize, split_a_stream: bool) -> Vec<Vec<ConsumerHealthRow>> {
    let mut h = ConsumerHealth::new(std::time::Duration::from_secs(30));
    let mut out = Vec::new();
    for t in 0..6 {
        let streams: Vec<_> = (0..9).map(|i| stream(i, t)).collect();
        let consumers: Vec<Vec<_>> = (0..9)
            .map(|i| (0..40).map(|j| consumer(i, j, t)).collect())
            .collect();
        let names: Vec<String> = (0..9).map(|i| format!("S{i}")).collect();
        let mut rows: Vec<ConsumerRow> = Vec::new();
        for (i, cs) in consumers.iter().enumerate() {
            for c in cs {
                rows.push(("A", &names[i], c, Some(1300.0 + 10.0 * t as f64)));
            }
        }
        if split_a_stream {
            // The first stream's last consumers come again at the end.
            let moved: Vec<_> = rows.drain(30..40).collect();
            rows.extend(moved);
        }
        let stream_rows: Vec<StreamRow> = streams.iter().map(|s| ("A", s)).collect();
        let mut judged = h.update_on_threads(
            (&stream_rows, &rows),
            1300.0 + 10.0 * t as f64,
            &Replies::new(),
            two_threads_from,
        );
        if split_a_stream {
            // Back in the order of the unsplit rows.
            let moved: Vec<_> = judged.drain(judged.len() - 10..).collect();
            judged.splice(30..30, moved);
        }
        out.push(judged);
    }
    out
}

#[test]
fn two_threads_judge_every_consumer_as_one_thread_does() {
    let one = judged(usize::MAX, false);
    let two = judged(0, false);
    assert_eq!(one, two);
    // The polls are not all alike: statuses and removed counts differ.
    let mut statuses = Vec::new();
    for r in &one[5] {
        if !statuses.contains(&r.status) {
            statuses.push(r.status);
        }
    }
    assert!(statuses.len() >= 3, "{statuses:?}");
    assert!(one[5].iter().any(|r| r.removed() != one[5][0].removed()));
}

#[test]
fn a_stream_whose_consumers_come_in_two_runs_is_judged_whole() {
    let whole = judged(usize::MAX, false);
    assert_eq!(judged(0, true), whole);
    assert_eq!(judged(usize::MAX, true), whole);
}

/// Two servers whose clocks are an hour apart, the window 10 s: each
/// server's consumers keep their window and their removal count, and are
/// judged alike. (Forgotten by the newest clock, the lagging server's
/// consumer was forgotten at every poll: `unknown`, its count started
/// again at every poll.)
#[test]
fn a_server_whose_clock_lags_keeps_its_consumers() {
    let mut h = ConsumerHealth::new(std::time::Duration::from_secs(10));
    let mut rows = Vec::new();
    for poll in 0..12_u64 {
        let now = 5000.0 + 2.0 * poll as f64;
        // Limits remove 5 messages a poll; both consumers stopped at 10.
        let mut s = stream(0, 0);
        s.state.first_seq = 1 + 5 * poll;
        s.state.last_seq = 200;
        s.state.messages = s.state.last_seq + 1 - s.state.first_seq;
        let stopped = |name: &str| {
            let mut c = ConsumerInfo {
                name: name.into(),
                num_pending: 190_u64.min(s.state.messages),
                num_ack_pending: 1,
                ..ConsumerInfo::default()
            };
            c.delivered.stream_seq = 10;
            c.delivered.consumer_seq = 10;
            c.ack_floor.stream_seq = 9;
            c
        };
        let (on_time, lagging) = (stopped("on-time"), stopped("lagging"));
        let consumers = [
            ("A", "S0", &on_time, Some(now)),
            ("A", "S0", &lagging, Some(now - 3600.0)),
        ];
        let streams = [("A", &s)];
        rows = h.update((&streams, &consumers), now, &Replies::new());
        assert_eq!(h.held(), (2, 1), "poll {poll}");
        assert_eq!(rows[0].status, rows[1].status, "poll {poll}");
        assert_eq!(rows[0].removed(), rows[1].removed(), "poll {poll}");
    }
    assert_eq!(rows[1].status, Status::Stopped);
    // The messages from 11 up to the first now stored, 1 + 5 * 11.
    assert_eq!(rows[1].removed().messages, 45);
}
