//! A stream's lost data: messages the server found missing or corrupt in
//! its own store (a block file gone or cut short), which no consumer will
//! ever receive.
//!
//! `/jsz` never carries it: the server fills `lost` only in the full state
//! it builds for `$JS.API.STREAM.INFO.<stream>` with `deleted_details`, a
//! reply that also lists every deleted sequence. So it is read over the
//! reader's NATS connection, for the streams of that connection's account,
//! a few streams per scrape in turn (`--stream-lost-reads`), each value kept
//! until the stream is read again. The server keeps it in memory only: it
//! starts again from none after a restart, and shrinks when lost sequences
//! leave the stream. So it is exported twice: as gauges, what the server
//! reports now, and as counters of the lost sequences found so far, each
//! counted once ([`Found`]), which never go down when the record shrinks.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use crate::jetstream::seq_ranges::SeqRanges;
use crate::lock::LockOrRecover;
use crate::text::families::{counter_family, gauge_family};

/// What one stream lost: the server's record now, and what was found in
/// its records so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LostData {
    /// Sequences lost, as the server reports now.
    pub(crate) messages: u64,
    /// Bytes lost, as the server reports now.
    pub(crate) bytes: u64,
    /// Lost sequences found so far, each counted once.
    pub(crate) found_messages: u64,
    /// Bytes of [`Self::found_messages`].
    pub(crate) found_bytes: u64,
}

/// One STREAM.INFO reply's record of lost data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LostRecord {
    /// The lost sequences, ascending, each once.
    pub sequences: Vec<u64>,
    /// Bytes lost.
    pub bytes: u64,
    /// The stream's first sequence.
    pub first_seq: u64,
    /// When the stream was created: a stream made again under the same
    /// name starts its sequences again.
    pub(crate) created: String,
}

#[derive(Deserialize)]
struct InfoReply {
    #[serde(default)]
    state: Option<InfoState>,
    #[serde(default)]
    created: String,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct InfoState {
    #[serde(default)]
    lost: Option<Lost>,
    #[serde(default)]
    first_seq: u64,
}

#[derive(Deserialize)]
struct Lost {
    #[serde(default)]
    msgs: Option<Vec<u64>>,
    #[serde(default)]
    bytes: u64,
}

/// Reads one STREAM.INFO reply: no `lost` in a state means nothing lost.
pub fn parse_info(payload: &[u8]) -> Result<LostRecord, String> {
    let reply: InfoReply = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    if let Some(error) = reply.error {
        return Err(format!("the server answered {error}"));
    }
    let state = reply.state.ok_or("a stream info without state")?;
    let (mut sequences, bytes) = state
        .lost
        .map_or((Vec::new(), 0), |l| (l.msgs.unwrap_or_default(), l.bytes));
    sequences.sort_unstable();
    sequences.dedup();
    Ok(LostRecord {
        sequences,
        bytes,
        first_seq: state.first_seq,
        created: reply.created,
    })
}

/// Ranges of found sequences kept per stream at most; beyond, the lowest
/// are merged into one, so a later loss in the gaps between them is not
/// counted (a lost block is one range, so this takes thousands of separate
/// losses).
const FOUND_RANGES: usize = 4096;

/// The lost sequences found in one stream's records so far, so that each
/// is counted once however often the server reports it.
///
/// Bytes are reported only as a total per record, so the bytes of the new
/// sequences are exact when the record holds only new ones, or exactly the
/// last record's plus new ones; in any other case (a record that both lost
/// old sequences and gained new ones since it was last read) they are
/// estimated as the record's bytes shared out over its sequences.
#[derive(Debug, Clone, Default)]
pub struct Found {
    created: String,
    seen: SeqRanges,
    last: SeqRanges,
    last_count: u64,
    last_bytes: u64,
    messages: u64,
    bytes: u64,
}

impl Found {
    /// Takes in one record of the stream, read now.
    pub fn absorb(&mut self, r: &LostRecord) {
        if r.created != self.created {
            // A new stream under this name: its sequences are not the old
            // one's. What was counted stays counted.
            *self = Found {
                created: r.created.clone(),
                messages: self.messages,
                bytes: self.bytes,
                ..Found::default()
            };
        }
        let (mut new, mut old, mut old_all_last) = (0u64, 0u64, true);
        for &s in &r.sequences {
            if self.seen.contains(s) {
                old += 1;
                old_all_last &= self.last.contains(s);
            } else {
                new += 1;
            }
        }
        if new > 0 {
            // Totals of the servers' figures, held at `u64::MAX`.
            self.messages = self.messages.saturating_add(new);
            let bytes = if old == 0 {
                r.bytes
            } else if old_all_last && old == self.last_count {
                r.bytes.saturating_sub(self.last_bytes)
            } else {
                (u128::from(r.bytes) * u128::from(new) / r.sequences.len() as u128) as u64
            };
            self.bytes = self.bytes.saturating_add(bytes);
        }
        let mut last = SeqRanges::default();
        for &s in &r.sequences {
            self.seen.insert(s);
            last.insert(s);
        }
        (self.last, self.last_count, self.last_bytes) = (last, r.sequences.len() as u64, r.bytes);
        // Sequences below the stream's first can never be reported again.
        let floor = r
            .sequences
            .first()
            .map_or(r.first_seq, |&s| s.min(r.first_seq));
        self.seen.forget_below(floor);
        self.seen.merge_lowest(FOUND_RANGES);
    }

    /// Lost messages and bytes counted so far.
    pub fn counted(&self) -> (u64, u64) {
        (self.messages, self.bytes)
    }

