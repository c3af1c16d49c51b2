//! How long until a stream's limits remove a message a consumer has not
//! delivered yet: a forecast, so that the loss counted by
//! `removed_before_delivery` can be paged before it happens.
//!
//! Limits that remove the oldest messages (`discard: old`, the default,
//! and `max_age` whatever the discard policy):
//! - `max_msgs`, `max_bytes`: the stream removes its first message at each
//!   publish once full. The consumer's next undelivered message `n` goes
//!   when the room left plus the messages from the first one up to `n` are
//!   used up; that distance shrinks at the publish rate minus the
//!   consumer's rate through the stream's sequences, measured here across
//!   polls. A consumer that keeps up or gains has no forecast.
//! - `max_age`: the limit minus the age of `n` (the delivery lag), as if
//!   the consumer delivered nothing more: its first message to go is that
//!   one, and a consumer that delivers moves it later.
//!
//! A `discard: new` stream refuses new messages at `max_msgs` and
//! `max_bytes` instead of removing old ones, but `max_age` removes from it
//! all the same: it is forecast by age alone.
//!
//! The soonest of these is the forecast; 0 once the stream's first message
//! is above `n` (removal is happening). A mirror or source is such a
//! reader too ([`forecast_for`]): `origin_forecast.rs` forecasts with the
//! same arithmetic what an origin removes before it is copied.

use crate::sources::jsz::{ConsumerInfo, StreamDetail};

/// A stream's limits that remove messages, and its contents, as one poll
/// saw them: all the forecast reads of a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StreamFront {
    /// `max_msgs`, when limited.
    pub(crate) max_msgs: Option<u64>,
    /// `max_bytes`, when limited.
    pub(crate) max_bytes: Option<u64>,
    /// `max_age` in seconds, when limited.
    pub(crate) max_age: Option<f64>,
    /// Messages stored.
    pub(crate) messages: u64,
    /// Bytes stored.
    pub(crate) bytes: u64,
    /// First sequence stored.
    pub(crate) first_seq: u64,
    /// Last sequence stored.
    pub(crate) last_seq: u64,
}

/// The stream's limits that remove messages before they are delivered, with
/// its contents; `None` when it has none (no limit, only message and byte
/// limits of a `discard: new` stream, which refuse new messages instead, or
/// no configuration in the reply).
pub(crate) fn stream_front(s: &StreamDetail) -> Option<StreamFront> {
    let config = s.config.as_ref()?;
    let limited = |v: Option<i64>| v.filter(|x| *x > 0).map(|x| x as u64);
    let removes_oldest = |v: Option<i64>| limited(v).filter(|_| !config.discard_new);
    let front = StreamFront {
        max_msgs: removes_oldest(config.max_msgs),
        max_bytes: removes_oldest(config.max_bytes),
        max_age: limited(config.max_age).map(|ns| ns as f64 / 1e9),
        messages: s.state.messages,
        bytes: s.state.bytes,
        first_seq: s.state.first_seq,
        last_seq: s.state.last_seq,
    };
    let any = front.max_msgs.is_some() || front.max_bytes.is_some() || front.max_age.is_some();
    any.then_some(front)
}

/// Per consumer: how fast it falls behind the stream's head, measured
/// between polls at least a span apart (16 bytes: it is kept for every
/// consumer).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BehindRate {
    /// When the anchor was taken (poll clock); 0 before the first poll.
    anchor_time: f64,
    /// The stream's last sequence minus the consumer's delivered one then
    /// (held at `u32::MAX`: a rate over more is as good as any).
    anchor_behind: u32,
    /// Sequences per second the distance grew over the last span; NaN
    /// before a span was measured.
    rate: f32,
}

impl BehindRate {
    /// Takes a poll at `now` where the consumer is `behind` sequences behind
    /// the stream's head, and measures the rate once `span` seconds have
    /// passed since the anchor. Returns the rate (sequences per second).
    fn record(&mut self, now: f64, behind: u64, span: f64) -> Option<f64> {
        let behind = u32::try_from(behind).unwrap_or(u32::MAX);
        if self.anchor_time == 0.0 {
            *self = BehindRate {
                anchor_time: now,
                anchor_behind: behind,
                rate: f32::NAN,
            };
        } else if now - self.anchor_time >= span {
            let grew = f64::from(behind) - f64::from(self.anchor_behind);
            self.rate = (grew / (now - self.anchor_time)) as f32;
            self.anchor_time = now;
            self.anchor_behind = behind;
        } else if now < self.anchor_time {
            // A clock gone back: start again.
            *self = BehindRate::default();
            return self.record(now, u64::from(behind), span);
        }
        (!self.rate.is_nan()).then_some(f64::from(self.rate))
    }
}

/// Seconds until the stream's limits remove a message `c` has not
/// delivered, at `now`; `delivery_lag` is the age of its first undelivered
/// message. `rate` is updated with this poll whatever the outcome. `None`:
/// nothing to forecast (nothing pending, or the consumer keeps up).
pub(crate) fn forecast(
    front: &StreamFront,
    rate: &mut BehindRate,
    c: &ConsumerInfo,
    delivery_lag: Option<f64>,
    clock: (f64, f64),
) -> Option<f64> {
    let reader = (c.delivered.stream_seq, c.num_pending > 0);
    forecast_for(front, rate, reader, delivery_lag, clock)
}

/// [`forecast`] for any reader of the stream: `delivered` is the last
/// stream sequence it took, `pending` whether anything waits for it (a
/// consumer's `num_pending`; a mirror's or source's origin messages past
/// its position, `stream_origins.rs`).
pub(crate) fn forecast_for(
    front: &StreamFront,
    rate: &mut BehindRate,
    (delivered, pending): (u64, bool),
    delivery_lag: Option<f64>,
    (now, span): (f64, f64),
) -> Option<f64> {
    let behind = front.last_seq.saturating_sub(delivered);
    let falling_behind = rate.record(now, behind, span).filter(|r| *r > 0.0);
    if !pending {
        return None;
    }
    // Nothing follows `u64::MAX` (no server reaches it): nothing to lose.
    let next = delivered.checked_add(1)?;
    if next < front.first_seq {
        return Some(0.0);
    }
    let by_age = front
        .max_age
        .zip(delivery_lag)
        .map(|(max, lag)| (max - lag).max(0.0));
    let Some(rate) = falling_behind else {
        return by_age;
    };
    // Messages from the first stored up to and with the next undelivered.
    let up_to_next = (next - front.first_seq) as f64 + 1.0;
    let by_msgs = front.max_msgs.map(|max| {
        let room = max.saturating_sub(front.messages) as f64;
        (room + up_to_next) / rate
    });
    let by_bytes = front.max_bytes.filter(|_| front.messages > 0).map(|max| {
        // Room in messages of the stream's average size.
        let average = front.bytes as f64 / front.messages as f64;
        let room = max.saturating_sub(front.bytes) as f64 / average.max(1.0);
        (room + up_to_next) / rate
    });
    [by_msgs, by_bytes, by_age]
        .into_iter()
        .flatten()
        .reduce(f64::min)
}

#[cfg(test)]
#[path = "limit_forecast_tests.rs"]
mod tests;
