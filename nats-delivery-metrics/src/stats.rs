//! The counters of one subscription and of one JetStream consumer: the
//! bottom of the crate, written by intakes and streams, read by the shared
//! state, the collector and the reports.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::limits::PendingLimits;

/// Adds `n` to a counter that only the calling task writes.
#[inline]
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Release);
}

/// The numbers of one instrumented subscription.
#[derive(Debug)]
pub(crate) struct SubscriptionStats {
    pub(crate) name: Arc<str>,
    pub(crate) limits: PendingLimits,
    /// Messages admitted into the subscription's queue (writer: the intake).
    pub(crate) admitted: AtomicU64,
    /// Payload bytes of `admitted` (writer: the intake).
    pub(crate) admitted_bytes: AtomicU64,
    /// Messages dropped because a limit was reached (writer: the intake).
    pub(crate) dropped: AtomicU64,
    /// Payload bytes of `dropped` (writer: the intake).
    pub(crate) dropped_bytes: AtomicU64,
    /// Highest number of pending messages seen (writer: the intake).
    pub(crate) high_water: AtomicU64,
    /// Messages handed to the application (writer: the application's stream).
    pub(crate) delivered: AtomicU64,
    /// Payload bytes of `delivered` (writer: the application's stream).
    pub(crate) delivered_bytes: AtomicU64,
    /// Set when the application drops its `Subscription`: from then on only
    /// its counters are reported, even while its intake winds down.
    pub(crate) closed: AtomicBool,
}

impl SubscriptionStats {
    pub(crate) fn new(name: Arc<str>, limits: PendingLimits) -> Self {
        SubscriptionStats {
            name,
            limits,
            admitted: AtomicU64::new(0),
            admitted_bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            delivered_bytes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Pending messages and bytes: admitted but not yet handed out. Reading
    /// `delivered` before `admitted` keeps the difference from going negative.
    /// Messages taken out of the async-nats subscriber
    /// (admitted or dropped). Both counters only grow.
    pub(crate) fn taken(&self) -> u64 {
        self.admitted.load(Ordering::Acquire) + self.dropped.load(Ordering::Acquire)
    }

    pub(crate) fn pending(&self) -> (u64, u64) {
        let delivered = self.delivered.load(Ordering::Acquire);
        let delivered_bytes = self.delivered_bytes.load(Ordering::Acquire);
        let admitted = self.admitted.load(Ordering::Acquire);
        let admitted_bytes = self.admitted_bytes.load(Ordering::Acquire);
        (
            admitted.saturating_sub(delivered),
            admitted_bytes.saturating_sub(delivered_bytes),
        )
    }
}

#[derive(Debug)]
pub(crate) struct ConsumerStats {
    pub(crate) stream: String,
    pub(crate) consumer: String,
    pub(crate) received: AtomicU64,
    pub(crate) redelivered: AtomicU64,
    pub(crate) acks: AtomicU64,
    pub(crate) naks: AtomicU64,
    pub(crate) terms: AtomicU64,
    pub(crate) in_progress: AtomicU64,
    pub(crate) ack_errors: AtomicU64,
    /// Last batch / buffer ratio given to `check_pull_batch`, as f64 bits.
    pub(crate) batch_ratio_bits: AtomicU64,
    pub(crate) batch_checked: std::sync::atomic::AtomicBool,
}
