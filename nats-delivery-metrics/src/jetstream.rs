//! JetStream helpers: what the application itself sees of a consumer.
//!
//! The server knows how often it delivered a message; only the application
//! knows which redeliveries reached it and how it answered. These counters
//! complement the exporter's `/jsz` numbers and advisories.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};

use crate::state::Shared;
use crate::stats::ConsumerStats;
use crate::Error;

/// How the application answers a JetStream message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acknowledgement {
    /// Processed; do not send again.
    Ack,
    /// Not processed; send again (after the delay, if given).
    Nak(Option<Duration>),
    /// Never send again, not processed.
    Term,
    /// Still working; extend the ack wait.
    InProgress,
}

impl Acknowledgement {
    fn kind(self) -> AckKind {
        match self {
            Acknowledgement::Ack => AckKind::Ack,
            Acknowledgement::Nak(d) => AckKind::Nak(d),
            Acknowledgement::Term => AckKind::Term,
            Acknowledgement::InProgress => AckKind::Progress,
        }
    }
}

/// Counters for one JetStream consumer, from
/// [`ClientMetrics::jetstream_consumer`](crate::ClientMetrics::jetstream_consumer).
/// Cheap to clone; clones count into the same series.
///
/// ```no_run
/// # async fn run(metrics: nats_delivery_metrics::ClientMetrics,
/// #              mut messages: async_nats::jetstream::consumer::pull::Stream)
/// #              -> Result<(), Box<dyn std::error::Error>> {
/// use futures::StreamExt;
/// use nats_delivery_metrics::Acknowledgement;
/// let orders = metrics.jetstream_consumer("ORDERS", "billing");
/// while let Some(message) = messages.next().await {
///     let message = message?;
///     orders.received(&message);
///     orders.acknowledge(&message, Acknowledgement::Ack).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ConsumerMetrics {
    stats: Arc<ConsumerStats>,
}

impl ConsumerMetrics {
    pub(crate) fn new(shared: &Shared, stream: &str, consumer: &str) -> Self {
        let mut consumers = shared.consumers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = consumers
            .iter()
            .find(|s| s.stream == stream && s.consumer == consumer)
        {
            return ConsumerMetrics { stats: s.clone() };
        }
        let stats = Arc::new(ConsumerStats {
            stream: stream.to_string(),
            consumer: consumer.to_string(),
            received: AtomicU64::new(0),
            redelivered: AtomicU64::new(0),
            acks: AtomicU64::new(0),
            naks: AtomicU64::new(0),
            terms: AtomicU64::new(0),
            in_progress: AtomicU64::new(0),
            ack_errors: AtomicU64::new(0),
            batch_ratio_bits: AtomicU64::new(0),
            batch_checked: Default::default(),
        });
        consumers.push(stats.clone());
        ConsumerMetrics { stats }
    }

    /// Counts a message the application received; a redelivery if the
    /// server says it delivered it more than once (`info().delivered > 1`).
    /// Returns whether it was a redelivery.
    pub fn received(&self, message: &Message) -> bool {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let redelivered = message.info().map(|i| i.delivered > 1).unwrap_or(false);
        if redelivered {
            self.stats.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        redelivered
    }

    /// Sends `ack` for `message` and counts it once the client accepted it.
    /// A failure is counted as an acknowledgement error and returned.
    pub async fn acknowledge(&self, message: &Message, ack: Acknowledgement) -> Result<(), Error> {
        match message.ack_with(ack.kind()).await {
            Ok(()) => {
                self.record(ack);
                Ok(())
            }
            Err(e) => {
                self.stats.ack_errors.fetch_add(1, Ordering::Relaxed);
                Err(Error::acknowledge(e))
            }
        }
    }

    /// Counts an acknowledgement the application sent by other means.
    pub fn record(&self, ack: Acknowledgement) {
        self.counter(ack).fetch_add(1, Ordering::Relaxed);
    }

    fn counter(&self, ack: Acknowledgement) -> &AtomicU64 {
        let s = &self.stats;
        match ack {
            Acknowledgement::Ack => &s.acks,
            Acknowledgement::Nak(_) => &s.naks,
            Acknowledgement::Term => &s.terms,
            Acknowledgement::InProgress => &s.in_progress,
        }
    }

    /// Messages counted by [`Self::received`].
    pub fn received_messages(&self) -> u64 {
        self.stats.received.load(Ordering::Relaxed)
    }

    /// Redeliveries among [`Self::received_messages`].
    pub fn redelivered_messages(&self) -> u64 {
        self.stats.redelivered.load(Ordering::Relaxed)
    }

    /// Acknowledgements of the kind of `ack` counted so far (the delay of a
    /// `Nak` does not matter).
    pub fn acknowledgements(&self, ack: Acknowledgement) -> u64 {
        self.counter(ack).load(Ordering::Relaxed)
    }

    /// Acknowledgements the client failed to send.
    pub fn acknowledgement_errors(&self) -> u64 {
        self.stats.ack_errors.load(Ordering::Relaxed)
    }

    /// Checks a pull consumer's batch size against what the connection can
    /// buffer per subscription (async-nats' `subscription_capacity`).
    ///
    /// When async-nats drops part of a pull batch the consumer stalls until
    /// the pull expires and the server redelivers, so the batch should stay
    /// at or below two thirds of the capacity (capacity >= 1.5 x batch). The
    /// ratio `batch / capacity` is exported as a gauge; returns `false` when
    /// it is above 2/3.
    pub fn check_pull_batch(&self, batch: usize, subscription_capacity: usize) -> bool {
        let ratio = batch as f64 / subscription_capacity.max(1) as f64;
        self.stats
            .batch_ratio_bits
            .store(ratio.to_bits(), Ordering::Relaxed);
        self.stats.batch_checked.store(true, Ordering::Release);
        batch.saturating_mul(3) <= subscription_capacity.saturating_mul(2)
    }
}

/// One consumer's numbers at one moment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConsumerSnapshot {
    pub(crate) stream: String,
    pub(crate) consumer: String,
    pub(crate) received: u64,
    pub(crate) redelivered: u64,
    /// `(kind label, count)`: ack, nak, term, in_progress.
    pub(crate) acknowledgements: [(&'static str, u64); 4],
    pub(crate) ack_errors: u64,
    pub(crate) batch_ratio: Option<f64>,
}

impl Shared {
    pub(crate) fn consumer_snapshot(&self) -> Vec<ConsumerSnapshot> {
        let consumers = self.consumers.lock().unwrap_or_else(|e| e.into_inner());
        let v = |c: &AtomicU64| c.load(Ordering::Relaxed);
        consumers
            .iter()
            .map(|s| ConsumerSnapshot {
                stream: s.stream.clone(),
                consumer: s.consumer.clone(),
                received: v(&s.received),
                redelivered: v(&s.redelivered),
                acknowledgements: [
                    ("ack", v(&s.acks)),
                    ("nak", v(&s.naks)),
                    ("term", v(&s.terms)),
                    ("in_progress", v(&s.in_progress)),
                ],
                ack_errors: v(&s.ack_errors),
                batch_ratio: s
                    .batch_checked
                    .load(Ordering::Acquire)
                    .then(|| f64::from_bits(s.batch_ratio_bits.load(Ordering::Relaxed))),
            })
            .collect()
    }
}
