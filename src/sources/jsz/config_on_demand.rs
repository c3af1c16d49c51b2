//! The streams' and consumers' configuration read on demand: half of a
//! `/jsz` reply and of the server's work for it, and it seldom changes.
//!
//! The configuration is asked for (`config=true`) on the first poll, at
//! least every `--jsz-config-interval`, and at once for an account where a
//! stream or consumer is new or made again (its `created` changed), or
//! where a consumer's removal count could grow: a filter added since the
//! last read would otherwise pass for removed messages. Between reads each
//! stream's and consumer's configuration is kept, charged to the poll's
//! `--max-kept-size` budget, and filled into the polls that did not ask.

use std::collections::{BTreeSet, HashMap};
use std::mem::size_of;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::de::{string_bytes, Kept};
use super::{AccountDetail, ConsumerConfig, JszFilter, JszPoll, StreamConfig};
use crate::poll_error::PollError;
use crate::sources::ServerLink;

/// Whether a consumer's removal count could grow between two polls (see
/// `jetstream::removed_before_delivery::could_count`: the stream's
/// `first_seq`, `last_seq`, `messages`, `num_deleted`, the consumer's
/// `delivered.stream_seq`, `delivered.consumer_seq`, `num_pending`,
/// `num_redelivered`), given whether it is filtered and never redelivers.
pub type RemovalCheck = fn(before: [u64; 8], now: [u64; 8], filtered: bool, once: bool) -> bool;

/// Accounts read again one by one (`acc=`); more are read again whole.
const ACCOUNTS_READ_ALONE: usize = 4;

/// How one server's `/jsz` configuration is read: the settings and what
/// is kept between reads.
#[derive(Debug, Default)]
pub struct ConfigOnDemand {
    /// Longest time between two reads; zero reads on every poll.
    pub interval: Duration,
    /// The removal count's check; `None` never reads for it.
    pub check: Option<RemovalCheck>,
    memory: Mutex<Memory>,
}

/// A stream's or consumer's configuration as last read, and its figures at
/// the last poll.
#[derive(Debug)]
struct Remembered<C> {
    created: u64,
    config: Option<C>,
    at: [u64; 4],
}

/// A stream as remembered, with its consumers.
#[derive(Debug)]
struct StreamMemory {
    stream: Remembered<StreamConfig>,
    consumers: HashMap<Box<str>, Remembered<ConsumerConfig>>,
}

/// By account name, then stream name.
#[derive(Debug, Default)]
struct Memory {
    read_at: Option<Instant>,
    accounts: HashMap<String, HashMap<String, StreamMemory>>,
}

impl ConfigOnDemand {
    /// Reads configuration every `interval`, and before a removal `check`
    /// says could be counted.
    pub fn new(interval: Duration, check: Option<RemovalCheck>) -> ConfigOnDemand {
        ConfigOnDemand {
            interval,
            check,
            memory: Mutex::default(),
        }
    }

    /// One poll of every page, asking for the configuration only where it
    /// is due; every stream and consumer has its configuration all the same.
    pub async fn poll(
        &self,
        link: &ServerLink<'_>,
        page_size: u32,
        filter: &JszFilter,
    ) -> Result<JszPoll, PollError> {
        let lock = || self.memory.lock().expect("jsz configuration lock");
        // Taken out for the poll; a failed poll leaves it as it was.
        let mut memory = std::mem::take(&mut *lock());
        let polled = self.poll_with(&mut memory, link, page_size, filter).await;
        *lock() = memory;
        polled
    }

