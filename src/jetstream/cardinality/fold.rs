//! Ephemeral consumers folded into one series per stream.
//!
//! A consumer is ephemeral when its configuration has no `durable_name`, the
//! server's own test (`isDurableConsumer`): named ephemerals included,
//! durables with an `inactive_threshold` not. A consumer listed without its
//! configuration cannot be told apart and keeps its own name.
//!
//! Ephemerals come and go without bound, so by default they are summed per
//! stream under `consumer="__ephemeral__"`. So that the folded deliveries
//! counter never goes down, a departed ephemeral's last count stays in a
//! per-stream sum; a name back within [`FORGET_AFTER_POLLS`] polls with at
//! least that count (missed by one poll, as during a change of leader) is
//! taken out of the sum again rather than counted twice.

use std::collections::{BTreeMap, HashMap};

use crate::sources::jsz::{ConsumerInfo, ConsumerRow, StreamRow};

/// The `consumer` label of the folded series.
pub(crate) const EPHEMERAL_LABEL: &str = "__ephemeral__";

/// Polls a departed ephemeral's name, or a stream not seen, is remembered.
pub(crate) const FORGET_AFTER_POLLS: u32 = 10;

/// Whether `c` is an ephemeral consumer (see the module documentation).
pub(crate) fn is_ephemeral(c: &ConsumerInfo) -> bool {
    c.config.as_ref().is_some_and(|k| !k.durable)
}

/// One stream's ephemeral consumers, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FoldedRow {
    /// The stream's account.
    pub(crate) account: String,
    /// The stream the ephemerals consume.
    pub(crate) stream: String,
    /// Ephemeral consumers folded in this poll.
    pub(crate) consumers: u64,
    /// Deliveries (`delivered.consumer_seq`) of the ephemerals present,
    /// plus the last count of those that went away: never goes down.
    pub(crate) deliveries: u64,
    /// Sum of `num_pending`.
    pub(crate) pending: u64,
    /// Sum of `num_ack_pending`.
    pub(crate) ack_pending: u64,
    /// Sum of `num_redelivered`.
    pub(crate) redelivered: u64,
    /// Sum of `num_waiting`.
    pub(crate) waiting: u64,
}

/// Deliveries of each ephemeral of a stream, by name.
type Deliveries = HashMap<String, u64>;

/// What is remembered of one stream's ephemerals between polls.
#[derive(Debug, Default)]
struct StreamFold {
    /// Deliveries of each ephemeral present at the last poll.
    live: HashMap<String, u64>,
    /// Departed ephemerals: last deliveries and polls since they went.
    departed: HashMap<String, (u64, u32)>,
    /// Sum of the last deliveries of every departed ephemeral.
    departed_deliveries: u64,
    /// Polls since the stream was last seen.
    unseen: u32,
}

impl StreamFold {
    /// Takes in this poll's ephemerals (name, deliveries).
    fn update(&mut self, now: HashMap<String, u64>) {
        self.unseen = 0;
        for (name, last) in std::mem::take(&mut self.live) {
            match now.get(&name) {
                // Still there, and still counting up: the same consumer.
                Some(&current) if current >= last => {}
                // Gone, or a new consumer under the same name: its count stays.
                _ => {
                    self.departed_deliveries = self.departed_deliveries.saturating_add(last);
                    self.departed.insert(name, (last, 0));
                }
            }
        }
        for (name, &current) in &now {
            if let Some((last, _)) = self.departed.remove(name) {
                if current >= last {
                    // Back after a missed poll: counted once, in `live`.
                    self.departed_deliveries = self.departed_deliveries.saturating_sub(last);
                }
            }
        }
        self.departed.retain(|_, (_, polls)| {
            *polls += 1;
            *polls <= FORGET_AFTER_POLLS
        });
        self.live = now;
    }
}

/// The ephemeral consumers of every stream across polls; held by the poller.
#[derive(Debug, Default)]
pub(crate) struct EphemeralFolds {
    streams: HashMap<(String, String), StreamFold>,
}

