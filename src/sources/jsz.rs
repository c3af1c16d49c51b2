//! `/jsz`: JetStream streams and consumers, with their configuration.
//!
//! Every replica of a clustered stream or consumer reports its own view; only
//! the leader's is current, so a stream or consumer is taken from the server
//! that leads it (and once, should two servers claim it during a change of
//! leader). Accounts are read in pages (`offset`, `limit`) so that servers
//! with more accounts than one page are read whole.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;
use url::Url;

use super::{endpoint_url, get_json, unix_seconds};
use crate::encode::{gauge_family, Num};
use crate::error::PollError;

/// The fields of a `/jsz` reply the exporter uses.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Jsz {
    /// The server's clock when it answered.
    pub now: String,
    /// JetStream is off on this server.
    pub disabled: bool,
    /// Accounts with JetStream on this server (all pages).
    pub total: Option<usize>,
    /// This page of accounts.
    pub account_details: Vec<AccountDetail>,
}

/// One account's streams.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AccountDetail {
    /// Account name (its name tag where one is set).
    pub name: String,
    /// The account's streams.
    pub stream_detail: Vec<StreamDetail>,
}

/// Who leads a clustered stream or consumer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ClusterInfo {
    /// The leader's server name; empty while there is none.
    pub leader: String,
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
    /// Last sequence stored.
    pub last_seq: u64,
    /// Consumers.
    pub consumer_count: u64,
}

/// One consumer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ConsumerInfo {
    /// Consumer name.
    pub name: String,
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
}

/// The consumer settings the exporter reports.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ConsumerConfig {
    /// Deliveries before a message is given up; -1 means unlimited.
    pub max_deliver: Option<i64>,
    /// Nanoseconds before an unacknowledged message is redelivered.
    pub ack_wait: Option<i64>,
    /// Unacknowledged messages at which delivery stops; -1 means unlimited.
    pub max_ack_pending: Option<i64>,
}

/// A position in the stream and consumer and when it was reached.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SequenceInfo {
    /// Stream sequence.
    pub stream_seq: u64,
    /// When it was last reached; absent when never.
    pub last_active: Option<String>,
}

/// One server's JetStream state from one poll (all pages).
#[derive(Debug, Default)]
pub struct JszPoll {
    /// The server's clock at the first page, as Unix seconds.
    pub now: Option<f64>,
    /// Every account on every page.
    pub accounts: Vec<AccountDetail>,
}

/// Reads every page of accounts with streams, consumers and configuration.
pub async fn poll(
    http: &reqwest::Client,
    base: &Url,
    page_size: u32,
    timeout: Duration,
) -> Result<JszPoll, PollError> {
    let mut out = JszPoll::default();
    let mut seen = HashSet::new();
    let mut offset = 0usize;
    loop {
        let url = endpoint_url(
            base,
            "jsz",
            &[
                ("accounts", "true".into()),
                ("streams", "true".into()),
                ("consumers", "true".into()),
                ("config", "true".into()),
                ("offset", offset.to_string()),
                ("limit", page_size.to_string()),
            ],
        );
        let page: Jsz = get_json(http, url, timeout).await?;
        if out.now.is_none() {
            out.now = unix_seconds(&page.now);
        }
        let len = page.account_details.len();
        let mut fresh = 0;
        for a in page.account_details {
            if seen.insert(a.name.clone()) {
                fresh += 1;
                out.accounts.push(a);
            }
        }
        offset += len;
        // Stop at a short page, at the announced total, or when a server that
        // ignores paging hands back accounts already read.
        if page.disabled
            || len < page_size as usize
            || fresh == 0
            || page.total.is_some_and(|t| offset >= t)
        {
            return Ok(out);
        }
    }
}

fn leads(cluster: &Option<ClusterInfo>, server: Option<&str>) -> bool {
    match (cluster, server) {
        (None, _) => true,
        (Some(c), Some(s)) => c.leader == s,
        (Some(_), None) => false,
    }
}

