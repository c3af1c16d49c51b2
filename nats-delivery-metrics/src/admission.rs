//! The pending limits: every message is admitted or dropped (and counted)
//! as it leaves the async-nats subscriber, and the admitted ones wait in a
//! queue until they are handed to the application in one step.
//!
//! Why decide on the way in: an `async_nats::Message` is 184 bytes and every
//! move is a copy; copying messages is most of what the crate adds per
//! message. Collecting a batch first and sorting it afterwards moved each
//! message into the batch and out of it again; now it is moved into the
//! queue once and out of it once. While the application keeps up, the
//! hand-over swaps two queues instead of copying.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_nats::Message;

use crate::stats::SubscriptionStats;

/// Counts and admitted messages of one subscription not yet published to
/// the application. Only the holder of the subscription's intake lock writes
/// the counters it publishes, so it keeps the running totals here and
/// stores them.
#[derive(Debug)]
pub(crate) struct Admission {
    stats: Arc<SubscriptionStats>,
    /// Admitted, not yet handed over.
    incoming: VecDeque<Message>,
    /// Messages taken from async-nats since the counts were last published.
    taken: usize,
    admitted: u64,
    admitted_bytes: u64,
    dropped: u64,
    dropped_bytes: u64,
    high_water: u64,
    /// What the application had taken when last read.
    delivered: (u64, u64),
}

impl Admission {
    pub(crate) fn new(stats: Arc<SubscriptionStats>, capacity: usize) -> Self {
        Admission {
            stats,
            incoming: VecDeque::with_capacity(capacity),
            taken: 0,
            admitted: 0,
            admitted_bytes: 0,
            dropped: 0,
            dropped_bytes: 0,
            high_water: 0,
            delivered: (0, 0),
        }
    }

    fn taken_by_application(&self) -> (u64, u64) {
        (
            self.stats.delivered.load(Ordering::Acquire),
            self.stats.delivered_bytes.load(Ordering::Acquire),
        )
    }

    /// Decides about the next message, of `len` payload bytes, and counts
    /// it: the queue to push it to if it is admitted, `None` if it is
    /// dropped. Taking the length rather than the message lets the caller
    /// move the message from where async-nats put it straight into the queue.
    #[inline]
    pub(crate) fn admit(&mut self, len: usize) -> Option<&mut VecDeque<Message>> {
        // What the application has taken, read once per batch: it only
        // grows, so a stale value can only overstate pending. Before a
        // message would be dropped or raise the high-water mark, it is read
        // again, so both decisions use a fresh value; the common case (the
        // application keeps up) reads no cache line the application writes.
        if self.taken == 0 {
            self.delivered = self.taken_by_application();
        }
        self.taken += 1;
        let len = len as u64;
        let limits = self.stats.limits;
        let over = |(delivered, delivered_bytes): (u64, u64)| {
            let pending = self.admitted - delivered;
            let over_limit = pending + 1 > limits.messages
                || self.admitted_bytes - delivered_bytes + len > limits.bytes;
            (over_limit, pending)
        };
        let (mut over_limit, mut pending) = over(self.delivered);
        if over_limit || pending + 1 > self.high_water {
            self.delivered = self.taken_by_application();
            (over_limit, pending) = over(self.delivered);
        }
        if over_limit {
            self.dropped += 1;
            self.dropped_bytes += len;
            None
        } else {
            self.admitted += 1;
            self.admitted_bytes += len;
            self.high_water = self.high_water.max(pending + 1);
            Some(&mut self.incoming)
        }
    }

    /// Messages admitted so far.
    pub(crate) fn admitted(&self) -> u64 {
        self.admitted
    }

    /// Publishes the counts and starts the next batch; call with the intake
    /// locked, before [`Self::hand_over`], so the application never sees a
    /// message before it is counted as admitted.
    pub(crate) fn publish(&mut self) {
        self.taken = 0;
        let s = &self.stats;
        s.admitted_bytes
            .store(self.admitted_bytes, Ordering::Release);
        s.admitted.store(self.admitted, Ordering::Release);
        s.dropped_bytes.store(self.dropped_bytes, Ordering::Release);
        s.dropped.store(self.dropped, Ordering::Release);
        s.high_water.store(self.high_water, Ordering::Release);
    }

    /// Moves the admitted messages to the application's `queue`.
    pub(crate) fn hand_over(&mut self, queue: &mut VecDeque<Message>) {
        if self.incoming.is_empty() {
            return;
        }
        if queue.is_empty() {
            // The application has taken everything: no copy, and the queue
            // it emptied becomes the next `incoming`. `clear` moves an empty
            // ring's start back to the beginning of its buffer, so the
            // messages keep going through the same few cache lines.
            queue.clear();
            std::mem::swap(queue, &mut self.incoming);
        } else {
            queue.append(&mut self.incoming);
        }
    }
}
