use super::*;
use crate::sources::jsz::{SequenceInfo, StreamConfig, StreamContents};

/// A stream publishing 10 messages a second from sequence 1 at time 0, of
/// 100 bytes each, keeping `max_msgs` messages.
fn stream_at(t: f64, limits: (Option<u64>, Option<u64>, Option<f64>)) -> StreamFront {
    let last_seq = (t * 10.0) as u64;
    let cap = limits
        .0
        .unwrap_or(u64::MAX)
        .min(limits.1.map_or(u64::MAX, |b| b / 100));
    let messages = last_seq.min(cap);
    StreamFront {
        max_msgs: limits.0,
        max_bytes: limits.1,
        max_age: limits.2,
        messages,
        bytes: messages * 100,
        first_seq: last_seq - messages + 1,
        last_seq,
    }
}

fn consumer(delivered: u64, pending: u64) -> ConsumerInfo {
    ConsumerInfo {
        delivered: SequenceInfo {
            stream_seq: delivered,
            ..Default::default()
        },
        num_pending: pending,
        ..Default::default()
    }
}

/// Polls every 0.5 s from 1 s to `until`, the consumer stopped at 5;
/// returns (time, forecast) of every poll.
fn stopped_consumer(
    limits: (Option<u64>, Option<u64>, Option<f64>),
    until: f64,
) -> Vec<(f64, Option<f64>)> {
    let mut rate = BehindRate::default();
    let mut out = Vec::new();
    let mut t = 1.0;
    while t <= until {
        let front = stream_at(t, limits);
        let pending = front.last_seq.saturating_sub(5.max(front.first_seq - 1));
        let lag = t - 0.6; // message 6 stored at 0.6 s
        let f = forecast(
            &front,
            &mut rate,
            &consumer(5, pending),
            Some(lag),
            (t, 2.0),
        );
        out.push((t, f));
        t += 0.5;
    }
    out
}

#[test]
fn max_msgs_counts_down_to_the_publish_that_removes_the_next_message() {
    // 100 kept: message 6 goes when 106 is published, at 10.6 s.
    let polls = stopped_consumer((Some(100), None, None), 12.0);
    // No rate before a span has passed.
    assert_eq!(polls[0], (1.0, None));
    assert_eq!(polls[3], (2.5, None));
    for &(t, f) in &polls[4..] {
        let expected = if t >= 10.7 { 0.0 } else { 10.6 - t };
        let f = f.unwrap();
        assert!(
            (f - expected).abs() < 0.11,
            "at {t}: {f}, expected {expected}"
        );
    }
}

#[test]
fn max_bytes_uses_the_average_size() {
    // 5,000 bytes: 50 messages of 100; message 6 goes at 5.6 s.
    let polls = stopped_consumer((None, Some(5_000), None), 5.0);
    let (t, f) = polls[polls.len() - 1];
    assert!((f.unwrap() - (5.6 - t)).abs() < 0.11, "{t}: {f:?}");
}

#[test]
fn max_age_is_the_limit_minus_the_lag_even_without_a_rate() {
    let polls = stopped_consumer((None, None, Some(8.0)), 3.0);
    assert_eq!(polls[0].1, Some(8.0 - 0.4));
    let (t, f) = polls[polls.len() - 1];
    assert!((f.unwrap() - (8.6 - t)).abs() < 1e-9);
}

#[test]
fn the_soonest_limit_is_reported() {
    let polls = stopped_consumer((Some(100), Some(5_000), Some(30.0)), 4.0);
    let (t, f) = polls[polls.len() - 1];
    assert!((f.unwrap() - (5.6 - t)).abs() < 0.11, "{t}: {f:?}");
}

#[test]
fn a_consumer_that_keeps_up_or_has_nothing_pending_has_none() {
    let mut rate = BehindRate::default();
    for i in 0..10 {
        let t = 1.0 + i as f64;
        let front = stream_at(t, (Some(100), None, None));
        // Two messages behind, always.
        let c = consumer(front.last_seq - 2, 2);
        assert_eq!(forecast(&front, &mut rate, &c, Some(0.2), (t, 2.0)), None);
        let caught_up = consumer(front.last_seq, 0);
        let mut other = rate;
        assert_eq!(
            forecast(&front, &mut other, &caught_up, Some(0.0), (t, 2.0)),
            None
        );
    }
}

#[test]
fn zero_while_removal_happens() {
    let mut rate = BehindRate::default();
    let front = stream_at(20.0, (Some(100), None, None));
    assert_eq!(front.first_seq, 101);
    let f = forecast(&front, &mut rate, &consumer(5, 100), None, (20.0, 2.0));
    assert_eq!(f, Some(0.0));
}

fn detail(discard: bool, max_msgs: i64) -> StreamDetail {
    with_age(discard, max_msgs, 0)
}

fn with_age(discard: bool, max_msgs: i64, max_age_ns: i64) -> StreamDetail {
    StreamDetail {
        config: Some(StreamConfig {
            max_msgs: Some(max_msgs),
            max_bytes: Some(5_000),
            max_age: Some(max_age_ns),
            discard_new: discard,
            metadata: None,
        }),
        state: StreamContents {
            messages: 3,
            first_seq: 1,
            last_seq: 3,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn only_limits_that_remove_make_a_front() {
    let front = stream_front(&detail(false, 10)).unwrap();
    assert_eq!(
        (front.max_msgs, front.max_bytes, front.max_age),
        (Some(10), Some(5_000), None)
    );
    // `discard: new` refuses at its message and byte limits, and removes by age.
    assert_eq!(stream_front(&detail(true, 10)), None);
    let front = stream_front(&with_age(true, 10, 30_000_000_000)).unwrap();
    assert_eq!(
        (front.max_msgs, front.max_bytes, front.max_age),
        (None, None, Some(30.0))
    );
    let mut unlimited = detail(false, -1);
    unlimited.config.as_mut().unwrap().max_bytes = Some(-1);
    assert_eq!(stream_front(&unlimited), None);
    assert_eq!(stream_front(&StreamDetail::default()), None);
}

#[test]
fn a_consumer_keeps_16_bytes() {
    assert!(std::mem::size_of::<BehindRate>() <= 16);
}

/// Figures no server sends, at the top of `u64`: a consumer at the last
/// sequence has no next message to lose (no forecast, where `+ 1`
/// overflowed), and a stream from sequence 0 to the last one forecasts a
/// finite time.
#[test]
fn extreme_positions_forecast_nothing_or_a_finite_time() {
    let mut front = stream_at(20.0, (Some(100), None, Some(30.0)));
    front.last_seq = u64::MAX;
    let mut rate = BehindRate::default();
    let at_the_end = consumer(u64::MAX, 5);
    let f = forecast(&front, &mut rate, &at_the_end, Some(1.0), (20.0, 2.0));
    assert_eq!(f, None);
    front.first_seq = 0;
    let mut rate = BehindRate::default();
    let behind = consumer(u64::MAX - 1, 5);
    for t in [20.0, 23.0] {
        let f = forecast(&front, &mut rate, &behind, Some(1.0), (t, 2.0));
        assert!(f.is_some_and(|f| f.is_finite() && f >= 0.0), "{f:?}");
    }
}
