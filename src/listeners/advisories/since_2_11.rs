//! The account advisories servers added after 2.10: atomic batch publishes
//! abandoned (2.12+) and priority groups pinning and unpinning a client
//! (2.11+), from nats-server `server/jetstream_events.go`.
//!
//! - `$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>`
//!   (`io.nats.jetstream.advisory.v1.stream_batch_abandoned`): `stream`,
//!   `batch`, `reason` (`timeout`: no commit within the batch timeout, 10 s by
//!   default; `large`; `incomplete`: a gap in `Nats-Batch-Sequence`;
//!   `unsupported`). None of the batch's messages were stored: the publisher
//!   learns it only if it waits for the commit's answer.
//! - `$JS.EVENT.ADVISORY.CONSUMER.PINNED|UNPINNED.<stream>.<consumer>`
//!   (`...v1.consumer_group_pinned` / `..._unpinned`, the latter with
//!   `reason`, `timeout` when the pinned client stopped pulling): a group
//!   switching clients holds its messages back until the next pin.
//!
//! In durable mode the advisory stream the exporter creates captures these
//! subjects too, and they are counted from it, stored with the other totals
//! ([`super::batch`]): made while the exporter is stopped, counted after it
//! starts; handed out again, not counted again. An advisory stream made
//! before, which does not capture them, is left as it is, and they are read
//! live instead (as in live mode: only while the exporter runs). Each
//! advisory is counted once (by its `id`); the series are per stream, not
//! per consumer.

use std::collections::{HashSet, VecDeque};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Deserialize;

use super::parse::MAX_NAME_LEN;
use super::totals::Totals;

/// Subject prefix of abandoned-batch advisories (`.<stream>` follows).
pub(crate) const BATCH_PREFIX: &str = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.";
/// Subject prefix of pinned advisories (`.<stream>.<consumer>` follows).
const PINNED_PREFIX: &str = "$JS.EVENT.ADVISORY.CONSUMER.PINNED.";
/// Subject prefix of unpinned advisories.
const UNPINNED_PREFIX: &str = "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.";
/// The subjects read.
pub(crate) const SUBJECTS: [&str; 3] = [
    "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>",
    "$JS.EVENT.ADVISORY.CONSUMER.PINNED.>",
    "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.>",
];
const BATCH_TYPE: &str = "io.nats.jetstream.advisory.v1.stream_batch_abandoned";
const PINNED_TYPE: &str = "io.nats.jetstream.advisory.v1.consumer_group_pinned";
const UNPINNED_TYPE: &str = "io.nats.jetstream.advisory.v1.consumer_group_unpinned";
/// Abandon reasons the server sends; anything else is `other`.
const BATCH_REASONS: [&str; 4] = ["timeout", "large", "incomplete", "unsupported"];
/// Unpin reasons the server sends; anything else is `other`.
const UNPIN_REASONS: [&str; 2] = ["timeout", "admin"];
/// Stream label value beyond the cap of distinct streams (as for the
/// delivery advisories; not imported, so that the metrics can name this
/// module without a cycle).
pub(crate) const OVERFLOW: &str = "__overflow__";
/// Advisory ids remembered to count each advisory once.
const ID_WINDOW: usize = 4096;

/// `{account,stream,reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StreamReasonLabels {
    /// Account label.
    pub(crate) account: String,
    /// Stream name.
    pub(crate) stream: String,
    /// Why.
    pub(crate) reason: String,
}

/// The families; cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub(crate) struct Since211Metrics {
    /// Atomic batches abandoned, by reason.
    pub(crate) batches_abandoned: Family<StreamReasonLabels, Counter>,
    /// Priority groups that pinned a client (reason is always `pinned`).
    pub(crate) pins: Family<StreamReasonLabels, Counter>,
    /// Priority groups that lost their pinned client, by reason.
    pub(crate) unpins: Family<StreamReasonLabels, Counter>,
}

