//! Timestamps of stored JetStream messages, read over NATS: the exact time
//! behind a consumer's oldest unacknowledged message and its first
//! undelivered one, where `/jsz` gives only sequences.
//!
//! [`MessageTimestamps::read`] answers from a bounded cache first, then reads
//! at most a budget of the rest over the exporter's NATS connection, a few at
//! a time, all within a deadline. The time is the server's own stored time
//! stamp, never the exporter's clock. Only streams in the connection's own
//! account can be read (the JetStream API is per account): requests for
//! other accounts are answered with nothing and no request is sent.

/// One position to read: the first message at or after `from_seq` in
/// `stream` of `account` whose subject matches one of `filters` (any subject
/// when `filters` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimestampRequest {
    /// The stream's account.
    pub account: String,
    /// The stream to read from.
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

mod cache;
pub(crate) mod fetch;
mod read_result;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::Client;
use futures::StreamExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::lock::LockOrRecover;
use crate::nats::{self, ConnectionError, NatsArgs};
use cache::Cache;
use fetch::{ReadError, Stored, Via};
pub use read_result::ReadResult;

/// Answers kept in the cache of a reader made by [`connect`].
pub(crate) const DEFAULT_CACHE_ENTRIES: usize = 10_000;

/// Reads in flight at once: enough to hide round trips, few enough not to
/// queue hundreds of megabyte-sized messages at the server at once.
pub(crate) const MAX_IN_FLIGHT: usize = 8;

/// Reads message timestamps over one NATS connection; cheap to clone (the
/// clones share the cache and the counts).
#[derive(Clone)]
pub struct MessageTimestamps {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The server's name for the connection's account; learnt after
    /// connecting by [`connect`], so it may change once.
    account: Mutex<String>,
    cache: Mutex<Cache>,
    /// Streams that answered no direct get (no `allow_direct`): read
    /// through `$JS.API.STREAM.MSG.GET` without trying the direct get first.
    no_direct: Mutex<HashSet<String>>,
    results: [AtomicU64; ReadResult::ALL.len()],
    requests: [AtomicU64; 2],
}

impl fmt::Debug for MessageTimestamps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageTimestamps")
            .field("account", &self.account())
            .finish_non_exhaustive()
    }
}

impl MessageTimestamps {
    /// A reader over `client`, whose streams live in `account` (the server's
    /// name for the connection's account, as `/jsz` names it), keeping at
    /// most `cache_entries` answers.
    pub fn new(client: Client, account: impl Into<String>, cache_entries: usize) -> Self {
        MessageTimestamps {
            inner: Arc::new(Inner {
                client,
                account: Mutex::new(account.into()),
                cache: Mutex::new(Cache::new(cache_entries)),
                no_direct: Mutex::new(HashSet::new()),
                results: Default::default(),
                requests: Default::default(),
            }),
        }
    }

    /// The connection, for other reads in the same account.
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The account whose streams this reader can read.
    pub fn account(&self) -> String {
        lock(&self.inner.account).clone()
    }

