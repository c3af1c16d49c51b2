//! `/jsz`: JetStream streams and consumers, with their configuration.
//!
//! Every replica of a clustered stream or consumer reports its own view; only
//! the leader's is current, so a stream or consumer is taken from the server
//! that leads it (and once, should two servers claim it during a change of
//! leader). Accounts are read in pages (`offset`, `limit`) so that servers
//! with more accounts than one page are read whole.

use std::collections::HashSet;

use serde::Deserialize;

use super::kept::KeptBudget;
use super::{unix_seconds, ServerLink, Source};
use super::{MonitoringSource, TargetSnapshot};
use crate::poll_error::PollError;

mod cut;
pub mod de;
mod filter;
mod leaders;
pub mod patterns;
pub mod split;
mod stream_end;
pub use filter::JszFilter;
pub use leaders::{select, select_leaders, ConsumerRow, Leaders, StreamRow};

/// The fields of a `/jsz` reply the exporter uses. (`S` is the type of a
/// stream: while a reply is parsed in pieces, streams cut out are `None`.)
#[derive(Debug, Default, Deserialize)]
#[serde(
    default,
    bound(deserialize = "S: Deserialize<'de> + Default + de::Kept")
)]
pub struct Jsz<S = StreamDetail> {
    /// The server's clock when it answered.
    pub now: String,
    /// JetStream is off on this server.
    pub disabled: bool,
    /// Accounts with JetStream on this server (all pages).
    pub total: Option<usize>,
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
    pub name: String,
    /// The account's own name (its public key in operator mode), by which
    /// servers from 2.10 on order the pages.
    pub id: String,
    /// The account's streams.
    #[serde(deserialize_with = "de::list")]
    pub stream_detail: Vec<S>,
}

/// Who leads a clustered stream or consumer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ClusterInfo {
    /// The leader's server name; empty while there is none.
    pub leader: Box<str>,
}

/// One stream.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamDetail {
    /// Stream name.
    pub name: String,
    /// Set for streams in a JetStream cluster.
    pub cluster: Option<ClusterInfo>,
    /// Limits.
    pub config: Option<StreamConfig>,
    /// Current contents.
    pub state: StreamState,
    /// Consumers.
    #[serde(deserialize_with = "de::list")]
    pub consumer_detail: Vec<ConsumerInfo>,
}

/// Stream limits; negative means unlimited.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamConfig {
    /// Most messages kept.
    pub max_msgs: Option<i64>,
    /// Most bytes kept.
    pub max_bytes: Option<i64>,
    /// Oldest message kept, in nanoseconds; 0 means unlimited.
    pub max_age: Option<i64>,
}

/// Stream contents.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamState {
    /// Messages stored.
    pub messages: u64,
    /// Bytes stored.
    pub bytes: u64,
    /// First sequence stored.
    pub first_seq: u64,
    /// When the first message stored was stored, as Unix seconds.
    #[serde(deserialize_with = "super::timestamp")]
    pub first_ts: Option<f64>,
    /// Last sequence stored.
    pub last_seq: u64,
    /// When the last message stored was stored, as Unix seconds.
    #[serde(deserialize_with = "super::timestamp")]
    pub last_ts: Option<f64>,
    /// Consumers.
    pub consumer_count: u64,
}

/// One consumer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ConsumerInfo {
    /// Consumer name. (Names and lists that are only read are boxed: held
    /// for every consumer of a poll, each `String` or `Vec` would take 8
    /// bytes more.)
    pub name: Box<str>,
    /// Set for consumers in a JetStream cluster.
    pub cluster: Option<ClusterInfo>,
    /// Present with `config=true`.
    pub config: Option<ConsumerConfig>,
    /// Last delivered.
    pub delivered: SequenceInfo,
    /// Acknowledged floor.
    pub ack_floor: SequenceInfo,
    /// Delivered, not yet acknowledged.
    pub num_ack_pending: u64,
    /// Unacknowledged messages delivered more than once (a level).
    pub num_redelivered: u64,
    /// Pull requests waiting.
    pub num_waiting: u64,
    /// Messages matching the consumer not yet delivered.
    pub num_pending: u64,
    /// Whether the consumer is paused (2.11+, sent only when true). `None`
    /// means the server did not say; [`JszSource`]'s finish step makes it
    /// `Some(false)` on servers that report pausing, see [`reports_pausing`].
    pub paused: Option<bool>,
    /// Nanoseconds until a paused consumer resumes (2.11+, sent only while paused).
    pub pause_remaining: Option<i64>,
    /// The state of the consumer's priority group (2.11+, only for consumers
    /// with priority groups; the server reports the first group only).
    #[serde(deserialize_with = "de::boxed_list")]
    pub priority_groups: Box<[PriorityGroup]>,
}

