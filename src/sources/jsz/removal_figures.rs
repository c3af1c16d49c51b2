//! The figures of a `/jsz` reply that the removed-before-delivery count
//! reads, read here once: by the count itself (in `jetstream/`) and by the
//! check that asks for a consumer's configuration before a poll where its
//! count could grow (`config_memory.rs`), which keeps them between polls.

use super::{ConsumerConfig, ConsumerInfo, StreamContents};

/// A stream's figures the count reads, as one poll saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamAt {
    /// Stream `first_seq`.
    pub(crate) first_seq: u64,
    /// Stream `last_seq`.
    pub(crate) last_seq: u64,
    /// Stream `messages`.
    pub(crate) messages: u64,
    /// Stream `num_deleted` (interior deletes).
    pub(crate) deleted: u64,
}

impl StreamAt {
    /// The figures of a stream's `state`.
    pub(crate) fn of(state: &StreamContents) -> StreamAt {
        StreamAt {
            first_seq: state.first_seq,
            last_seq: state.last_seq,
            messages: state.messages,
            deleted: state.num_deleted,
        }
    }
}

/// A consumer's figures the count reads, as one poll saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsumerAt {
    /// `delivered.stream_seq`.
    pub(crate) delivered: u64,
    /// `delivered.consumer_seq`: deliveries, first or again.
    pub(crate) deliveries: u64,
    /// `num_pending`.
    pub(crate) pending: u64,
    /// `num_redelivered`.
    pub(crate) redelivered: u64,
}

impl ConsumerAt {
    /// The figures of consumer `c`.
    pub(crate) fn of(c: &ConsumerInfo) -> ConsumerAt {
        ConsumerAt {
            delivered: c.delivered.stream_seq,
            deliveries: c.delivered.consumer_seq,
            pending: c.num_pending,
            redelivered: c.num_redelivered,
        }
    }
}

/// What a consumer's configuration says for the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountingKind {
    /// The consumer has a subject filter: not every stream message is its.
    pub(crate) filtered: bool,
    /// Ack policy `none` or `max_deliver` 1: every delivery is a first one.
    pub(crate) no_redelivery: bool,
}

impl CountingKind {
    /// The kind `config` makes; with no configuration, unfiltered and
    /// redelivering (the default kind).
    pub(crate) fn of(config: Option<&ConsumerConfig>) -> CountingKind {
        config.map_or_else(CountingKind::default, |c| CountingKind {
            filtered: !c.filter_subject.is_empty() || !c.filter_subjects.is_empty(),
            no_redelivery: c.acks_none || c.max_deliver == Some(1),
        })
    }
}