    /// Answers `requests`: cached answers first (no request, no budget), then
    /// reads up to `budget` uncached ones, in the order given, at most
    /// `MAX_IN_FLIGHT` at a time, all ending within `deadline`. A request
    /// not answered (over budget, other account, deadline, error) is absent
    /// from the map; each is counted under its [`ReadResult`].
    pub async fn read(
        &self,
        requests: &[TimestampRequest],
        budget: usize,
        deadline: Duration,
    ) -> HashMap<TimestampRequest, TimestampReply> {
        let end = tokio::time::Instant::now() + deadline;
        let mut answers = HashMap::new();
        let mut to_read = Vec::new();
        let mut seen = HashSet::new();
        let account = self.account();
        {
            let cache = lock(&self.inner.cache);
            for r in requests {
                if !seen.insert(r) {
                    continue;
                }
                if r.account != account {
                    self.count(ReadResult::OtherAccount);
                } else if let Some(s) = cache.get(r) {
                    self.count(ReadResult::Cached);
                    answers.insert(r.clone(), found(s));
                } else if to_read.len() < budget {
                    to_read.push(r.clone());
                } else {
                    self.count(ReadResult::OverBudget);
                }
            }
        }
        let mut unfinished = to_read.len();
        let mut reads = futures::stream::iter(to_read)
            // Owned requests: a future borrowing its argument would not be
            // `Send` for every lifetime, which a spawned poll needs.
            .map(|r| async move {
                let outcome = self.read_one(&r, end).await;
                (r, outcome)
            })
            .buffer_unordered(MAX_IN_FLIGHT);
        let sleep = tokio::time::sleep_until(end);
        tokio::pin!(sleep);
        loop {
            let (request, outcome) = tokio::select! {
                next = reads.next() => match next {
                    Some(done) => done,
                    None => break,
                },
                _ = &mut sleep => break,
            };
            unfinished -= 1;
            match outcome {
                Ok(Some(s)) => {
                    self.count(ReadResult::Read);
                    lock(&self.inner.cache).insert(request.clone(), s);
                    answers.insert(request, found(s));
                }
                Ok(None) => {
                    self.count(ReadResult::NoMessage);
                    answers.insert(request, TimestampReply::NoMessage);
                }
                Err(e) => {
                    tracing::debug!(stream = %request.stream, from_seq = request.from_seq, error = %e, "message timestamp not read");
                    self.count(ReadResult::from(&e));
                }
            }
        }
        // Reads still in flight or not started when the deadline passed.
        self.inner.results[ReadResult::Timeout as usize]
            .fetch_add(unfinished as u64, Ordering::Relaxed);
        answers
    }

    /// Forgets cached answers in `stream` of `account` whose message lies
    /// below `first_seq`, the stream's first sequence now (from `/jsz`):
    /// those messages were removed, so the answer is a later message now.
    pub fn forget_below(&self, account: &str, stream: &str, first_seq: u64) {
        lock(&self.inner.cache).forget_below(account, stream, first_seq);
    }

    /// How many requests ended with `result` since the reader was made.
    pub fn count_of(&self, result: ReadResult) -> u64 {
        self.inner.results[result as usize].load(Ordering::Relaxed)
    }

    /// NATS requests sent so far through the direct get and through
    /// `$JS.API.STREAM.MSG.GET`.
    pub fn requests_sent(&self) -> (u64, u64) {
        let r = &self.inner.requests;
        (r[0].load(Ordering::Relaxed), r[1].load(Ordering::Relaxed))
    }

    /// Writes the reader's families (see METRICS.md, "Message timestamp reads").
    pub(crate) fn encode(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        crate::text::families::counter_family(
            enc,
            "nats_delivery_message_timestamp_reads",
            "Message timestamps asked for, by result: read, answered from the cache, or why not.",
            ReadResult::ALL
                .iter()
                .map(|r| ([("result", r.label())], self.count_of(*r))),
        )?;
        let (direct, api) = self.requests_sent();
        crate::text::families::counter_family(
            enc,
            "nats_delivery_message_timestamp_requests",
            "NATS requests sent to read message timestamps, by method (direct get or stream message get).",
            [([("method", "direct_get")], direct), ([("method", "msg_get")], api)],
        )?;
        crate::text::families::gauge_family(
            enc,
            "nats_delivery_message_timestamp_cache_entries",
            "Message timestamps held in the cache.",
            [(NO_LABELS, lock(&self.inner.cache).entries() as i64)],
        )
    }

