//! Counting advisories exactly once.
//!
//! Servers have re-sent advisories after leader changes, and in durable mode
//! an advisory is redelivered if its acknowledgement was lost. Each event is
//! therefore remembered by (account, stream, consumer, kind, stream_seq) for
//! the last `window` events; NAKs also key on the delivery count, since one
//! message can be NAKed once per delivery.

use std::collections::{HashMap, HashSet, VecDeque};

use super::metrics::{AccountLabels, AdvisoryMetrics, ConsumerLabels, ReasonLabels};
use super::parse::{self, Advisory, AdvisoryKind, ParseError};

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct EventKey {
    consumer: u32,
    kind: u8,
    stream_seq: u64,
    deliveries: u64,
}

/// Remembers the last `window` events seen; exact (no hashing shortcuts):
/// consumers are interned to small ids, so each entry costs a few dozen bytes.
#[derive(Debug)]
pub(super) struct Deduplicator {
    window: usize,
    consumers: HashMap<(String, String), u32>,
    seen: HashSet<EventKey>,
    order: VecDeque<EventKey>,
}

impl Deduplicator {
    /// Remembers at most `window` events (at least 1).
    pub(super) fn new(window: usize) -> Self {
        Deduplicator {
            window: window.max(1),
            consumers: HashMap::new(),
            seen: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// True the first time an event is offered within the window.
    pub(super) fn first_time(&mut self, a: &Advisory) -> bool {
        let next_id = self.consumers.len() as u32;
        let consumer = match self.consumers.get(&(a.stream.clone(), a.consumer.clone())) {
            Some(id) => *id,
            None => {
                self.consumers
                    .insert((a.stream.clone(), a.consumer.clone()), next_id);
                next_id
            }
        };
        let (kind, deliveries) = match a.kind {
            AdvisoryKind::MaxDeliveries => (0, 0),
            AdvisoryKind::Terminated(_) => (1, 0),
            AdvisoryKind::Nak => match a.deliveries {
                Some(d) => (2, d),
                // Without the delivery count two NAKs of one message look
                // alike: count them all rather than drop a real one.
                None => return true,
            },
        };
        let key = EventKey {
            consumer,
            kind,
            stream_seq: a.stream_seq,
            deliveries,
        };
        if !self.seen.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > self.window {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }
}

/// What one advisory message amounted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Counted now.
    Counted(Advisory),
    /// Already counted within the window; not counted again.
    Duplicate(Advisory),
    /// Not a valid advisory.
    Malformed,
    /// Valid, of a type not counted.
    Unknown,
}

/// Stream and consumer label value of the series that collects advisories
/// beyond an account's cap of distinct series.
pub(super) const OVERFLOW: &str = "__overflow__";

/// Caps the distinct (stream, consumer) series of one account: advisories
/// can be published by anyone allowed to, and every new name would
/// otherwise be a series kept forever.
#[derive(Debug)]
pub(super) struct SeriesCap {
    max: usize,
    known: HashSet<(String, String)>,
}

impl SeriesCap {
    /// At most `max` distinct series (at least 1).
    pub(super) fn new(max: usize) -> Self {
        SeriesCap {
            max: max.max(1),
            known: HashSet::new(),
        }
    }

    /// True if the series is (or may now become) one of the kept ones;
    /// false if it must be folded into [`OVERFLOW`].
    pub(super) fn admit(&mut self, stream: &str, consumer: &str) -> bool {
        let key = (stream.to_string(), consumer.to_string());
        if self.known.contains(&key) {
            return true;
        }
        if self.known.len() >= self.max {
            return false;
        }
        self.known.insert(key);
        true
    }
}

/// Counts one account's advisories into the shared metrics (live mode).
#[derive(Debug)]
pub(crate) struct AdvisoryCounter {
    account: String,
    account_labels: AccountLabels,
    metrics: AdvisoryMetrics,
    dedup: Deduplicator,
    cap: SeriesCap,
}

impl AdvisoryCounter {
    /// A counter for `account`, remembering `dedup_window` events and
    /// keeping at most `max_series` distinct (stream, consumer) series.
    pub(crate) fn new(
        account: &str,
        metrics: AdvisoryMetrics,
        dedup_window: usize,
        max_series: usize,
    ) -> Self {
        metrics.init_account(account, false);
        AdvisoryCounter {
            account: account.to_string(),
            account_labels: AccountLabels {
                account: account.to_string(),
            },
            metrics,
            dedup: Deduplicator::new(dedup_window),
            cap: SeriesCap::new(max_series),
        }
    }

    /// The account label value.
    pub(crate) fn account(&self) -> &str {
        &self.account
    }

    /// Counts one advisory payload.
    pub(crate) fn record(&mut self, subject: &str, payload: &[u8]) -> Outcome {
        self.metrics
            .received
            .get_or_create(&self.account_labels)
            .inc();
        let mut advisory = match parse::parse_on(subject, payload) {
            Ok(a) => a,
            Err(ParseError::Malformed(why)) => {
                self.metrics
                    .malformed
                    .get_or_create(&self.account_labels)
                    .inc();
                tracing::warn!(account = %self.account, subject, "{why}");
                return Outcome::Malformed;
            }
            Err(ParseError::UnknownType(kind)) => {
                self.metrics
                    .unknown
                    .get_or_create(&self.account_labels)
                    .inc();
                tracing::debug!(account = %self.account, subject, kind, "advisory not counted");
                return Outcome::Unknown;
            }
        };
        if !self.cap.admit(&advisory.stream, &advisory.consumer) {
            // Folded series are not de-duplicated: their names would have
            // to be remembered, which is what the cap prevents.
            self.metrics
                .folded
                .get_or_create(&self.account_labels)
                .inc();
            advisory.stream = OVERFLOW.to_string();
            advisory.consumer = OVERFLOW.to_string();
        } else if !self.dedup.first_time(&advisory) {
            self.metrics
                .duplicates
                .get_or_create(&self.account_labels)
                .inc();
            return Outcome::Duplicate(advisory);
        }
        let consumer = ConsumerLabels {
            account: self.account.clone(),
            stream: advisory.stream.clone(),
            consumer: advisory.consumer.clone(),
        };
        match advisory.kind {
            AdvisoryKind::MaxDeliveries => {
                self.metrics.max_deliveries.get_or_create(&consumer).inc();
            }
            AdvisoryKind::Nak => {
                self.metrics.naks.get_or_create(&consumer).inc();
            }
            AdvisoryKind::Terminated(reason) => {
                let labels = ReasonLabels {
                    account: consumer.account,
                    stream: consumer.stream,
                    consumer: consumer.consumer,
                    reason: reason.as_label().to_string(),
                };
                self.metrics.terminated.get_or_create(&labels).inc();
            }
        }
        Outcome::Counted(advisory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBJECT: &str = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C";

    fn md(seq: u64) -> Vec<u8> {
        format!(r#"{{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"C","stream_seq":{seq},"deliveries":4}}"#).into_bytes()
    }

    #[test]
    fn counts_each_message_once_within_the_window() {
        let metrics = AdvisoryMetrics::default();
        let mut c = AdvisoryCounter::new("A", metrics.clone(), 3, 10);
        for seq in [1, 2, 1, 3, 2] {
            c.record(SUBJECT, &md(seq));
        }
        let l = ConsumerLabels {
            account: "A".into(),
            stream: "S".into(),
            consumer: "C".into(),
        };
        assert_eq!(metrics.max_deliveries.get_or_create(&l).get(), 3);
        // seq 1 left the 3-entry window after 2, 3, 4 arrived: counted again.
        c.record(SUBJECT, &md(4));
        c.record(SUBJECT, &md(1));
        assert_eq!(metrics.max_deliveries.get_or_create(&l).get(), 5);
        let a = AccountLabels {
            account: "A".into(),
        };
        assert_eq!(metrics.duplicates.get_or_create(&a).get(), 2);
        assert_eq!(metrics.received.get_or_create(&a).get(), 7);
    }

    #[test]
    fn series_beyond_the_cap_are_folded() {
        let metrics = AdvisoryMetrics::default();
        let mut c = AdvisoryCounter::new("A", metrics.clone(), 100, 2);
        for (i, name) in ["C1", "C2", "C3", "C4", "C1"].iter().enumerate() {
            let p = format!(
                r#"{{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"{name}","stream_seq":{i},"deliveries":4}}"#
            );
            let s = format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.{name}");
            c.record(&s, p.as_bytes());
        }
        let count = |stream: &str, consumer: &str| {
            metrics
                .max_deliveries
                .get_or_create(&ConsumerLabels {
                    account: "A".into(),
                    stream: stream.into(),
                    consumer: consumer.into(),
                })
                .get()
        };
        assert_eq!((count("S", "C1"), count("S", "C2")), (2, 1));
        assert_eq!(count(OVERFLOW, OVERFLOW), 2);
        let a = AccountLabels {
            account: "A".into(),
        };
        assert_eq!(metrics.folded.get_or_create(&a).get(), 2);
    }
}