impl Since211Metrics {
    /// Shows one stream's stored totals (durable mode): each counter rises
    /// to the stored value and never falls.
    pub(crate) fn show(&self, account: &str, t: &Totals) {
        let labels = |reason: &str| StreamReasonLabels {
            account: account.to_string(),
            stream: t.stream.clone(),
            reason: reason.to_string(),
        };
        let raise = |c: &Counter, v: u64| {
            c.inner().fetch_max(v, std::sync::atomic::Ordering::Relaxed);
        };
        for (reason, v) in &t.batches_abandoned {
            raise(&self.batches_abandoned.get_or_create(&labels(reason)), *v);
        }
        if t.pins > 0 {
            raise(&self.pins.get_or_create(&labels("pinned")), t.pins);
        }
        for (reason, v) in &t.unpins {
            raise(&self.unpins.get_or_create(&labels(reason)), *v);
        }
    }

    /// Removes one stream's series (its stored totals are gone).
    pub(crate) fn forget(&self, account: &str, stream: &str) {
        let of = |f: &Family<StreamReasonLabels, Counter>, reasons: &[&str]| {
            for reason in reasons.iter().chain(&["other"]) {
                f.remove(&StreamReasonLabels {
                    account: account.to_string(),
                    stream: stream.to_string(),
                    reason: reason.to_string(),
                });
            }
        };
        of(&self.batches_abandoned, &BATCH_REASONS);
        of(&self.pins, &["pinned"]);
        of(&self.unpins, &UNPIN_REASONS);
    }

    /// Registers the families.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "nats_delivery_jetstream_batches_abandoned",
            "Atomic batch publishes the stream abandoned without storing them, by reason (timeout, large, incomplete, unsupported, other), from advisories (servers 2.12+)",
            self.batches_abandoned.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_priority_group_pins",
            "Times a consumer of the stream pinned a client of a pinned_client priority group, from advisories (servers 2.11+)",
            self.pins.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_priority_group_unpins",
            "Times a consumer of the stream unpinned the client of a priority group, by reason (timeout, admin, other), from advisories (servers 2.11+)",
            self.unpins.clone(),
        );
    }
}

#[derive(Deserialize)]
struct Wire {
    #[serde(rename = "type")]
    kind: String,
    id: String,
    stream: String,
    #[serde(default)]
    consumer: String,
    #[serde(default)]
    reason: String,
}

/// What one advisory counts.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Event {
    /// The advisory's `id`.
    pub(crate) id: String,
    /// `batch`, `pinned` or `unpinned`.
    pub(crate) kind: &'static str,
    /// The stream it is about.
    pub(crate) stream: String,
    /// Its reason label.
    pub(crate) reason: String,
}

impl Event {
    /// Adds this event to a stream's stored totals.
    pub(crate) fn add_to(&self, t: &mut Totals) {
        match self.kind {
            "batch" => *t.batches_abandoned.entry(self.reason.clone()).or_default() += 1,
            "pinned" => t.pins += 1,
            _ => *t.unpins.entry(self.reason.clone()).or_default() += 1,
        }
    }

    /// A stable number for the `id` (FNV-1a), to remember it among a
    /// stored key's recent events across restarts.
    pub(crate) fn id_hash(&self) -> u64 {
        self.id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }
}

fn known(reason: &str, known: &[&str]) -> String {
    let r = if known.contains(&reason) {
        reason
    } else {
        "other"
    };
    r.to_string()
}

/// Parses one advisory received on `subject`; the subject must be the one
/// the server would have used, or the advisory was forged.
pub(crate) fn parse(subject: &str, payload: &[u8]) -> Result<Event, String> {
    let w: Wire = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    let (kind, expected_subject, reason) = match w.kind.as_str() {
        BATCH_TYPE => (
            "batch",
            format!("{BATCH_PREFIX}{}", w.stream),
            known(&w.reason, &BATCH_REASONS),
        ),
        PINNED_TYPE => (
            "pinned",
            format!("{PINNED_PREFIX}{}.{}", w.stream, w.consumer),
            "pinned".to_string(),
        ),
        UNPINNED_TYPE => (
            "unpinned",
            format!("{UNPINNED_PREFIX}{}.{}", w.stream, w.consumer),
            known(&w.reason, &UNPIN_REASONS),
        ),
        other => return Err(format!("type {other:?} on {subject}")),
    };
    if w.id.is_empty() || w.stream.is_empty() || w.stream.len() > MAX_NAME_LEN {
        return Err("no id or no valid stream name".into());
    }
    if kind != "batch" && (w.consumer.is_empty() || w.consumer.len() > MAX_NAME_LEN) {
        return Err("no valid consumer name".into());
    }
    if subject != expected_subject {
        return Err(format!("subject {subject} does not match the payload"));
    }
    Ok(Event {
        id: w.id,
        kind,
        stream: w.stream,
        reason,
    })
}