    /// The record now (`r`) with what was found so far.
    fn data(&self, r: &LostRecord) -> LostData {
        LostData {
            messages: r.sequences.len() as u64,
            bytes: r.bytes,
            found_messages: self.messages,
            found_bytes: self.bytes,
        }
    }
}

/// How one read ended: the `result` label.
const RESULTS: [&str; 3] = ["ok", "error", "timeout"];

#[derive(Debug, Default)]
struct State {
    /// Where the next poll's reads start, in the sorted stream names.
    next: String,
    known: BTreeMap<String, (Found, LostData)>,
    results: [u64; RESULTS.len()],
}

/// Reads streams' lost data over one NATS connection, a few per poll;
/// cheap to clone (clones share what was read and the counts).
#[derive(Debug, Clone)]
pub struct StreamLostReader {
    client: Client,
    per_poll: usize,
    state: Arc<Mutex<State>>,
}

impl StreamLostReader {
    /// A reader over `client` (a connection in the account whose streams it
    /// reads) reading at most `per_poll` streams each poll.
    pub fn new(client: Client, per_poll: usize) -> Self {
        StreamLostReader {
            client,
            per_poll,
            state: Arc::default(),
        }
    }

    /// Reads the next `per_poll` of `streams` (names, in any order) after
    /// those read last time, each within `deadline`, and returns what is
    /// known of each of `streams`: streams never read yet are left out.
    pub(crate) async fn read(
        &self,
        streams: &[&str],
        deadline: Duration,
    ) -> Vec<(String, LostData)> {
        let mut names: Vec<&str> = streams.to_vec();
        names.sort_unstable();
        names.dedup();
        if !crate::nats::is_connected(&self.client) {
            // Queued for a later connection, a request would hold the poll
            // until its deadline: nothing is asked, what is known is served.
            tracing::debug!("stream info for lost data not asked: the connection is down");
            return known_of(&mut self.state.lock_or_recover(), &names);
        }
        let turn = {
            let state = self.state.lock_or_recover();
            let start = names.partition_point(|n| *n < state.next.as_str());
            let mut turn: Vec<&str> = names[start..].to_vec();
            turn.extend(&names[..start]);
            turn.truncate(self.per_poll);
            turn
        };
        let reads = turn.iter().map(|name| async move {
            let subject = format!("$JS.API.STREAM.INFO.{name}");
            let body = Bytes::from_static(br#"{"deleted_details":true}"#);
            let asked = tokio::time::timeout(deadline, self.client.request(subject, body)).await;
            let result = match asked {
                Err(_) => Err(2),
                Ok(Err(_)) => Err(1),
                Ok(Ok(reply)) => parse_info(&reply.payload).map_err(|_| 1),
            };
            (*name, result)
        });
        let results = futures::future::join_all(reads).await;
        let mut state = self.state.lock_or_recover();
        for (name, result) in results {
            match result {
                Ok(record) => {
                    state.results[0] += 1;
                    let (found, data) = state.known.entry(name.to_string()).or_default();
                    found.absorb(&record);
                    *data = found.data(&record);
                }
                Err(i) => state.results[i] += 1,
            }
        }
        if let Some(last) = turn.last() {
            // Strictly after the last one read: the next poll goes on from there.
            state.next = format!("{last}\u{0}");
        }
        known_of(&mut state, &names)
    }
}

/// What is known of the streams `names` (sorted), the others forgotten.
fn known_of(state: &mut State, names: &[&str]) -> Vec<(String, LostData)> {
    state
        .known
        .retain(|k, _| names.binary_search(&k.as_str()).is_ok());
    state.known.iter().map(|(k, v)| (k.clone(), v.1)).collect()
}

impl prometheus_client::collector::Collector for StreamLostReader {
    /// Writes the reads counter.
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let enc = &mut enc;
        let results = self.state.lock_or_recover().results;
        counter_family(
            enc,
            "nats_delivery_stream_lost_reads",
            "Stream info reads for lost data, by result (ok, error, timeout).",
            RESULTS
                .iter()
                .zip(results)
                .map(|(r, n)| ([("result", *r)], n)),
        )
    }
}

/// Writes the lost-data gauges and counters of the streams read so far.
pub(crate) fn encode(
    enc: &mut DescriptorEncoder,
    rows: &[(String, String, LostData)],
) -> fmt::Result {
    let labels =
        |(a, s, _): &(String, String, LostData)| [("account", a.clone()), ("stream", s.clone())];
    gauge_family(
        enc,
        "nats_delivery_stream_lost_messages",
        "Messages the server lost from this stream's store (missing or corrupt), as it reports now; read in turn, --stream-lost-reads streams per scrape.",
        rows.iter().map(|r| (labels(r), r.2.messages)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_stream_lost_bytes",
        "Bytes the server lost from this stream's store, as it reports now.",
        rows.iter().map(|r| (labels(r), r.2.bytes)),
    )?;
    counter_family(
        enc,
        "nats_delivery_stream_lost_messages_found",
        "Lost messages of this stream found in the server's records since the exporter started, each sequence counted once.",
        rows.iter().map(|r| (labels(r), r.2.found_messages)),
    )?;
    counter_family(
        enc,
        "nats_delivery_stream_lost_bytes_found",
        "Bytes of the lost messages found in this stream's records since the exporter started.",
        rows.iter().map(|r| (labels(r), r.2.found_bytes)),
    )
}

#[cfg(test)]
#[path = "stream_lost_tests.rs"]
mod tests;