/// One priority group's state in a consumer's info.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PriorityGroup {
    /// The group's name.
    pub group: String,
    /// The client the server pinned to the group (`pinned_client` policy);
    /// absent or empty while none is. Changes at every pin: never a label.
    pub pinned_client_id: String,
}

/// The `priority_policy` value of consumers that pin one client per group.
pub const PINNED_CLIENT_POLICY: &str = "pinned_client";

impl ConsumerInfo {
    /// (group, whether a client is pinned) for each priority group of a
    /// consumer with the `pinned_client` policy; empty for any other.
    pub fn pinned_groups(&self) -> impl Iterator<Item = (&str, bool)> {
        let pins = self.config.as_ref().is_some_and(|c| c.pins_clients);
        self.priority_groups
            .iter()
            .filter(move |_| pins)
            .map(|g| (g.group.as_str(), !g.pinned_client_id.is_empty()))
    }
}

/// The consumer settings the exporter reports.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ConsumerConfig {
    /// Whether the consumer has a durable name (the name itself is `name`;
    /// an ephemeral consumer has none).
    #[serde(rename = "durable_name", deserialize_with = "de::present")]
    pub durable: bool,
    /// Deliveries before a message is given up; -1 means unlimited.
    pub max_deliver: Option<i64>,
    /// Nanoseconds before an unacknowledged message is redelivered.
    pub ack_wait: Option<i64>,
    /// Unacknowledged messages at which delivery stops; -1 means unlimited.
    pub max_ack_pending: Option<i64>,
    /// The one subject filter (older form; empty for none).
    pub filter_subject: Box<str>,
    /// Several subject filters (2.10+).
    #[serde(deserialize_with = "de::boxed_list")]
    pub filter_subjects: Box<[String]>,
    /// Whether the priority policy (2.11+) is `pinned_client` (others are
    /// `overflow` and `prioritized`).
    #[serde(rename = "priority_policy", deserialize_with = "de::pins_clients")]
    pub pins_clients: bool,
}