/// A consumer chosen for export: account, stream, the consumer, the server clock.
pub type ConsumerRow<'a> = (&'a str, &'a str, &'a ConsumerInfo, Option<f64>);
/// A stream chosen for export: account and the stream.
pub type StreamRow<'a> = (&'a str, &'a StreamDetail);

/// Picks, over all servers, each stream and consumer from the server that leads it, once.
pub fn select<'a>(
    polls: &[(Option<&'a str>, &'a JszPoll)],
) -> (Vec<StreamRow<'a>>, Vec<ConsumerRow<'a>>) {
    let mut streams = Vec::new();
    let mut consumers = Vec::new();
    // One server never lists a stream or consumer twice; only several
    // servers can disagree about who leads (during a change of leader).
    let dedupe = polls.len() > 1;
    let mut seen_streams = HashSet::new();
    let mut seen_consumers = HashSet::new();
    for (server, poll) in polls {
        for acc in &poll.accounts {
            for st in &acc.stream_detail {
                if leads(&st.cluster, *server)
                    && (!dedupe || seen_streams.insert((acc.name.as_str(), st.name.as_str())))
                {
                    streams.push((acc.name.as_str(), st));
                }
                for c in &st.consumer_detail {
                    let key = (acc.name.as_str(), st.name.as_str(), c.name.as_str());
                    if leads(&c.cluster, *server) && (!dedupe || seen_consumers.insert(key)) {
                        consumers.push((acc.name.as_str(), st.name.as_str(), c, poll.now));
                    }
                }
            }
        }
    }
    (streams, consumers)
}

fn age(now: Option<f64>, then: &Option<String>) -> Option<f64> {
    let then = unix_seconds(then.as_deref()?)?;
    Some((now? - then).max(0.0))
}

/// Writes the per-stream families.
pub fn encode_streams(enc: &mut DescriptorEncoder, streams: &[StreamRow]) -> fmt::Result {
    let g = |enc: &mut DescriptorEncoder,
             name: &str,
             help: &str,
             f: &dyn Fn(&StreamDetail) -> Option<Num>| {
        gauge_family(
            enc,
            name,
            help,
            streams.iter().filter_map(|(a, s)| {
                f(s).map(|v| ([("account", *a), ("stream", s.name.as_str())], v))
            }),
        )
    };
    let limit = |v: Option<i64>| v.filter(|x| *x > 0);
    g(
        enc,
        "nats_delivery_stream_messages",
        "Messages stored in the stream.",
        &|s| Some(Num::U(s.state.messages)),
    )?;
    g(
        enc,
        "nats_delivery_stream_bytes",
        "Bytes stored in the stream.",
        &|s| Some(Num::U(s.state.bytes)),
    )?;
    g(
        enc,
        "nats_delivery_stream_first_sequence",
        "First sequence stored in the stream.",
        &|s| Some(Num::U(s.state.first_seq)),
    )?;
    g(
        enc,
        "nats_delivery_stream_last_sequence",
        "Last sequence stored in the stream.",
        &|s| Some(Num::U(s.state.last_seq)),
    )?;
    g(
        enc,
        "nats_delivery_stream_consumers",
        "Consumers of the stream.",
        &|s| Some(Num::U(s.state.consumer_count)),
    )?;
    g(
        enc,
        "nats_delivery_stream_max_messages",
        "The stream's max_msgs limit; absent when unlimited.",
        &|s| limit(s.config.as_ref()?.max_msgs).map(Num::I),
    )?;
    g(
        enc,
        "nats_delivery_stream_max_bytes",
        "The stream's max_bytes limit; absent when unlimited.",
        &|s| limit(s.config.as_ref()?.max_bytes).map(Num::I),
    )?;
    g(
        enc,
        "nats_delivery_stream_max_age_seconds",
        "The stream's max_age limit; absent when unlimited.",
        &|s| limit(s.config.as_ref()?.max_age).map(|ns| Num::F(ns as f64 / 1e9)),
    )
}

