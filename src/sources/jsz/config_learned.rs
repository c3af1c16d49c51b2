//! What a read beside the scrapes keeps of each stream as soon as it is
//! parsed ([`split::parse_reduced`]): the
//! hashes of its names, its configuration and its consumers' (equal ones
//! shared). So a read of one account of 100,000 consumers with their
//! configuration holds some 16 bytes a consumer, never the account's reply
//! parsed whole.

use std::sync::Arc;

use std::io::BufRead;

use super::de::{config_bytes, metadata_bytes, Kept};
use super::pages::{PageSink, StreamForm};
use super::{split, AccountDetail, ConsumerConfig, Jsz, JszFilter, Reader};
use super::{StreamConfig, StreamDetail, Which};
use crate::poll_error::PollError;
use crate::sources::parse_error::ParseError;

/// What a read beside the scrapes learned: the accounts the filter keeps,
/// each stream learned or left out (`None`).
pub(super) type LearnedAccounts = Vec<AccountDetail<Option<LearnedStream>>>;

/// One stream as a read learns it: what is kept of it is only given its
/// configuration (the figures kept stay those of the last poll).
#[derive(Debug)]
pub(super) struct LearnedStream {
    /// The hash of its name and `created` (its account's comes later).
    pub(super) key: u64,
    pub(super) config: Option<StreamConfig>,
    pub(super) consumers: Box<[LearnedConsumer]>,
}

/// One consumer as a read learns it: 16 bytes.
#[derive(Debug)]
pub(super) struct LearnedConsumer {
    /// The hash of its stream's name, its own and its `created`.
    pub(super) key: u64,
    /// Shared with the consumer before it when equal, as parsed.
    pub(super) config: Option<Arc<ConsumerConfig>>,
}

/// `stream` as a read beside the scrapes keeps it, with the consumers
/// `filter` keeps; `None` when the filter leaves the stream out.
pub(super) fn learned(filter: &JszFilter, stream: StreamDetail) -> Option<LearnedStream> {
    if !filter.streams.keeps(&stream.name) {
        return None;
    }
    let consumers = (stream.consumer_detail.iter())
        .filter(|c| filter.consumers.keeps(&c.name))
        .map(|c| LearnedConsumer {
            key: local_key(&[&stream.name, &c.name], c.created),
            config: c.config.clone(),
        })
        .collect();
    Some(LearnedStream {
        key: local_key(&[&stream.name], stream.created),
        config: stream.config,
        consumers,
    })
}

/// Streams cut out waiting for a parser: one, as a stream of 100 consumers
/// with its configuration is some 250 KB of indented text, held twice over
/// (charged as its parse may need), and a read that learns has little room.
const IN_FLIGHT: usize = 1;

/// Each stream learned as soon as it is parsed, with what the filter keeps.
impl StreamForm for Option<LearnedStream> {
    type With = Arc<JszFilter>;

    fn parse(input: &mut dyn BufRead, filter: &Arc<JszFilter>) -> Result<Jsz<Self>, ParseError> {
        split::parse_reduced(input, &|stream| learned(filter, stream), IN_FLIGHT)
    }

    fn parse_whole(body: &[u8], filter: &Arc<JszFilter>) -> Result<Jsz<Self>, ParseError> {
        split::parse_whole_reduced(body, &|stream| learned(filter, stream), IN_FLIGHT)
    }
}

/// Reads `which` accounts with their configuration, learning each stream
/// as soon as it is parsed.
pub(super) async fn learn(
    reader: Reader<'_, '_>,
    which: Which<'_>,
) -> Result<LearnedAccounts, PollError> {
    let mut learning = Learning {
        accounts: Vec::new(),
        filter: reader.filter,
    };
    let with = Arc::new(reader.filter.clone());
    reader.read_into(which, true, &with, &mut learning).await?;
    Ok(learning.accounts)
}

/// What a read that learns keeps, page by page.
struct Learning<'f> {
    accounts: LearnedAccounts,
    filter: &'f JszFilter,
}

impl PageSink<Option<LearnedStream>> for Learning<'_> {
    /// Keeps the accounts the filter keeps; returns what they keep.
    fn take(&mut self, accounts: LearnedAccounts) -> usize {
        let filter = &self.filter.accounts;
        let kept = accounts
            .into_iter()
            .filter(|a| filter.keeps_any(&[&a.name, &a.id]));
        let before = self.accounts.len();
        self.accounts.extend(kept);
        self.accounts[before..].iter().map(Kept::kept_bytes).sum()
    }

    fn forget(&mut self) -> usize {
        let learned = std::mem::take(&mut self.accounts);
        learned.iter().map(Kept::kept_bytes).sum()
    }
}

/// The hash of a stream's or consumer's names within its account, with its
/// `created`: [`in_account`] makes it the key kept.
pub(super) fn local_key(names: &[&str], created: u64) -> u64 {
    hash(&(names, created))
}

/// The key of a stream or consumer of `account` whose [`local_key`] is `local`.
pub(super) fn in_account(account: &str, local: u64) -> u64 {
    hash(&(account, local))
}

