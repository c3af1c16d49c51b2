//! An instrumented subscription: a forwarding task drains the async-nats
//! subscriber into the crate's own bounded queue, which enforces the pending
//! limits and counts every message it refuses.
//!
//! Why the async-nats queue does not drop: `ClientMetrics::connect_options`
//! sizes it (`subscription_capacity`) to 2^28 messages. A smaller channel is
//! not safe even though the forwarding task never waits for the application:
//! async-nats' connection task reads the socket in long bursts while the
//! forwarding task waits in the same worker's next-to-run slot, which other
//! workers cannot steal, so 65,536 small messages can arrive before it runs.
//! What async-nats' channel holds is memory, not loss; the connection audit
//! (`Shared::unforwarded`) shows it, and shows any drop should the channel
//! have been made smaller again.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use async_nats::{Message, Subscriber};
use futures::{Stream, StreamExt};
use tokio::sync::oneshot;

use crate::admission::Admission;
use crate::state::{bump, Shared, SubscriptionStats};
use crate::{Error, ErrorKind};

type StopReply = oneshot::Sender<Result<(), async_nats::UnsubscribeError>>;

/// Messages taken from the async-nats channel per queue lock.
const BATCH: usize = 256;

/// How the application ended the subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Unsubscribe now, but keep (and count) what async-nats already holds.
    Unsubscribe,
    /// Let the server send what is in flight, then end.
    Drain,
}

#[derive(Debug, Default)]
struct QueueState {
    messages: VecDeque<Message>,
    waker: Option<Waker>,
    ended: bool,
}

#[derive(Debug, Default)]
struct Queue(Mutex<QueueState>);

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A subscription whose drops are counted exactly; a [`Stream`] of
/// [`async_nats::Message`], used like an async-nats `Subscriber`.
///
/// Dropping it unsubscribes and discards what is still pending. To stop
/// without losing anything already received, call [`Subscription::unsubscribe`]
/// or [`Subscription::drain`] and read the stream to its end.
#[derive(Debug)]
pub struct Subscription {
    queue: Arc<Queue>,
    /// Messages taken from `queue` in one swap, handed out one by one.
    local: VecDeque<Message>,
    stats: Arc<SubscriptionStats>,
    stop: Option<oneshot::Sender<(Stop, StopReply)>>,
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
        let queue = Arc::new(Queue::default());
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::spawn(forward(subscriber, queue.clone(), stats.clone(), stop_rx));
        Subscription {
            queue,
            local: VecDeque::new(),
            stats,
            stop: Some(stop_tx),
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
        let stop = self.stop.take().ok_or_else(stopped)?;
        let (reply, result) = oneshot::channel();
        stop.send((how, reply)).map_err(|_| stopped())?;
        result
            .await
            .map_err(|_| stopped())?
            .map_err(|e| Error::new(ErrorKind::Unsubscribe, e))
    }
}

impl Stream for Subscription {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let this = self.get_mut();
        if this.local.is_empty() {
            let mut queue = this.queue.lock();
            if queue.messages.is_empty() {
                if queue.ended {
                    return Poll::Ready(None);
                }
                match &queue.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => queue.waker = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
            // Back to the start of its buffer (see `Admission::hand_over`).
            this.local.clear();
            std::mem::swap(&mut queue.messages, &mut this.local);
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
        // The forwarding task sees its stop channel close and ends.
        self.stats.closed.store(true, Ordering::Release);
        if let Some(sid) = self.sid {
            self.shared.forget_sid(sid);
        }
    }
}

/// What one wake-up of the forwarding task found.
enum Step {
    Batch,
    End,
    Stop(Option<(Stop, StopReply)>),
}

async fn forward(
    mut subscriber: Subscriber,
    queue: Arc<Queue>,
    stats: Arc<SubscriptionStats>,
    mut stop: oneshot::Receiver<(Stop, StopReply)>,
) {
    let mut admission = Admission::new(stats, BATCH);
    let mut stopping = false;
    loop {
        let step = poll_fn(|cx| {
            if !stopping {
                if let Poll::Ready(r) = Pin::new(&mut stop).poll(cx) {
                    return Poll::Ready(Step::Stop(r.ok()));
                }
            }
            loop {
                match subscriber.poll_next_unpin(cx) {
                    Poll::Ready(Some(m)) => {
                        if let Some(queue) = admission.admit(m.payload.len()) {
                            queue.push_back(m);
                        }
                        if admission.taken() == BATCH {
                            return Poll::Ready(Step::Batch);
                        }
                    }
                    Poll::Ready(None) => return Poll::Ready(Step::End),
                    Poll::Pending if admission.taken() == 0 => return Poll::Pending,
                    Poll::Pending => return Poll::Ready(Step::Batch),
                }
            }
        })
        .await;
        hand_over(&queue, &mut admission);
        match step {
            Step::Batch => {}
            Step::End => break,
            Step::Stop(None) => {
                // The application dropped its Subscription: nobody will read
                // what is pending; dropping `subscriber` unsubscribes.
                break;
            }
            Step::Stop(Some((how, reply))) => {
                stopping = true;
                let done = match how {
                    Stop::Unsubscribe => subscriber.unsubscribe().await,
                    Stop::Drain => subscriber.drain().await,
                };
                let failed = done.is_err();
                let _ = reply.send(done);
                if failed {
                    break;
                }
                // Keep reading: async-nats still yields what it had buffered.
            }
        }
    }
    let waker = {
        let mut q = queue.lock();
        q.ended = true;
        q.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

/// Hands what the batch admitted to the application and wakes it.
fn hand_over(queue: &Queue, admission: &mut Admission) {
    if admission.taken() == 0 {
        return;
    }
    let waker = {
        let mut q = queue.lock();
        let ready = admission.hand_over(&mut q.messages);
        if ready {
            q.waker.take()
        } else {
            None
        }
    };
    if let Some(w) = waker {
        w.wake();
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