fn consumer_family(
    enc: &mut DescriptorEncoder,
    consumers: &[ConsumerRow],
    name: &str,
    help: &str,
    value: &dyn Fn(&ConsumerInfo, Option<f64>) -> Option<Num>,
) -> fmt::Result {
    gauge_family(
        enc,
        name,
        help,
        consumers.iter().filter_map(|(a, s, c, now)| {
            let labels = [
                ("account", *a),
                ("stream", *s),
                ("consumer", c.name.as_str()),
            ];
            value(c, *now).map(|v| (labels, v))
        }),
    )
}

fn config_value(c: &ConsumerInfo, field: fn(&ConsumerConfig) -> Option<i64>) -> Option<i64> {
    c.config.as_ref().and_then(field).filter(|v| *v >= 0)
}

/// Which consumer families to write: the exporter writes the two halves on
/// two threads, because at 10,000 consumers encoding is a large share of a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerHalf {
    /// Backlog, ack pending and its limit, redelivered, waiting pulls, delivered sequence.
    Flow,
    /// Ack floor, max_deliver, ack_wait and the ages of the last delivery and ack.
    Progress,
}

/// Writes one half of the per-consumer families.
pub fn encode_consumers(
    enc: &mut DescriptorEncoder,
    consumers: &[ConsumerRow],
    half: ConsumerHalf,
) -> fmt::Result {
    let mut family =
        |name: &str, help: &str, value: &dyn Fn(&ConsumerInfo, Option<f64>) -> Option<Num>| {
            consumer_family(enc, consumers, name, help, value)
        };
    if half == ConsumerHalf::Flow {
        family(
            "nats_delivery_consumer_pending_messages",
            "Messages in the stream this consumer has not yet delivered (backlog).",
            &|c, _| Some(Num::U(c.num_pending)),
        )?;
        family(
            "nats_delivery_consumer_ack_pending_messages",
            "Messages delivered and not yet acknowledged.",
            &|c, _| Some(Num::U(c.num_ack_pending)),
        )?;
        family(
            "nats_delivery_consumer_max_ack_pending",
            "Unacknowledged messages at which the server stops delivering; absent when unlimited.",
            &|c, _| config_value(c, |k| k.max_ack_pending).map(Num::I),
        )?;
        family(
            "nats_delivery_consumer_redelivered_messages",
            "Unacknowledged messages that were delivered more than once (a level, not a count).",
            &|c, _| Some(Num::U(c.num_redelivered)),
        )?;
        family(
            "nats_delivery_consumer_waiting_pulls",
            "Pull requests waiting for messages.",
            &|c, _| Some(Num::U(c.num_waiting)),
        )?;
        return family(
            "nats_delivery_consumer_delivered_stream_sequence",
            "Stream sequence of the last message delivered.",
            &|c, _| Some(Num::U(c.delivered.stream_seq)),
        );
    }
    family(
        "nats_delivery_consumer_ack_floor_stream_sequence",
        "Stream sequence below which every message is acknowledged.",
        &|c, _| Some(Num::U(c.ack_floor.stream_seq)),
    )?;
    family(
        "nats_delivery_consumer_max_deliver",
        "Deliveries after which a message is given up; absent when unlimited.",
        &|c, _| config_value(c, |k| k.max_deliver).map(Num::I),
    )?;
    family(
        "nats_delivery_consumer_ack_wait_seconds",
        "Time before an unacknowledged message is delivered again.",
        &|c, _| config_value(c, |k| k.ack_wait).map(|ns| Num::F(ns as f64 / 1e9)),
    )?;
    family(
        "nats_delivery_consumer_last_delivery_age_seconds",
        "Seconds since the consumer last delivered a message, by the server's clock; absent when never.",
        &|c, now| age(now, &c.delivered.last_active).map(Num::F),
    )?;
    family(
        "nats_delivery_consumer_last_ack_age_seconds",
        "Seconds since a message of this consumer was last acknowledged, by the server's clock; absent when never.",
        &|c, now| age(now, &c.ack_floor.last_active).map(Num::F),
    )
}