/// Counts one account's advisories of these kinds.
#[derive(Debug)]
pub(crate) struct Since211Counter {
    account: String,
    metrics: Since211Metrics,
    malformed: Counter,
    max_streams: usize,
    streams: HashSet<String>,
    seen: HashSet<String>,
    order: VecDeque<String>,
}

impl Since211Counter {
    /// A counter for `account`, at most `max_series` distinct streams;
    /// garbage goes to `malformed` (the account's malformed advisories).
    pub(crate) fn new(
        account: &str,
        metrics: Since211Metrics,
        malformed: Counter,
        max_series: usize,
    ) -> Self {
        Since211Counter {
            account: account.to_string(),
            metrics,
            malformed,
            max_streams: max_series.max(1),
            streams: HashSet::new(),
            seen: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// True when `subject` is one of these advisories.
    pub(crate) fn wants(subject: &str) -> bool {
        [BATCH_PREFIX, PINNED_PREFIX, UNPINNED_PREFIX]
            .iter()
            .any(|p| subject.starts_with(p))
    }

    /// Counts one advisory; returns whether it was counted (first time, valid).
    pub(crate) fn record(&mut self, subject: &str, payload: &[u8]) -> bool {
        let e = match parse(subject, payload) {
            Ok(e) => e,
            Err(why) => {
                self.malformed.inc();
                tracing::warn!(account = %self.account, subject, "malformed advisory: {why}");
                return false;
            }
        };
        if !self.seen.insert(e.id.clone()) {
            return false;
        }
        self.order.push_back(e.id);
        if self.order.len() > ID_WINDOW {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        let known = self.streams.contains(&e.stream);
        let stream = if known || self.streams.len() < self.max_streams {
            self.streams.insert(e.stream.clone());
            e.stream
        } else {
            OVERFLOW.to_string()
        };
        let family = match e.kind {
            "batch" => &self.metrics.batches_abandoned,
            "pinned" => &self.metrics.pins,
            _ => &self.metrics.unpins,
        };
        family
            .get_or_create(&StreamReasonLabels {
                account: self.account.clone(),
                stream,
                reason: e.reason,
            })
            .inc();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_advisory_once_and_garbage_as_malformed() {
        let m = Since211Metrics::default();
        let malformed = Counter::default();
        let mut c = Since211Counter::new("A", m.clone(), malformed.clone(), 10);
        let batch = br#"{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"1","stream":"S","batch":"b","reason":"incomplete"}"#;
        let subject = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.S";
        assert!(c.record(subject, batch));
        assert!(!c.record(subject, batch));
        let unpin = br#"{"type":"io.nats.jetstream.advisory.v1.consumer_group_unpinned","id":"2","stream":"S","consumer":"C","group":"g","reason":"later"}"#;
        assert!(c.record("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.C", unpin));
        for (s, p) in [
            ("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.X", &batch[..]),
            ("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S", &unpin[..]),
            (subject, b"garbage"),
            (subject, br#"{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"3","reason":"timeout"}"#),
        ] {
            assert!(!c.record(s, p), "{s}");
        }
        let get = |f: &Family<StreamReasonLabels, Counter>, reason: &str| {
            f.get_or_create(&StreamReasonLabels {
                account: "A".into(),
                stream: "S".into(),
                reason: reason.into(),
            })
            .get()
        };
        assert_eq!(get(&m.batches_abandoned, "incomplete"), 1);
        assert_eq!(get(&m.unpins, "other"), 1);
        assert_eq!(malformed.get(), 4);
    }
}