    async fn poll_with(
        &self,
        memory: &mut Memory,
        link: &ServerLink<'_>,
        page_size: u32,
        filter: &JszFilter,
    ) -> Result<JszPoll, PollError> {
        let due = memory
            .read_at
            .is_none_or(|at| at.elapsed() >= self.interval);
        let mut polled = super::poll(link, page_size, filter, due).await?;
        let mut whole = due;
        if !due {
            let stale = memory.stale_accounts(&polled, self.check);
            if stale.len() > ACCOUNTS_READ_ALONE {
                release(link, &polled.accounts);
                polled = super::poll(link, page_size, filter, true).await?;
                whole = true;
            } else if !stale.is_empty() {
                read_again(link, page_size, filter, &mut polled, &stale).await?;
            }
            polled.config_read = !stale.is_empty();
        } else {
            polled.config_read = true;
        }
        let filled = memory.remember(&mut polled, whole);
        if !link.kept().charge(filled + memory.kept_bytes()) {
            *memory = Memory::default();
            return Err(PollError::TooMuchKept(link.kept().limit()));
        }
        Ok(polled)
    }
}

/// Gives back what `accounts` charged, as they are let go.
fn release(link: &ServerLink<'_>, accounts: &[AccountDetail]) {
    link.kept()
        .release(accounts.iter().map(Kept::kept_bytes).sum());
}

/// Reads the accounts `stale` (by the name the server knows them by) again
/// with their configuration, in place of theirs in `polled`.
async fn read_again(
    link: &ServerLink<'_>,
    page_size: u32,
    filter: &JszFilter,
    polled: &mut JszPoll,
    stale: &BTreeSet<String>,
) -> Result<(), PollError> {
    for account in stale {
        let fresh = super::poll_account(link, page_size, filter, account).await?;
        let old: Vec<_> = polled
            .accounts
            .iter()
            .filter(|a| own_name(a) == account)
            .map(|a| a.name.clone())
            .collect();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut polled.accounts)
            .into_iter()
            .partition(|a| old.contains(&a.name));
        release(link, &gone);
        polled.accounts = kept;
        polled.accounts.extend(fresh.accounts);
    }
    Ok(())
}

/// The name the server knows an account by (its public key in operator mode).
fn own_name(a: &AccountDetail) -> &String {
    if a.id.is_empty() {
        &a.name
    } else {
        &a.id
    }
}

/// A stream's figures the removal count reads.
fn stream_at(s: &super::StreamDetail) -> [u64; 4] {
    let st = &s.state;
    [st.first_seq, st.last_seq, st.messages, st.num_deleted]
}

/// A consumer's figures the removal count reads.
fn consumer_at(c: &super::ConsumerInfo) -> [u64; 4] {
    let d = &c.delivered;
    [
        d.stream_seq,
        d.consumer_seq,
        c.num_pending,
        c.num_redelivered,
    ]
}

/// Whether a consumer is filtered, and whether it never redelivers, as the
/// removal count reads its configuration.
fn counting_kind(c: &ConsumerConfig) -> (bool, bool) {
    let filtered = !c.filter_subject.is_empty() || !c.filter_subjects.is_empty();
    (filtered, c.acks_none || c.max_deliver == Some(1))
}

fn joined(stream: [u64; 4], consumer: [u64; 4]) -> [u64; 8] {
    let mut all = [0; 8];
    all[..4].copy_from_slice(&stream);
    all[4..].copy_from_slice(&consumer);
    all
}

impl Memory {
    /// The accounts (as the server names them) whose configuration this
    /// poll must read: a stream or consumer not kept or made again, or a
    /// consumer whose removal count `check` says could grow.
    fn stale_accounts(&self, polled: &JszPoll, check: Option<RemovalCheck>) -> BTreeSet<String> {
        let mut stale = BTreeSet::new();
        for a in &polled.accounts {
            let streams = self.accounts.get(&a.name);
            let needs = a.stream_detail.iter().any(|s| {
                let kept = streams.and_then(|k| k.get(&s.name));
                let Some(ks) = kept.filter(|k| k.stream.created == s.created) else {
                    return true;
                };
                s.consumer_detail.iter().any(|c| {
                    let kept = ks.consumers.get(&c.name);
                    let Some(kc) = kept.filter(|k| k.created == c.created) else {
                        return true;
                    };
                    let (Some(check), Some(config)) = (check, &kc.config) else {
                        return false;
                    };
                    let (filtered, once) = counting_kind(config);
                    let before = joined(ks.stream.at, kc.at);
                    check(before, joined(stream_at(s), consumer_at(c)), filtered, once)
                })
            });
            if needs {
                stale.insert(own_name(a).clone());
            }
        }
        stale
    }

