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
//! leave the stream. It is a level, exported as gauges.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use crate::encode::{counter_family, gauge_family};

/// What one stream lost, as its server reports it now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LostData {
    /// Sequences lost.
    pub messages: u64,
    /// Bytes lost.
    pub bytes: u64,
}

#[derive(Deserialize)]
struct InfoReply {
    #[serde(default)]
    state: Option<InfoState>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct InfoState {
    #[serde(default)]
    lost: Option<Lost>,
}

#[derive(Deserialize)]
struct Lost {
    #[serde(default)]
    msgs: Option<Vec<u64>>,
    #[serde(default)]
    bytes: u64,
}

/// Reads one STREAM.INFO reply: no `lost` in a state means nothing lost.
pub fn parse_info(payload: &[u8]) -> Result<LostData, String> {
    let reply: InfoReply = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    if let Some(error) = reply.error {
        return Err(format!("the server answered {error}"));
    }
    let state = reply.state.ok_or("a stream info without state")?;
    Ok(state.lost.map_or(LostData::default(), |l| LostData {
        messages: l.msgs.map_or(0, |m| m.len() as u64),
        bytes: l.bytes,
    }))
}

/// How one read ended: the `result` label.
const RESULTS: [&str; 3] = ["ok", "error", "timeout"];

#[derive(Debug, Default)]
struct State {
    /// Where the next poll's reads start, in the sorted stream names.
    next: String,
    known: BTreeMap<String, LostData>,
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
    pub async fn read(&self, streams: &[&str], deadline: Duration) -> Vec<(String, LostData)> {
        let mut names: Vec<&str> = streams.to_vec();
        names.sort_unstable();
        names.dedup();
        let turn = {
            let state = self.state.lock().expect("stream lost lock");
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
        let mut state = self.state.lock().expect("stream lost lock");
        for (name, result) in results {
            match result {
                Ok(lost) => {
                    state.results[0] += 1;
                    state.known.insert(name.to_string(), lost);
                }
                Err(i) => state.results[i] += 1,
            }
        }
        if let Some(last) = turn.last() {
            // Strictly after the last one read: the next poll goes on from there.
            state.next = format!("{last}\u{0}");
        }
        state
            .known
            .retain(|k, _| names.binary_search(&k.as_str()).is_ok());
        state.known.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

impl prometheus_client::collector::Collector for StreamLostReader {
    /// Writes the reads counter.
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let enc = &mut enc;
        let results = self.state.lock().expect("stream lost lock").results;
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

/// Writes the lost-data gauges of the streams read so far.
pub fn encode(enc: &mut DescriptorEncoder, rows: &[(String, String, LostData)]) -> fmt::Result {
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
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_data_is_read_from_the_full_state() {
        let reply =
            br#"{"state":{"messages":5,"deleted":[2,3],"lost":{"msgs":[7,8,9],"bytes":300}}}"#;
        assert_eq!(
            parse_info(reply),
            Ok(LostData {
                messages: 3,
                bytes: 300
            })
        );
        assert_eq!(
            parse_info(br#"{"state":{"messages":5}}"#),
            Ok(LostData::default())
        );
        assert!(parse_info(br#"{"error":{"code":404,"description":"stream not found"}}"#).is_err());
        assert!(parse_info(b"{}").is_err());
        assert!(parse_info(b"garbage").is_err());
    }
}
