//! The stored totals of durable mode: what one key of the totals bucket
//! holds, and how a batch of advisories changes it.
//!
//! One key per (stream, consumer) series and one for the account, each with
//! what makes a redelivered or re-sent advisory recognisable after a restart:
//! - `applied`: the advisory stream's sequences already added to this key,
//!   with the advisory stream's creation time they belong to (`source`).
//!   Everything at or below the consumer's ack floor is one range from 1, so
//!   the value stays small and an advisory handed out again by a lagging
//!   replica that became leader is still recognised;
//! - `dead`: the stream sequences of the messages that exhausted max
//!   deliveries in this series, as ranges: a new consumer leader
//!   re-announces every such message still in its replicated state;
//! - `recent`: the identities of the key's last [`RECENT_EVENTS`] events, so a
//!   server that re-sends a NAK advisory after a leader change is caught
//!   across restarts too.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::jetstream::seq_ranges::SeqRanges;

/// Events remembered per series for re-sent advisories.
pub(crate) const RECENT_EVENTS: usize = 16;

/// Ranges of dead messages kept per series. Consecutive sequences share one
/// range; beyond this many ranges the lowest (oldest messages)
/// are forgotten, bounding the stored value at about 20 KB.
pub(crate) const DEAD_RANGES: usize = 1024;

/// One event's identity: kind, message sequence, delivery count (NAKs) and
/// the incarnation of the stream it happened in (see `super::incarnation`).
/// Stored as a 4-element array: every series keeps 16 of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "(u8, u64, u64, i64)", into = "(u8, u64, u64, i64)")]
pub struct EventId {
    /// 0 max deliveries, 1 terminated, 2 NAK, 3 an advisory of
    /// [`super::since_2_11`] (`seq`: a hash of its `id`).
    pub(crate) kind: u8,
    /// The message's stream sequence.
    pub(crate) seq: u64,
    /// Delivery count (NAKs only; 0 otherwise).
    pub(crate) deliveries: u64,
    /// Which incarnation of the stream (creation time tag).
    pub(crate) incarnation: i64,
}

impl From<(u8, u64, u64, i64)> for EventId {
    fn from((kind, seq, deliveries, incarnation): (u8, u64, u64, i64)) -> Self {
        EventId {
            kind,
            seq,
            deliveries,
            incarnation,
        }
    }
}

impl From<EventId> for (u8, u64, u64, i64) {
    fn from(e: EventId) -> Self {
        (e.kind, e.seq, e.deliveries, e.incarnation)
    }
}

/// What one key of the totals bucket holds. Series keys use the series
/// fields, the account key the account fields; the rest stay zero and are
/// left out of the stored JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Stream name (series keys).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stream: String,
    /// Consumer name (series keys).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub consumer: String,
    /// Messages that exhausted max_deliver.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_deliveries: u64,
    /// NAKs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub naks: u64,
    /// Terminations by reason label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub terminated: BTreeMap<String, u64>,
    /// Dead-letter copies stored.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dead_letter_stored: u64,
    /// Dead messages whose original was gone, by reason label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dead_letter_missing: BTreeMap<String, u64>,
    /// Dead-letter copies given up.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dead_letter_failed: u64,
    /// Stream keys: atomic batches abandoned, by reason label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub batches_abandoned: BTreeMap<String, u64>,
    /// Stream keys: priority group pins.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pins: u64,
    /// Stream keys: priority group unpins, by reason label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unpins: BTreeMap<String, u64>,
    /// Account key: advisory messages received.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub received: u64,
    /// Account key: malformed advisories (forged ones included).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed: u64,
    /// Account key: advisories of a type not counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unknown: u64,
    /// Account key: re-sent advisories not counted again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duplicates: u64,
    /// Account key: advisories counted in the `__overflow__` series.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub folded: u64,
    /// Account key: failed dead-letter copy attempts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dead_letter_errors: u64,
    /// Account key: the consumer's ack floor when last seen (a re-created
    /// consumer starts after it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ack_floor: u64,
    /// Creation time (Unix ns) of the advisory stream `applied` refers to.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub source: i64,
    /// Advisory stream sequences already added here.
    #[serde(default, skip_serializing_if = "is_empty_ranges")]
    pub applied: SeqRanges,
    /// The last events added here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<EventId>,
    /// Stream sequences of the messages that exhausted max deliveries here.
    #[serde(default, skip_serializing_if = "is_empty_ranges")]
    pub dead: SeqRanges,
    /// The incarnation of the stream `dead` refers to.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub dead_incarnation: i64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
fn is_empty_ranges(r: &SeqRanges) -> bool {
    r.ranges() == 0
}

/// Max deliveries (kind 0) are announced again by a new consumer leader.
/// Terminations are not (the message left the consumer's pending state) and
/// stay among the recent events only: a message that exhausted max
/// deliveries can still be terminated later by stream limits.
fn is_death(event: &EventId) -> bool {
    event.kind == 0
}

impl Totals {
    /// True if the advisory at `aseq` of the advisory stream created at
    /// `source` was already added to this key.
    pub(crate) fn applied(&self, source: i64, aseq: u64) -> bool {
        self.source == source && self.applied.contains(aseq)
    }

    /// Marks `aseq` as added. A new advisory stream (another `source`)
    /// makes the old sequences meaningless.
    pub(crate) fn mark_applied(&mut self, source: i64, aseq: u64) {
        if self.source != source {
            self.source = source;
            self.applied = SeqRanges::default();
        }
        self.applied.insert(aseq);
    }