    fn count(&self, result: ReadResult) {
        self.inner.results[result as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every filter of `r` and keeps the lowest sequence found: the
    /// server reads one subject (wildcards allowed) per request.
    async fn read_one(
        &self,
        r: &TimestampRequest,
        end: tokio::time::Instant,
    ) -> Result<Option<Stored>, ReadError> {
        let all = [">".to_string()];
        let filters = if r.filters.is_empty() {
            &all[..]
        } else {
            &r.filters[..]
        };
        let reads = filters
            .iter()
            .map(|f| self.read_filter(&r.stream, r.from_seq, f, end));
        let mut lowest: Option<Stored> = None;
        for found in futures::future::join_all(reads).await {
            if let Some(s) = found? {
                if lowest.is_none_or(|l| s.seq < l.seq) {
                    lowest = Some(s);
                }
            }
        }
        Ok(lowest)
    }

    /// One filter: the direct get first, unless the stream is known to have
    /// none or the server is older than 2.10; on no responders, the stream
    /// message get.
    async fn read_filter(
        &self,
        stream: &str,
        from_seq: u64,
        filter: &str,
        end: tokio::time::Instant,
    ) -> Result<Option<Stored>, ReadError> {
        let client = &self.inner.client;
        let left = || end.saturating_duration_since(tokio::time::Instant::now());
        let direct = fetch::is_2_10_or_later(&client.server_info().version)
            && !lock(&self.inner.no_direct).contains(stream);
        if direct {
            self.inner.requests[0].fetch_add(1, Ordering::Relaxed);
            match fetch::read_next(client, Via::Direct, stream, from_seq, filter, left()).await {
                Err(ReadError::NoResponders) => {
                    let mut no_direct = lock(&self.inner.no_direct);
                    // Bounded like the cache: a stream list this long is
                    // rebuilt rather than grown.
                    if no_direct.len() >= DEFAULT_CACHE_ENTRIES {
                        no_direct.clear();
                    }
                    no_direct.insert(stream.to_string());
                }
                other => return other,
            }
        }
        self.inner.requests[1].fetch_add(1, Ordering::Relaxed);
        fetch::read_next(client, Via::Api, stream, from_seq, filter, left()).await
    }
}

/// Connects for timestamp reads with the credentials of the first account
/// the flags name (the top-level ones when no `--nats-account` is given).
/// The reader starts with the account's label and, in the background, asks
/// the server which account the connection is in (`$SYS.REQ.USER.INFO`,
/// 2.10+) until it answers; servers before 2.10 cannot say, and the label
/// stays. Returns at once; the client keeps reconnecting in the background.
pub async fn connect(args: &NatsArgs) -> Result<MessageTimestamps, ConnectionError> {
    let (label, auth) = args
        .resolved_accounts()?
        .into_iter()
        .next()
        .ok_or_else(|| ConnectionError::Config("no NATS account to read timestamps in".into()))?;
    let client = nats::connect(args, &auth, "timestamps", 1024).await?;
    let reader = MessageTimestamps::new(client, label, DEFAULT_CACHE_ENTRIES);
    tokio::spawn(learn_account(Arc::downgrade(&reader.inner)));
    Ok(reader)
}

/// Asks the server for the reader's account name until it answers, the
/// connection is up and it still does not, or the reader is gone. Reads meanwhile
/// go by the label; a wrong label only leaves the account's streams unread
/// (counted as other_account) until the server has answered.
async fn learn_account(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(client) = inner.upgrade().map(|i| i.client.clone()) else {
            return;
        };
        if let Some(name) = nats::server_account_name(&client).await {
            if let Some(strong) = inner.upgrade() {
                *lock(&strong.account) = name;
            }
            return;
        }
        // Connected and still no name: the server cannot say (before 2.10)
        // or the user may not ask; the label stays.
        if client.connection_state() == async_nats::connection::State::Connected {
            return;
        }
        drop(client);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

impl Collector for MessageTimestamps {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        MessageTimestamps::encode(self, &mut enc)
    }
}

const NO_LABELS: [(&str, &str); 0] = [];

fn found(s: Stored) -> TimestampReply {
    TimestampReply::Found {
        seq: s.seq,
        unix_seconds: s.unix_seconds,
    }
}

/// A poisoned lock only means a panic elsewhere; the data stays usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock_or_recover()
}