    /// Keeps this poll's configuration and figures (`whole`: every account
    /// was read with its configuration), and fills in the configuration kept
    /// where the poll did not ask. Returns what the filled-in values keep.
    fn remember(&mut self, polled: &mut JszPoll, whole: bool) -> usize {
        let mut old = std::mem::take(self);
        self.read_at = if whole {
            Some(Instant::now())
        } else {
            old.read_at
        };
        let mut filled = 0;
        for a in &mut polled.accounts {
            let mut old_streams = old.accounts.remove(&a.name).unwrap_or_default();
            let streams = self.accounts.entry(a.name.clone()).or_default();
            for s in &mut a.stream_detail {
                let before = old_streams
                    .remove(&s.name)
                    .filter(|k| k.stream.created == s.created);
                let (kept_stream, mut kept_consumers) = match before {
                    Some(k) => (k.stream.config, k.consumers),
                    None => (None, HashMap::new()),
                };
                if s.config.is_none() {
                    s.config = kept_stream;
                }
                let mut consumers = HashMap::with_capacity(s.consumer_detail.len());
                for c in &mut s.consumer_detail {
                    let before = kept_consumers
                        .remove(&c.name)
                        .filter(|k| k.created == c.created);
                    filled += fill_consumer(c, before.and_then(|k| k.config));
                    let kept = Remembered {
                        created: c.created,
                        config: c.config.clone(),
                        at: consumer_at(c),
                    };
                    consumers.insert(c.name.clone(), kept);
                }
                let stream = Remembered {
                    created: s.created,
                    config: s.config.clone(),
                    at: stream_at(s),
                };
                streams.insert(s.name.clone(), StreamMemory { stream, consumers });
            }
        }
        filled
    }

    /// What is kept, as the allocator holds it: the tables' rooms (with the
    /// control byte of each and the room they keep free) and the strings.
    fn kept_bytes(&self) -> usize {
        let room = |entries: usize, size: usize| (entries * 8).div_ceil(7) * (size + 1);
        let mut bytes = room(
            self.accounts.capacity(),
            size_of::<(String, HashMap<String, StreamMemory>)>(),
        );
        for (account, streams) in &self.accounts {
            bytes += string_bytes(account.len());
            bytes += room(streams.capacity(), size_of::<(String, StreamMemory)>());
            for (name, s) in streams {
                bytes += string_bytes(name.len());
                let entry = size_of::<(Box<str>, Remembered<ConsumerConfig>)>();
                bytes += room(s.consumers.capacity(), entry);
                for (name, c) in &s.consumers {
                    bytes += string_bytes(name.len()) + c.config.as_ref().map_or(0, config_heap);
                }
            }
        }
        bytes
    }
}

/// Fills `c`'s configuration from `kept` when the poll did not read it, or
/// marks it reconfigured when the read one differs for the removal count.
/// Returns what a filled-in configuration keeps.
fn fill_consumer(c: &mut super::ConsumerInfo, kept: Option<ConsumerConfig>) -> usize {
    match (&c.config, kept) {
        (None, kept) => {
            c.config = kept;
            c.config.as_ref().map_or(0, config_heap)
        }
        (Some(now), Some(kept)) => {
            c.reconfigured =
                counting_kind(now) != counting_kind(&kept) || now.filters() != kept.filters();
            0
        }
        (Some(_), None) => 0,
    }
}

/// What a consumer's configuration holds besides its own size.
fn config_heap(c: &ConsumerConfig) -> usize {
    let filters: usize = c.filter_subjects.iter().map(Kept::kept_bytes).sum();
    string_bytes(c.filter_subject.len()) + filters
}
