//! Where a subscription's messages leave async-nats: every message taken
//! from the async-nats subscriber is admitted or dropped (and counted) on the
//! spot, by whoever takes it.
//!
//! Two parties take messages, one at a time under the intake's lock:
//! - the application, in `Subscription::poll_next`, whenever it has handed
//!   out everything it took before. While it keeps up this is the only
//!   path, and it costs no task of its own: a message goes from async-nats'
//!   channel to the application in the same poll.
//! - the [`Watchdog`], every [`WATCH_INTERVAL`], for every subscription of a
//!   `ClientMetrics`. An application busy elsewhere does not poll, and
//!   without this its messages would wait in async-nats' channel, uncounted
//!   and unbounded. So the pending limits hold within one interval whatever
//!   the application does, and a drop is counted at most one interval after
//!   the message arrived.
//!
//! No forwarding task per subscription: it would cost a second task wake-up
//! and queue per message (the `overhead` example measures it).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_nats::{Message, Subscriber};
use futures::StreamExt;
use tokio::task::JoinHandle;

use crate::admission::Admission;
use crate::stats::SubscriptionStats;

/// How often the watchdog takes what waits in async-nats' channels: the
/// longest a message can wait there uncounted, and so what bounds the memory
/// beyond the pending limits to what arrives in this time.
pub(crate) const WATCH_INTERVAL: Duration = Duration::from_millis(10);

/// Room for the messages admitted between two hand-overs, allocated once.
const INITIAL_CAPACITY: usize = 256;

/// One subscription's async-nats subscriber and the admission of what it
/// yields.
#[derive(Debug)]
pub(crate) struct Intake {
    /// `None` once it ended, and while `unsubscribe` or `drain` awaits it.
    subscriber: Option<Subscriber>,
    admission: Admission,
    /// The application's waker from its last poll. The watchdog polls the
    /// channel with it, so the channel keeps waking the application and not
    /// the watchdog, and wakes it when it admitted messages for it.
    waker: Option<Waker>,
    /// async-nats ended the subscriber (unsubscribed, drained, closed).
    ended: bool,
}

impl Intake {
    pub(crate) fn new(subscriber: Subscriber, stats: Arc<SubscriptionStats>) -> Self {
        Intake {
            subscriber: Some(subscriber),
            admission: Admission::new(stats, INITIAL_CAPACITY),
            waker: None,
            ended: false,
        }
    }

    /// True once async-nats ended the subscriber.
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Takes everything async-nats holds for this subscription now,
    /// admitting or dropping each message, and publishes the counts. Polls
    /// with `waker`, which the channel wakes when the next message arrives.
    fn take(&mut self, waker: &Waker) {
        let Some(subscriber) = self.subscriber.as_mut() else {
            return;
        };
        let mut cx = Context::from_waker(waker);
        loop {
            match subscriber.poll_next_unpin(&mut cx) {
                Poll::Ready(Some(m)) => {
                    if let Some(queue) = self.admission.admit(m.payload.len()) {
                        queue.push_back(m);
                    }
                }
                Poll::Ready(None) => {
                    self.subscriber = None;
                    self.ended = true;
                    break;
                }
                // Nothing more now (or Tokio's budget for this task is
                // spent, in which case the waker has been woken already).
                Poll::Pending => break,
            }
        }
        self.admission.publish();
    }

    /// The application's side: takes what async-nats holds and moves every
    /// admitted message, the watchdog's included, into `local`.
    pub(crate) fn take_for_application(&mut self, cx: &Context<'_>, local: &mut VecDeque<Message>) {
        match &self.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => self.waker = Some(cx.waker().clone()),
        }
        self.take(cx.waker());
        self.admission.hand_over(local);
    }

    /// The watchdog's side: takes what async-nats holds and wakes the
    /// application if it admitted anything for it.
    fn take_for_watchdog(&mut self) {
        let waker = self.waker.clone().unwrap_or_else(|| Waker::noop().clone());
        let before = self.admission.admitted();
        self.take(&waker);
        if self.admission.admitted() > before {
            waker.wake();
        }
    }

    /// Takes the subscriber out, for `unsubscribe` or `drain`, which await
    /// it without the lock; `None` if it ended or is already out.
    pub(crate) fn lend_subscriber(&mut self) -> Option<Subscriber> {
        self.subscriber.take()
    }

    /// Puts the subscriber back after `unsubscribe` or `drain`; `ended` if
    /// they failed, which ends the stream after what was already admitted.
    pub(crate) fn return_subscriber(&mut self, subscriber: Subscriber, ended: bool) {
        if ended {
            self.ended = true;
        } else {
            self.subscriber = Some(subscriber);
        }
    }
}

/// Locks an intake. A panic while holding it cannot leave it inconsistent
/// (the counts are published from the admission's own totals), so poisoning
/// is ignored.
pub(crate) fn lock(intake: &Mutex<Intake>) -> MutexGuard<'_, Intake> {
    intake.lock().unwrap_or_else(|e| e.into_inner())
}

type Intakes = Mutex<Vec<Weak<Mutex<Intake>>>>;

/// The intakes of one `ClientMetrics` and the task that takes from them
/// every [`WATCH_INTERVAL`].
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    intakes: Arc<Intakes>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    /// Watches `intake` from now on, and starts the task on the current
    /// Tokio runtime if it is not running (first subscription, or the
    /// runtime it ran on has shut down).
    pub(crate) fn watch(&self, intake: &Arc<Mutex<Intake>>) {
        self.intakes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(intake));
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            let intakes = Arc::downgrade(&self.intakes);
            // Unconstrained: Tokio's budget would otherwise make a channel
            // answer "pending" part-way and wake the application for nothing.
            *task = Some(tokio::spawn(tokio::task::unconstrained(watch(intakes))));
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

async fn watch(intakes: Weak<Intakes>) {
    let mut interval = tokio::time::interval(WATCH_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(intakes) = intakes.upgrade() else {
            return;
        };
        let live: Vec<Arc<Mutex<Intake>>> = {
            let mut list = intakes.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|i| i.strong_count() > 0);
            list.iter().filter_map(Weak::upgrade).collect()
        };
        drop(intakes);
        for intake in live {
            // Held by the application: it is taking messages itself.
            let mut guard = match intake.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            guard.take_for_watchdog();
        }
    }
}
