//! An instrumented subscription: the application's stream takes messages
//! out of the async-nats subscriber itself and admits or drops (and counts)
//! each against the pending limits; a watchdog does the same for an
//! application that does not poll (see [`crate::intake`]).
//!
//! Why the async-nats queue does not drop: `ClientMetrics::connect_options`
//! sizes it (`subscription_capacity`) to 2^28 messages. A smaller channel is
//! not safe: async-nats' connection task reads the socket in long bursts, so
//! 65,536 small messages can arrive between two takes. What async-nats'
//! channel holds is memory, not loss; the connection audit
//! (`Shared::unforwarded`) shows it, and shows any drop should the channel
//! have been made smaller again.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_nats::{Message, Subscriber};
use futures::Stream;

use crate::intake::{lock, Intake};
use crate::state::Shared;
use crate::stats::{bump, SubscriptionStats};
use crate::{Error, ErrorKind};

/// How the application ended the subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Unsubscribe now, but keep (and count) what async-nats already holds.
    Unsubscribe,
    /// Let the server send what is in flight, then end.
    Drain,
}

/// A subscription whose drops are counted exactly; a [`Stream`] of
/// [`async_nats::Message`], used like an async-nats `Subscriber`.
///
/// Dropping it unsubscribes and discards what is still pending. To stop
/// without losing anything already received, call [`Subscription::unsubscribe`]
/// or [`Subscription::drain`] and read the stream to its end.
#[derive(Debug)]
pub struct Subscription {
    intake: Arc<Mutex<Intake>>,
    /// Admitted messages taken from the intake in one swap, handed out one
    /// by one.
    local: VecDeque<Message>,
    stats: Arc<SubscriptionStats>,
    stopped: bool,
    shared: Arc<Shared>,
    sid: Option<u64>,
}

impl Subscription {
    pub(crate) fn start(
        subscriber: Subscriber,
        stats: Arc<SubscriptionStats>,
        shared: Arc<Shared>,
    ) -> Self {
        let sid = sid_of(&subscriber);
        shared.add_subscription(stats.clone(), sid);
        let intake = Arc::new(Mutex::new(Intake::new(subscriber, stats.clone())));
        shared.watchdog.watch(&intake);
        Subscription {
            intake,
            local: VecDeque::new(),
            stats,
            stopped: false,
            shared,
            sid,
        }
    }

    /// The `subscription` label value.
    pub fn name(&self) -> &str {
        &self.stats.name
    }

    /// Messages received and not yet handed to the application.
    pub fn pending_messages(&self) -> u64 {
        self.stats.pending().0
    }

    /// Payload bytes of [`Self::pending_messages`].
    pub fn pending_bytes(&self) -> u64 {
        self.stats.pending().1
    }

    /// Messages dropped so far because a pending limit was reached.
    pub fn dropped_messages(&self) -> u64 {
        self.stats.dropped.load(Ordering::Acquire)
    }

    /// Payload bytes of [`Self::dropped_messages`].
    pub fn dropped_bytes(&self) -> u64 {
        self.stats.dropped_bytes.load(Ordering::Acquire)
    }

    /// Messages handed to the application so far.
    pub fn delivered_messages(&self) -> u64 {
        self.stats.delivered.load(Ordering::Acquire)
    }

    /// Highest number of messages pending at once so far.
    pub fn pending_messages_high_water(&self) -> u64 {
        self.stats.high_water.load(Ordering::Acquire)
    }

    /// The sid async-nats gave this subscription, if its `Debug` output
    /// still shows it.
    pub fn sid(&self) -> Option<u64> {
        self.sid
    }

    /// Unsubscribes now; messages already received are still delivered (or
    /// counted as dropped), then the stream ends. Fails if the subscription
    /// was already stopped or async-nats could not send the unsubscribe.
    pub async fn unsubscribe(&mut self) -> Result<(), Error> {
        self.stop_with(Stop::Unsubscribe).await
    }

    /// Asks the server to flush what is in flight and then end the
    /// subscription; the stream ends after the last message. Fails like
    /// [`Self::unsubscribe`].
    pub async fn drain(&mut self) -> Result<(), Error> {
        self.stop_with(Stop::Drain).await
    }

    async fn stop_with(&mut self, how: Stop) -> Result<(), Error> {
        let stopped = || {
            Error::new(
                ErrorKind::Unsubscribe,
                "the subscription was already stopped",
            )
        };
        if self.stopped {
            return Err(stopped());
        }
        let subscriber = lock(&self.intake).lend_subscriber().ok_or_else(stopped)?;
        let mut lent = Lent {
            intake: &self.intake,
            subscriber: Some(subscriber),
        };
        // Awaited without the lock; meanwhile nobody takes from the
        // subscriber, and what async-nats holds is taken once it is back.
        let subscriber = lent.subscriber.as_mut().expect("lent above");
        let done = match how {
            Stop::Unsubscribe => subscriber.unsubscribe().await,
            Stop::Drain => subscriber.drain().await,
        };
        if let Some(subscriber) = lent.subscriber.take() {
            lock(&self.intake).return_subscriber(subscriber, done.is_err());
        }
        self.stopped = true;
        done.map_err(|e| Error::new(ErrorKind::Unsubscribe, e))
    }
}

/// The subscriber while `unsubscribe` or `drain` awaits it. If that future
/// is dropped part-way (a timeout around it, while async-nats' command
/// channel is full), the subscriber goes back to the intake, still
/// subscribed: the stream goes on and the call can be made again.
struct Lent<'a> {
    intake: &'a Mutex<Intake>,
    subscriber: Option<Subscriber>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(subscriber) = self.subscriber.take() {
            lock(self.intake).return_subscriber(subscriber, false);
        }
    }
}

impl Stream for Subscription {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let this = self.get_mut();
        if this.local.is_empty() {
            let mut intake = lock(&this.intake);
            intake.take_for_application(cx, &mut this.local);
            if this.local.is_empty() {
                return if intake.ended() {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                };
            }
        }
        // Counted before it is handed out, and popped straight into the
        // return value rather than through a local.
        let len = this.local.front().map_or(0, |m| m.payload.len());
        bump(&this.stats.delivered_bytes, len as u64);
        bump(&this.stats.delivered, 1);
        Poll::Ready(this.local.pop_front())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // The intake, and with it the async-nats subscriber (which
        // unsubscribes), goes when the watchdog lets go of it too.
        self.stats.closed.store(true, Ordering::Release);
        if let Some(sid) = self.sid {
            self.shared.forget_sid(sid);
        }
    }
}

/// The sid async-nats gave the subscriber. It is private; its `Debug`
/// output is the only place that shows it. `None` if that output changes, in
/// which case slow-consumer events for it count as unattributed (a test
/// against a real `Subscriber`, `tests/sid.rs`, fails on that day).
pub(crate) fn sid_of(subscriber: &Subscriber) -> Option<u64> {
    parse_sid(&format!("{subscriber:?}"))
}

fn parse_sid(debug: &str) -> Option<u64> {
    let rest = debug.strip_prefix("Subscriber {")?;
    let after = &rest[rest.find("sid: ")? + 5..];
    let end = after.find(|c: char| !c.is_ascii_digit())?;
    after[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::parse_sid;

    #[test]
    fn reads_the_sid_from_debug_output() {
        assert_eq!(
            parse_sid("Subscriber { sid: 17, receiver: Receiver { .. } }"),
            Some(17)
        );
        assert_eq!(parse_sid("Subscriber { receiver: .. }"), None);
        assert_eq!(parse_sid("Something { sid: 3, }"), None);
    }
}