impl ConsumerConfig {
    /// The consumer's subject filters; empty when it takes every subject.
    pub fn filters(&self) -> Vec<String> {
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
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SequenceInfo {
    /// Consumer sequence: every delivery, first or again, takes the next one.
    pub consumer_seq: u64,
    /// Stream sequence.
    pub stream_seq: u64,
    /// When it was last reached, as Unix seconds; absent when never.
    #[serde(deserialize_with = "super::timestamp")]
    pub last_active: Option<f64>,
}

/// One server's JetStream state from one poll (all pages).
#[derive(Debug, Default)]
pub struct JszPoll {
    /// The server's clock at the first page, as Unix seconds.
    pub now: Option<f64>,
    /// Every account on every page.
    pub accounts: Vec<AccountDetail>,
}

/// Reads every page of accounts with streams, consumers and configuration,
/// keeping what `filter` keeps (page by page, so that what it leaves out is
/// never held for long).
///
/// When the filter names one account exactly, the server is asked for that
/// account alone (`acc=`). The server looks it up by its own name (the
/// public key in operator mode), not by a name tag: when that finds
/// nothing, everything is read and filtered here.
///
/// Servers from 2.10 on hand out the accounts ordered by name, so pages add
/// up to the whole. nats-server 2.9 pages over its accounts in no fixed
/// order: pages overlap and miss accounts. When the pages read are not in
/// one ascending order, everything is read again in one request.
pub async fn poll(
    link: &ServerLink<'_>,
    page_size: u32,
    filter: &JszFilter,
) -> Result<JszPoll, PollError> {
    if let Some(account) = filter.server_account() {
        let pages = Pages {
            account: Some(account),
            size: page_size,
        };
        let (out, _) = read_pages(link, pages, filter).await?;
        if !out.accounts.is_empty() {
            return Ok(out);
        }
    }
    let pages = Pages {
        account: None,
        size: page_size,
    };
    let (out, in_order) = read_pages(link, pages, filter).await?;
    if in_order {
        return Ok(out);
    }
    // Read again: what the pages out of order keep is let go.
    let kept = out.accounts.iter().map(de::Kept::kept_bytes).sum();
    link.kept().release(kept);
    drop(out);
    let pages = Pages {
        account: None,
        size: u32::MAX >> 1,
    };
    Ok(read_pages(link, pages, filter).await?.0)
}

/// Which pages to read: of one account (`acc=`) or all, and their size.
#[derive(Debug, Clone, Copy)]
struct Pages<'a> {
    account: Option<&'a str>,
    size: u32,
}

/// Reads pages of `page_size` accounts until the last; returns the distinct
/// accounts, and whether every account read (repeats included) came after
/// the one before it, as in one ordered list (always so for one page).
async fn read_pages(
    link: &ServerLink<'_>,
    pages_to_read: Pages<'_>,
    filter: &JszFilter,
) -> Result<(JszPoll, bool), PollError> {
    let page_size = pages_to_read.size;
    let mut out = JszPoll::default();
    let mut seen = HashSet::new();
    let mut offset = 0usize;
    let mut pages = 0;
    let mut last_id: Option<String> = None;
    let mut in_order = true;
    loop {
        let mut query = vec![
            ("accounts", "true".into()),
            ("streams", "true".into()),
            ("consumers", "true".into()),
            ("config", "true".into()),
            ("offset", offset.to_string()),
            ("limit", page_size.to_string()),
        ];
        if let Some(account) = pages_to_read.account {
            query.push(("acc", account.to_string()));
        }
        // Pages of large accounts are large: parsed as they arrive over
        // HTTP; a NATS reply arrives whole. A page charges a share of
        // the poll's budget as it is parsed; once it is filtered, the poll's
        // budget is charged with what it keeps instead.
        let share = KeptBudget::share(link.kept());
        let page = link
            .with_kept(&share)
            .get_streamed("jsz", &query, split::parse, split::parse_whole)
            .await?;
        pages += 1;
        if out.now.is_none() {
            out.now = unix_seconds(&page.now);
        }
        let len = page.account_details.len();
        let mut fresh = Vec::new();
        for a in page.account_details {
            let id = if a.id.is_empty() { &a.name } else { &a.id };
            if last_id.as_ref().is_some_and(|last| last >= id) {
                in_order = false;
            }
            last_id = Some(id.clone());
            if seen.insert(a.name.clone()) {
                fresh.push(a);
            }
        }
        let any_fresh = !fresh.is_empty();
        filter.apply(&mut fresh);
        drop(share);
        let keeps = fresh.iter().map(de::Kept::kept_bytes).sum();
        if !link.kept().charge(keeps) {
            return Err(PollError::TooMuchKept(link.kept().limit()));
        }
        out.accounts.append(&mut fresh);
        offset += len;
        // Stop at a short page, at the announced total, or when a server that
        // ignores paging hands back accounts already read.
        if page.disabled
            || len < page_size as usize
            || !any_fresh
            || page.total.is_some_and(|t| offset >= t)
        {
            return Ok((out, in_order || pages == 1));
        }
    }
}

/// The `/jsz` source of one server.
#[derive(Debug, Default)]
pub struct JszSource {
    page_size: u32,
    filter: JszFilter,
}

impl JszSource {
    /// Reads `page_size` accounts per request and keeps what `filter` keeps.
    pub fn new(page_size: u32, filter: JszFilter) -> JszSource {
        JszSource { page_size, filter }
    }
}

impl MonitoringSource for JszSource {
    type Reply = JszPoll;

    fn source(&self) -> Source {
        Source::Jsz
    }

    fn poll<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> impl std::future::Future<Output = Result<JszPoll, PollError>> + Send + 'a {
        poll(link, self.page_size, &self.filter)
    }

    fn absorb(&self, jsz: JszPoll, snap: &mut TargetSnapshot) {
        snap.jsz = Some(jsz);
    }

    /// `paused` is sent only when true: on a server known to report pausing
    /// its absence means "not paused"; on older or unknown ones it stays absent.
    fn finish(&self, snap: &mut TargetSnapshot) {
        let reports = snap.server_version.as_deref().is_some_and(reports_pausing);
        if let (true, Some(jsz)) = (reports, snap.jsz.as_mut()) {
            for a in &mut jsz.accounts {
                for s in &mut a.stream_detail {
                    for c in &mut s.consumer_detail {
                        c.paused.get_or_insert(false);
                    }
                }
            }
        }
    }
}

/// Whether a server of this version (`/varz` `version`, as `2.11.0` or
/// `2.12.0-beta.1`) reports consumer pausing: 2.11 and later.
pub fn reports_pausing(version: &str) -> bool {
    super::version_at_least(version, (2, 11, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pausing_is_reported_from_2_11_on() {
        for (v, want) in [
            ("2.9.10", false),
            ("2.10.26", false),
            ("2.11.0", true),
            ("2.12.0-beta.1", true),
            ("3.0.0", true),
            ("", false),
            ("garbage", false),
        ] {
            assert_eq!(reports_pausing(v), want, "{v}");
        }
    }
}
