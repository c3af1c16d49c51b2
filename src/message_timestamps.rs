//! Timestamps of stored JetStream messages, read over NATS: the exact time
//! behind a consumer's oldest unacknowledged message and its first
//! undelivered one, where `/jsz` gives only sequences.

/// One position to read: the first message at or after `from_seq` in
/// `stream` of `account` whose subject matches one of `filters` (any subject
/// when `filters` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimestampRequest {
    /// The stream's account.
    pub account: String,
    /// The stream.
    pub stream: String,
    /// The first sequence that may answer.
    pub from_seq: u64,
    /// The consumer's subject filters; empty for all subjects.
    pub filters: Vec<String>,
}

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimestampReply {
    /// The message found, and when the stream stored it (Unix seconds).
    Found {
        /// Its stream sequence (`from_seq` or later).
        seq: u64,
        /// When it was stored, as Unix seconds.
        unix_seconds: f64,
    },
    /// No matching message is stored at or after `from_seq`.
    NoMessage,
}
