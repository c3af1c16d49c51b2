//! The fields of a `/jsz` reply the exporter uses, as serde reads them: a
//! field an older server lacks stays `None` (or its default), never an error.

use std::sync::Arc;

use serde::Deserialize;

use super::de;

/// The fields of a `/jsz` reply the exporter uses. (`S` is the type of a
/// stream: while a reply is parsed in pieces, streams cut out are `None`.)
#[derive(Debug, Default, Deserialize)]
#[serde(
    default,
    bound(deserialize = "S: Deserialize<'de> + Default + de::Kept")
)]
pub struct Jsz<S = StreamDetail> {
    /// The server's clock when it answered.
    pub(crate) now: String,
    /// JetStream is off on this server.
    pub(crate) disabled: bool,
    /// Accounts with JetStream on this server (all pages).
    pub(crate) total: Option<usize>,
    /// This page of accounts.
    #[serde(deserialize_with = "de::list")]
    pub account_details: Vec<AccountDetail<S>>,
}

/// One account's streams.
#[derive(Debug, Default, Deserialize)]
#[serde(
    default,
    bound(deserialize = "S: Deserialize<'de> + Default + de::Kept")
)]
pub struct AccountDetail<S = StreamDetail> {
    /// Account name (its name tag where one is set).
    pub(crate) name: String,
    /// The account's own name (its public key in operator mode), by which
    /// servers from 2.10 on order the pages.
    pub(crate) id: String,
    /// Bytes of memory storage its streams use, every replica counted
    /// (the server's cluster-wide total, not only its own share).
    pub(crate) memory: Option<u64>,
    /// Bytes of file storage its streams use, every replica counted.
    pub(crate) storage: Option<u64>,
    /// Its account-wide `max_mem` limit; `u64::MAX` (-1) when unlimited, 0
    /// when its limits are tiered (R1, R3: `/jsz` does not show them).
    pub(crate) reserved_memory: Option<u64>,
    /// Its account-wide `max_file` limit, written as `reserved_memory`.
    pub(crate) reserved_storage: Option<u64>,
    /// The account's streams.
    #[serde(deserialize_with = "de::list")]
    pub stream_detail: Vec<S>,
}

/// Who leads a clustered stream or consumer.
#[derive(Debug, Deserialize)]
#[serde(default)]
pub struct ClusterInfo {
    /// The leader's server name; empty while there is none.
    pub(crate) leader: Box<str>,
    /// When the leader became leader (2.11+), as Unix seconds; NaN when
    /// not given (older servers, and a Raft leader not yet serving).
    #[serde(deserialize_with = "de::seconds_or_nan")]
    pub(crate) leader_since: f64,
    /// The replicas this server lists (only the leader's view means
    /// anything: a follower lists the other followers as not current).
    #[serde(deserialize_with = "super::replicas::counts")]
    pub(crate) replicas: super::replicas::ReplicaCounts,
}

impl Default for ClusterInfo {
    fn default() -> ClusterInfo {
        ClusterInfo {
            leader: Box::default(),
            leader_since: f64::NAN,
            replicas: Default::default(),
        }
    }
}

/// One stream.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamDetail {
    /// Stream name.
    pub name: String,
    /// When the stream was made, as a hash of the server's text: a stream
    /// deleted and made again under its name has another.
    #[serde(deserialize_with = "de::hashed")]
    pub created: u64,
    /// Set for streams in a JetStream cluster.
    pub cluster: Option<ClusterInfo>,
    /// Limits.
    pub config: Option<StreamConfig>,
    /// Current contents.
    pub state: StreamContents,
    /// Consumers.
    #[serde(deserialize_with = "de::list")]
    pub consumer_detail: Vec<ConsumerInfo>,
    /// The stream's mirror, when it is one: what it copies and how far along.
    pub mirror: Option<Box<OriginInfo>>,
    /// The streams it sources from, kept only when there are some.
    #[serde(deserialize_with = "de::list_if_any")]
    pub sources: de::ThinList<OriginInfo>,
}

/// A mirror's or a source's state as the stream's leader reports it (every
/// version from 2.9 on; `seq` from 2.15).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct OriginInfo {
    /// The origin stream's name.
    pub(crate) name: Box<str>,
    /// Where the origin is reached when not in the same account and domain.
    pub(crate) external: Option<ExternalOrigin>,
    /// Origin messages beyond the last one copied, as of the last copy:
    /// the server updates it only when a message arrives.
    pub(crate) lag: Option<u64>,
    /// Nanoseconds since the origin was last heard from; -1 when never.
    pub(crate) active: de::Nanos,
    /// The origin sequence last copied (sources, 2.15+; absent before the
    /// first copy).
    pub(crate) seq: Option<u64>,
    /// The source's subject filter (empty for none).
    pub(crate) filter_subject: Box<str>,
}