fn hash(value: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// A stream the filter left out keeps nothing.
impl Kept for Option<LearnedStream> {
    /// Its consumers (each configuration counted where a run of equal ones
    /// begins) and its configuration's metadata.
    fn own_heap(&self) -> usize {
        let Some(stream) = self else {
            return 0;
        };
        let mut previous: Option<&Arc<ConsumerConfig>> = None;
        let mut configs = 0;
        for c in &stream.consumers {
            if let Some(config) = &c.config {
                if !previous.is_some_and(|p| Arc::ptr_eq(p, config)) {
                    configs += config_bytes(config);
                }
                previous = Some(config);
            }
        }
        let metadata = stream
            .config
            .as_ref()
            .map_or(0, |c| metadata_bytes(&c.metadata));
        size_of_val::<[LearnedConsumer]>(&stream.consumers) + configs + metadata
    }
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;

    use super::*;
    use crate::sources::jsz::patterns::{parse_pattern, NameFilter};
    use crate::sources::kept::{self, KeptBudget};

    /// One account of `streams` streams of `consumers` consumers, with
    /// their configuration, as a server sends it.
    fn reply(streams: usize, consumers: usize) -> String {
        let stream = |s: usize| {
            let consumers: Vec<String> = (0..consumers)
                .map(|c| {
                    format!(
                        r#"{{"name":"C{c}","created":"2026-01-01T00:00:0{}Z","config":{{"durable_name":"C{c}",
                        "ack_policy":"explicit","max_deliver":{},"filter_subject":"s.{s}"}},
                        "delivered":{{"consumer_seq":{c},"stream_seq":{c}}},"num_pending":{s}}}"#,
                        c % 10,
                        s % 3 + 1
                    )
                })
                .collect();
            format!(
                r#"{{"name":"S{s}","created":"2026-01-01T00:00:00Z","config":{{"max_msgs":{s}}},
                "state":{{"messages":{s},"first_seq":1,"last_seq":{s}}},"consumer_detail":[{}]}}"#,
                consumers.join(",")
            )
        };
        let streams: Vec<String> = (0..streams).map(stream).collect();
        format!(
            r#"{{"now":"2026-01-01T00:00:10Z","total":1,"account_details":[{{"name":"A","id":"A","stream_detail":[{}]}}]}}"#,
            streams.join(",")
        )
    }

    fn in_budget<T>(limit: usize, parse: &dyn Fn() -> T) -> (T, usize) {
        let budget = KeptBudget::new(limit);
        let parsed = kept::scope(&budget, parse);
        (parsed, budget.peak())
    }

    /// What `learned` keeps, comparable.
    fn shown(accounts: Vec<AccountDetail<Option<LearnedStream>>>) -> String {
        format!(
            "{:?}",
            accounts
                .into_iter()
                .map(|a| a.stream_detail)
                .collect::<Vec<_>>()
        )
    }

    #[test]
    fn a_read_learned_stream_by_stream_keeps_a_fraction_of_the_reply_parsed() {
        let body = reply(100, 100);
        let filter = Arc::new(JszFilter::default());
        let pieces = || BufReader::with_capacity(4096, body.as_bytes());
        let (whole, whole_peak) = in_budget(usize::MAX, &|| split::parse(&mut pieces()));
        let whole = whole.unwrap();
        let expected = whole.account_details.into_iter().map(|a| AccountDetail {
            stream_detail: a
                .stream_detail
                .into_iter()
                .map(|s| learned(&filter, s))
                .collect(),
            ..AccountDetail::default()
        });
        let expected = shown(expected.collect());
        let reduced = || Option::<LearnedStream>::parse(&mut pieces(), &filter);
        let (learned, peak) = in_budget(usize::MAX, &reduced);
        assert_eq!(shown(learned.unwrap().account_details), expected);
        // 10,000 consumers: the reply parsed whole holds several times what
        // is learned at its worst moment, and a budget of a fifth of it is
        // enough to learn them.
        assert!(peak * 5 < whole_peak, "{peak} of {whole_peak}");
        let (learned, _) = in_budget(whole_peak / 5, &reduced);
        assert_eq!(shown(learned.unwrap().account_details), expected);
        let (parsed, _) = in_budget(whole_peak / 5, &|| split::parse(&mut pieces()));
        assert!(parsed.is_err(), "the whole reply fits a fifth of its peak");
        // Held whole (a NATS reply), the same.
        let whole_body = || Option::<LearnedStream>::parse_whole(body.as_bytes(), &filter);
        let (learned, _) = in_budget(whole_peak / 5, &whole_body);
        assert_eq!(shown(learned.unwrap().account_details), expected);
    }

    #[test]
    fn what_the_filters_leave_out_is_not_learned() {
        let body = reply(3, 3);
        let only = |names: &[&str]| NameFilter {
            include: names.iter().map(|n| parse_pattern(n).unwrap()).collect(),
            exclude: Vec::new(),
        };
        let filter = JszFilter {
            streams: only(&["S1", "S2"]),
            consumers: only(&["C0"]),
            ..JszFilter::default()
        };
        let jsz = Option::<LearnedStream>::parse_whole(body.as_bytes(), &Arc::new(filter));
        let streams = &jsz.unwrap().account_details[0].stream_detail;
        assert!(streams[0].is_none());
        let kept: Vec<usize> = streams[1..]
            .iter()
            .map(|s| s.as_ref().unwrap().consumers.len())
            .collect();
        assert_eq!(kept, [1, 1]);
    }
}