impl EphemeralFolds {
    /// Folds this poll's `ephemerals`, consumers of the `streams` seen in
    /// this poll. A stream not seen (its server's poll failed) keeps its
    /// memory, without a series, for [`FORGET_AFTER_POLLS`] polls.
    pub(crate) fn update(
        &mut self,
        streams: &[StreamRow],
        ephemerals: &[&ConsumerRow],
    ) -> Vec<FoldedRow> {
        let mut rows: BTreeMap<(&str, &str), (FoldedRow, Deliveries)> = BTreeMap::new();
        for &&(account, stream, c, _) in ephemerals {
            let (row, live) = rows.entry((account, stream)).or_default();
            row.consumers += 1;
            // Sums of the servers' figures, held at `u64::MAX`.
            row.pending = row.pending.saturating_add(c.num_pending);
            row.ack_pending = row.ack_pending.saturating_add(c.num_ack_pending);
            row.redelivered = row.redelivered.saturating_add(c.num_redelivered);
            row.waiting = row.waiting.saturating_add(c.num_waiting);
            live.insert(c.name.to_string(), c.delivered.consumer_seq);
        }
        for fold in self.streams.values_mut() {
            fold.unseen += 1;
        }
        let mut out = Vec::new();
        for &(account, stream) in streams {
            let key = (account, stream.name.as_str());
            let (mut row, live) = rows.remove(&key).unwrap_or_default();
            let owned = (account.to_string(), stream.name.clone());
            if live.is_empty() && !self.streams.contains_key(&owned) {
                continue;
            }
            let fold = self.streams.entry(owned).or_default();
            fold.update(live);
            row.account = account.to_string();
            row.stream = stream.name.clone();
            row.deliveries = fold
                .live
                .values()
                .fold(fold.departed_deliveries, |sum, d| sum.saturating_add(*d));
            out.push(row);
        }
        self.streams
            .retain(|_, fold| fold.unseen <= FORGET_AFTER_POLLS);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::jsz::{Jsz, StreamDetail};

    /// A stream S of account A with the given (name, consumer_seq, pending)
    /// consumers; names starting with `d` are durable.
    fn stream(consumers: &[(&str, u64, u64)]) -> StreamDetail {
        let list: Vec<String> = consumers
            .iter()
            .map(|(name, seq, pending)| {
                let durable = if name.starts_with('d') { format!(r#""durable_name":"{name}","#) } else { String::new() };
                format!(r#"{{"name":"{name}","config":{{{durable}"name":"{name}"}},"delivered":{{"consumer_seq":{seq}}},"num_pending":{pending}}}"#)
            })
            .collect();
        let json = format!(
            r#"{{"account_details":[{{"name":"A","stream_detail":[{{"name":"S","consumer_detail":[{}]}}]}}]}}"#,
            list.join(",")
        );
        let mut jsz: Jsz = serde_json::from_str(&json).unwrap();
        jsz.account_details.remove(0).stream_detail.remove(0)
    }

    fn fold(folds: &mut EphemeralFolds, s: &StreamDetail) -> Option<FoldedRow> {
        let rows: Vec<ConsumerRow> = s
            .consumer_detail
            .iter()
            .map(|c| ("A", "S", c, None))
            .collect();
        let ephemerals: Vec<_> = rows.iter().filter(|r| is_ephemeral(r.2)).collect();
        let mut out = folds.update(&[("A", s)], &ephemerals);
        assert!(out.len() <= 1);
        out.pop()
    }

    #[test]
    fn durables_and_consumers_without_config_are_not_ephemeral() {
        let s = stream(&[("d1", 0, 0), ("e1", 0, 0)]);
        assert!(!is_ephemeral(&s.consumer_detail[0]));
        assert!(is_ephemeral(&s.consumer_detail[1]));
        assert!(!is_ephemeral(&ConsumerInfo::default()));
    }

    #[test]
    fn deliveries_never_go_down_when_ephemerals_leave() {
        let mut folds = EphemeralFolds::default();
        // No ephemeral yet: no folded series.
        assert_eq!(fold(&mut folds, &stream(&[("d1", 5, 1)])), None);
        let row = fold(
            &mut folds,
            &stream(&[("d1", 5, 1), ("e1", 10, 2), ("e2", 3, 4)]),
        )
        .unwrap();
        assert_eq!((row.consumers, row.deliveries, row.pending), (2, 13, 6));
        // e1 goes away: its 10 stay in the sum.
        let row = fold(&mut folds, &stream(&[("e2", 4, 1)])).unwrap();
        assert_eq!((row.consumers, row.deliveries, row.pending), (1, 14, 1));
        // e1 comes back with more: the same consumer, counted once.
        let row = fold(&mut folds, &stream(&[("e1", 12, 0), ("e2", 4, 0)])).unwrap();
        assert_eq!(row.deliveries, 16);
        // e2 recreated under its name, starting over: its 4 stay.
        let row = fold(&mut folds, &stream(&[("e1", 12, 0), ("e2", 1, 0)])).unwrap();
        assert_eq!(row.deliveries, 17);
        // All gone: the series stays, with the departed sum and no consumers.
        let row = fold(&mut folds, &stream(&[])).unwrap();
        assert_eq!((row.consumers, row.deliveries, row.pending), (0, 17, 0));
        // A stream not seen for longer than the memory is forgotten.
        for _ in 0..=FORGET_AFTER_POLLS {
            assert!(folds.update(&[], &[]).is_empty());
        }
        assert_eq!(fold(&mut folds, &stream(&[])), None);
    }

    /// Sums past `u64::MAX` (no server sends such figures) are held there,
    /// never wrapped to a small number.
    #[test]
    fn sums_of_extreme_figures_are_held_at_the_maximum() {
        let max = u64::MAX;
        let mut folds = EphemeralFolds::default();
        let row = fold(&mut folds, &stream(&[("e1", max, max), ("e2", 2, 3)])).unwrap();
        assert_eq!((row.deliveries, row.pending), (max, max));
        // e1 leaves with its `max`, then comes back with more than before:
        // a departed sum at the maximum, then taken out again.
        let row = fold(&mut folds, &stream(&[("e2", 3, 0)])).unwrap();
        assert_eq!(row.deliveries, max);
        let row = fold(&mut folds, &stream(&[("e1", max, 0), ("e2", 3, 0)])).unwrap();
        assert_eq!(row.deliveries, max);
    }
}