/// The API prefix through which a mirror or source reaches its origin in
/// another account or domain.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ExternalOrigin {
    /// The API prefix, as `$JS.<domain>.API`.
    pub(crate) api: Box<str>,
}

impl StreamDetail {
    /// The stream's mirror and sources, each with whether it is the mirror.
    pub(crate) fn origins(&self) -> impl Iterator<Item = (bool, &OriginInfo)> {
        let sources = self.sources.as_deref().map_or(&[][..], |s| s);
        let mirror = self.mirror.as_deref().map(|m| (true, m));
        mirror.into_iter().chain(sources.iter().map(|s| (false, s)))
    }
}

/// Stream limits; negative means unlimited.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct StreamConfig {
    /// Most messages kept.
    pub(crate) max_msgs: Option<i64>,
    /// Most bytes kept.
    pub(crate) max_bytes: Option<i64>,
    /// Oldest message kept, in nanoseconds; 0 means unlimited.
    pub(crate) max_age: Option<i64>,
    /// Whether a full stream refuses new messages (`discard: new`) instead
    /// of removing its oldest.
    #[serde(rename = "discard", deserialize_with = "de::discards_new")]
    pub(crate) discard_new: bool,
    /// The values of the keys `--jsz-metadata-labels` names in its
    /// `metadata` (2.10+); `None` (one pointer) without them.
    #[serde(rename = "metadata", deserialize_with = "super::metadata::stream")]
    pub(crate) metadata: Option<Box<super::Metadata>>,
}

/// Stream contents.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct StreamContents {
    /// Messages stored.
    pub(crate) messages: u64,
    /// Bytes stored.
    pub(crate) bytes: u64,
    /// First sequence stored.
    pub first_seq: u64,
    /// When the first message stored was stored, as Unix seconds.
    #[serde(deserialize_with = "crate::sources::timestamp")]
    pub first_ts: Option<f64>,
    /// Last sequence stored.
    pub last_seq: u64,
    /// When the last message stored was stored, as Unix seconds.
    #[serde(deserialize_with = "crate::sources::timestamp")]
    pub last_ts: Option<f64>,
    /// Consumers.
    pub(crate) consumer_count: u64,
    /// Sequences between the first and the last that were removed (interior
    /// deletes: a message deleted by hand, a per-subject limit).
    pub(crate) num_deleted: u64,
}

/// One consumer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ConsumerInfo {
    /// Consumer name. (Names and lists that are only read are boxed: held
    /// for every consumer of a poll, each `String` or `Vec` would take 8
    /// bytes more.)
    pub name: Box<str>,
    /// When the consumer was made, as a hash of the server's text.
    #[serde(deserialize_with = "de::hashed")]
    pub(crate) created: u64,
    /// Set for consumers in a JetStream cluster.
    pub(crate) cluster: Option<ClusterInfo>,
    /// Read with `config=true`, or kept from the last read; one value
    /// shared by the consumers that have the same ([`de::Kept::share_with`]).
    #[serde(deserialize_with = "de::shared")]
    pub(crate) config: Option<Arc<ConsumerConfig>>,
    /// The subject filter or ack policy differs from the configuration kept
    /// before this poll read it: the removal count starts again.
    #[serde(skip)]
    pub(crate) reconfigured: bool,
    /// Last delivered.
    pub delivered: SequenceInfo,
    /// Acknowledged floor.
    pub ack_floor: SequenceInfo,
    /// Delivered, not yet acknowledged.
    pub num_ack_pending: u64,
    /// Unacknowledged messages delivered more than once (a level).
    pub(crate) num_redelivered: u64,
    /// Pull requests waiting.
    pub(crate) num_waiting: u64,
    /// Messages matching the consumer not yet delivered.
    pub num_pending: u64,
    /// Whether the consumer is paused (2.11+, sent only when true). `None`
    /// means the server did not say; `JszSource`'s finish step makes it
    /// `Some(false)` on servers that report pausing, see [`super::reports_pausing`].
    pub(crate) paused: Option<bool>,
    /// Nanoseconds until a paused consumer resumes (2.11+, sent only while paused).
    pub(crate) pause_remaining: de::Nanos,
    /// The state of the consumer's priority group (2.11+, only for consumers
    /// with priority groups; the server reports the first group only). Read
    /// with [`ConsumerInfo::priority_groups`]; none is 8 bytes where an
    /// empty list takes 16, for every consumer of a poll.
    #[serde(rename = "priority_groups", deserialize_with = "de::list_if_any")]
    pub(crate) groups: de::ThinList<PriorityGroup>,
}