    /// True if `event` was counted here before: max deliveries of a message
    /// known dead, or one of the recent events.
    pub(crate) fn seen(&self, event: &EventId) -> bool {
        let known_dead = is_death(event)
            && self.dead_incarnation == event.incarnation
            && self.dead.contains(event.seq);
        known_dead || self.recent.contains(event)
    }

    /// Remembers `event`: max deliveries in `dead` (a stream made again
    /// starts the set anew), every event among the recent ones, forgetting the oldest
    /// beyond `RECENT_EVENTS`.
    pub(crate) fn remember(&mut self, event: EventId) {
        if is_death(&event) {
            if self.dead_incarnation != event.incarnation {
                self.dead_incarnation = event.incarnation;
                self.dead = SeqRanges::default();
            }
            self.dead.insert(event.seq);
            self.dead.keep_highest(DEAD_RANGES);
        }
        if self.recent.len() >= RECENT_EVENTS {
            self.recent.remove(0);
        }
        self.recent.push(event);
    }

    /// Keeps the sequences at or below the ack floor as one range: every
    /// one of them was handled (applied, or acknowledged as not ours).
    pub(crate) fn prune(&mut self, source: i64, ack_floor: u64) {
        if self.source == source {
            self.applied.cover_through(ack_floor);
        }
    }
}

/// A bucket key for the series (stream, consumer): `s.<stream>.<consumer>`
/// with every byte outside `[A-Za-z0-9_-]` written as `=XX`, so any name
/// the server allows maps to a valid key, and distinct names to distinct keys.
pub(crate) fn series_key(stream: &str, consumer: &str) -> String {
    let mut key = String::with_capacity(stream.len() + consumer.len() + 3);
    key.push_str("s.");
    escape_into(&mut key, stream);
    key.push('.');
    escape_into(&mut key, consumer);
    key
}

/// A bucket key for one stream's abandoned batches and priority-group
/// pins ([`super::since_2_11`]): `e.<stream>`, escaped as [`series_key`].
pub(crate) fn stream_key(stream: &str) -> String {
    let mut key = String::with_capacity(stream.len() + 2);
    key.push_str("e.");
    escape_into(&mut key, stream);
    key
}

/// Whether `key` is a stream key ([`stream_key`]).
pub(crate) fn is_stream_key(key: &str) -> bool {
    key.starts_with("e.")
}

/// The bucket key of the account's own totals.
pub(crate) const ACCOUNT_KEY: &str = "account";

fn escape_into(out: &mut String, name: &str) {
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_belongs_to_one_advisory_stream() {
        let mut t = Totals::default();
        t.mark_applied(100, 4);
        assert!(t.applied(100, 4));
        // The advisory stream was re-created: its sequences start again.
        assert!(!t.applied(200, 4));
        t.mark_applied(200, 9);
        assert!(!t.applied(100, 4) && t.applied(200, 9));
    }

    #[test]
    fn every_death_is_remembered_and_only_deaths() {
        let event = |kind, seq, incarnation| EventId {
            kind,
            seq,
            deliveries: 0,
            incarnation,
        };
        let mut t = Totals::default();
        for seq in (1..=100).step_by(2) {
            t.remember(event(0, seq, 7));
        }
        t.remember(event(1, 500, 7));
        for seq in 600..700 {
            t.remember(event(2, seq, 7));
        }
        // Far beyond the recent events: deaths are still known.
        assert!(t.seen(&event(0, 1, 7)) && t.seen(&event(0, 99, 7)));
        assert!(!t.seen(&event(0, 2, 7)));
        // A stream made again: the same sequence is another message.
        assert!(!t.seen(&event(0, 1, 8)) && !t.seen(&event(0, 1, -7)));
        // Terminations are not deaths to remember beyond the recent events,
        // and a dead message may still be terminated.
        assert!(!t.seen(&event(1, 500, 7)) && !t.seen(&event(1, 1, 7)));
        assert_eq!(t.dead.ranges(), 50);
        t.remember(event(0, 1, 8));
        assert!(t.seen(&event(0, 1, 8)) && !t.seen(&event(0, 3, 7)));
        assert_eq!((t.dead.ranges(), t.dead_incarnation), (1, 8));
    }

    #[test]
    fn dead_ranges_are_bounded() {
        let mut t = Totals::default();
        for seq in 0..(DEAD_RANGES as u64 + 10) {
            t.remember(EventId {
                kind: 0,
                seq: seq * 2 + 1,
                deliveries: 0,
                incarnation: 1,
            });
        }
        assert_eq!(t.dead.ranges(), DEAD_RANGES);
        assert!(!t.dead.contains(1) && t.dead.contains(2 * DEAD_RANGES as u64 + 19));
    }

    #[test]
    fn keys_are_valid_and_distinct() {
        assert_eq!(series_key("ORDERS", "billing-1"), "s.ORDERS.billing-1");
        assert_eq!(series_key("a.b", "c"), "s.a=2Eb.c");
        assert_ne!(series_key("a=2E", "b"), series_key("a.", "b"));
        assert_eq!(series_key("ü", "x"), "s.=C3=BC.x");
    }

    #[test]
    fn stored_json_leaves_zeros_out() {
        let mut t = Totals {
            stream: "S".into(),
            consumer: "C".into(),
            max_deliveries: 3,
            ..Default::default()
        };
        t.mark_applied(1, 2);
        t.remember(EventId {
            kind: 0,
            seq: 9,
            deliveries: 0,
            incarnation: -5,
        });
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(
            json,
            r#"{"stream":"S","consumer":"C","max_deliveries":3,"source":1,"applied":[[2,2]],"recent":[[0,9,0,-5]],"dead":[[9,9]],"dead_incarnation":-5}"#
        );
        assert_eq!(serde_json::from_str::<Totals>(&json).unwrap(), t);
    }
}
