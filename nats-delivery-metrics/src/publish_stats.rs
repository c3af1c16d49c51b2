//! Counters of the publishing side: JetStream publish outcomes and core
//! requests nobody answered, and their exposition.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_nats::jetstream::context::PublishError;
use async_nats::jetstream::publish::PublishAck;

use crate::PublishFailure;

/// Written by every task that publishes, so counted with `fetch_add`.
#[derive(Debug, Default)]
pub(crate) struct PublishStats {
    /// Set once a JetStream publisher exists: the publish families appear
    /// (at 0) from then on.
    pub(crate) publishing: AtomicBool,
    /// Set once an `InstrumentedClient` exists: the no-responders family
    /// appears (at 0) from then on.
    pub(crate) requesting: AtomicBool,
    stored: AtomicU64,
    duplicates: AtomicU64,
    failures: [AtomicU64; PublishFailure::ALL.len()],
    no_responders: AtomicU64,
}

fn index(reason: PublishFailure) -> usize {
    PublishFailure::ALL
        .iter()
        .position(|r| *r == reason)
        .expect("every reason is in ALL")
}

impl PublishStats {
    pub(crate) fn enable_publishing(&self) {
        self.publishing.store(true, Ordering::Release);
    }

    pub(crate) fn enable_requests(&self) {
        self.requesting.store(true, Ordering::Release);
    }

    pub(crate) fn record_no_responders(&self) {
        self.no_responders.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_failure(&self, reason: PublishFailure) {
        self.failures[index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the answer to a publish that was sent. Returns whether a reply
    /// message arrived (an acknowledgement, an API error or a no-responders
    /// status), which the connection audit counts as taken.
    pub(crate) fn record_answer(&self, answer: &Result<PublishAck, PublishError>) -> bool {
        match answer {
            Ok(ack) if ack.duplicate => {
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(_) => {
                self.stored.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                let reason = PublishFailure::of(e);
                self.record_failure(reason);
                use async_nats::jetstream::context::PublishErrorKind as K;
                !matches!(e.kind(), K::TimedOut | K::BrokenPipe)
            }
        }
    }

    pub(crate) fn stored(&self) -> u64 {
        self.stored.load(Ordering::Relaxed)
    }

    pub(crate) fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    pub(crate) fn failures(&self, reason: PublishFailure) -> u64 {
        self.failures[index(reason)].load(Ordering::Relaxed)
    }

    pub(crate) fn no_responders(&self) -> u64 {
        self.no_responders.load(Ordering::Relaxed)
    }
}