/// One priority group's state in a consumer's info.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PriorityGroup {
    /// The group's name.
    pub(crate) group: String,
    /// The client the server pinned to the group (`pinned_client` policy);
    /// absent or empty while none is. Changes at every pin: never a label.
    pub(crate) pinned_client_id: String,
}

/// The `priority_policy` value of consumers that pin one client per group.
pub(crate) const PINNED_CLIENT_POLICY: &str = "pinned_client";

impl ConsumerInfo {
    /// The state of its priority groups (2.11+); empty for a consumer without.
    pub fn priority_groups(&self) -> &[PriorityGroup] {
        self.groups.as_deref().map_or(&[], |g| g)
    }

    /// (group, whether a client is pinned) for each priority group of a
    /// consumer with the `pinned_client` policy; empty for any other.
    pub fn pinned_groups(&self) -> impl Iterator<Item = (&str, bool)> {
        let pins = self.config.as_ref().is_some_and(|c| c.pins_clients);
        self.priority_groups()
            .iter()
            .filter(move |_| pins)
            .map(|g| (g.group.as_str(), !g.pinned_client_id.is_empty()))
    }
}

/// The consumer settings the exporter reports.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(default)]
pub struct ConsumerConfig {
    /// Whether the consumer has a durable name (the name itself is `name`;
    /// an ephemeral consumer has none).
    #[serde(rename = "durable_name", deserialize_with = "de::present")]
    pub(crate) durable: bool,
    /// Deliveries before a message is given up; -1 means unlimited.
    pub(crate) max_deliver: Option<i64>,
    /// Nanoseconds before an unacknowledged message is redelivered (8
    /// bytes, which leave room for the metadata's pointer below).
    pub(crate) ack_wait: de::Nanos,
    /// Whether the ack policy is `none`: every delivery is a first one.
    #[serde(rename = "ack_policy", deserialize_with = "de::acks_none")]
    pub(crate) acks_none: bool,
    /// Unacknowledged messages at which delivery stops; -1 means unlimited.
    pub(crate) max_ack_pending: Option<i64>,
    /// The one subject filter (older form; empty for none).
    pub(crate) filter_subject: Box<str>,
    /// Several subject filters (2.10+).
    #[serde(deserialize_with = "de::boxed_list")]
    pub(crate) filter_subjects: Box<[String]>,
    /// Whether the priority policy (2.11+) is `pinned_client` (others are
    /// `overflow` and `prioritized`).
    #[serde(rename = "priority_policy", deserialize_with = "de::pins_clients")]
    pub(crate) pins_clients: bool,
    /// What is kept of its `metadata` (2.10+): its lag threshold
    /// ([`super::LAG_THRESHOLD_KEY`]) and the values of the keys
    /// `--jsz-metadata-labels` names; `None` (one pointer) without them.
    /// The configuration stays 88 bytes (a test in `metadata.rs` holds it).
    #[serde(rename = "metadata", deserialize_with = "super::metadata::consumer")]
    pub(crate) metadata: Option<Box<super::Metadata>>,
}

impl ConsumerConfig {
    /// The consumer's subject filters; empty when it takes every subject.
    pub(crate) fn filters(&self) -> Vec<String> {
        if !self.filter_subjects.is_empty() {
            self.filter_subjects.to_vec()
        } else if self.filter_subject.is_empty() {
            Vec::new()
        } else {
            vec![self.filter_subject.to_string()]
        }
    }
}

/// A position in the stream and consumer and when it was reached.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(default)]
pub struct SequenceInfo {
    /// Consumer sequence: every delivery, first or again, takes the next one.
    pub(crate) consumer_seq: u64,
    /// Stream sequence.
    pub stream_seq: u64,
    /// When it was last reached, as Unix seconds; NaN when never (read it
    /// with [`SequenceInfo::last_active`]). Not an `Option`, which takes 8
    /// bytes more, twice for every consumer of a poll.
    #[serde(rename = "last_active", deserialize_with = "de::seconds_or_nan")]
    pub(crate) active_at: f64,
}

impl Default for SequenceInfo {
    fn default() -> SequenceInfo {
        SequenceInfo {
            consumer_seq: 0,
            stream_seq: 0,
            active_at: f64::NAN,
        }
    }
}

impl SequenceInfo {
    /// When it was last reached, as Unix seconds; `None` when never.
    pub fn last_active(&self) -> Option<f64> {
        Some(self.active_at).filter(|t| !t.is_nan())
    }
}
