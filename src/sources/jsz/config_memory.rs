//! What is kept of one server's streams and consumers between reads of
//! their configuration: per stream and consumer, a hash of its names and
//! its `created`, its configuration (consumers' shared among equal ones,
//! and with the polls' consumers) and the figures of the last poll the
//! removal check compares. About 64 bytes per consumer at 100,000
//! consumers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::mem::size_of;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::de::{config_bytes, metadata_bytes};
use super::removal_figures::{ConsumerAt, CountingKind, StreamAt};
use super::{AccountDetail, ConsumerConfig, ConsumerInfo, JszPoll, StreamConfig};

/// Whether a consumer's removal count could grow between two polls, each
/// its stream's figures and its own, given what its configuration says
/// (`jetstream::removed_before_delivery::could_count`).
pub type RemovalCheck =
    fn(before: (StreamAt, ConsumerAt), now: (StreamAt, ConsumerAt), kind: CountingKind) -> bool;

/// A stream's or consumer's configuration as last read (`None`: never
/// read), with its figures at the last poll (`A`).
#[derive(Debug)]
struct Remembered<C, A> {
    config: Option<C>,
    at: A,
}

/// By a hash of (account, stream) and of (account, stream, consumer), each
/// with its `created`: one made again under its name is another entry, and
/// two would have to agree on all of that to be mistaken.
#[derive(Debug, Default)]
pub(super) struct Memory {
    read_at: Option<Instant>,
    streams: HashMap<u64, Remembered<StreamConfig, StreamAt>>,
    consumers: HashMap<u64, Remembered<Arc<ConsumerConfig>, ConsumerAt>>,
    /// Every distinct consumer configuration kept, once.
    configs: HashSet<Arc<ConsumerConfig>>,
}

fn key(names: &[&str], created: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    names.hash(&mut h);
    created.hash(&mut h);
    h.finish()
}

impl Memory {
    /// Whether the configuration is due: never read, or `interval` ago.
    pub(super) fn due(&self, interval: Duration) -> bool {
        self.read_at.is_none_or(|at| at.elapsed() >= interval)
    }

    /// The accounts (as the server names them) whose configuration this
    /// poll must read: a stream or consumer not kept or made again, or a
    /// consumer whose removal count `check` says could grow.
    pub(super) fn stale_accounts(
        &self,
        polled: &JszPoll,
        check: Option<RemovalCheck>,
    ) -> BTreeSet<String> {
        let mut stale = BTreeSet::new();
        for a in &polled.accounts {
            let needs = a.stream_detail.iter().any(|s| {
                let Some(ks) = self.streams.get(&key(&[&a.name, &s.name], s.created)) else {
                    return true;
                };
                s.consumer_detail.iter().any(|c| {
                    let kept = self
                        .consumers
                        .get(&key(&[&a.name, &s.name, &c.name], c.created));
                    let Some(kc) = kept else {
                        return true;
                    };
                    let (Some(check), Some(config)) = (check, &kc.config) else {
                        return false;
                    };
                    let now = (StreamAt::of(&s.state), ConsumerAt::of(c));
                    check((ks.at, kc.at), now, CountingKind::of(Some(config)))
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
    /// where the poll did not ask. The poll's consumers then hold the
    /// configurations kept ([`Memory::kept_bytes`] counts them).
    pub(super) fn remember(&mut self, polled: &mut JszPoll, whole: bool) {
        let mut old = std::mem::take(self);
        self.read_at = if whole {
            Some(Instant::now())
        } else {
            old.read_at
        };
        let streams = polled.accounts.iter().flat_map(|a| &a.stream_detail);
        let consumers = streams.clone().map(|s| s.consumer_detail.len()).sum();
        self.streams.reserve(streams.count());
        self.consumers.reserve(consumers);
        for a in &mut polled.accounts {
            for s in &mut a.stream_detail {
                let stream_key = key(&[&a.name, &s.name], s.created);
                let before = old.streams.remove(&stream_key);
                if s.config.is_none() {
                    s.config = before.and_then(|k| k.config);
                }
                for c in &mut s.consumer_detail {
                    let consumer_key = key(&[&a.name, &s.name, &c.name], c.created);
                    let before = old.consumers.remove(&consumer_key);
                    fill_consumer(c, before.and_then(|k| k.config));
                    c.config = c.config.take().map(|k| self.shared(&old.configs, k));
                    let kept = Remembered {
                        config: c.config.clone(),
                        at: ConsumerAt::of(c),
                    };
                    self.consumers.insert(consumer_key, kept);
                }
                let kept = Remembered {
                    config: s.config.clone(),
                    at: StreamAt::of(&s.state),
                };
                self.streams.insert(stream_key, kept);
            }
        }
    }

    /// `config`, or an equal one kept (from this poll, or the last one's
    /// `before`), which it is then let go for.
    fn shared(
        &mut self,
        before: &HashSet<Arc<ConsumerConfig>>,
        config: Arc<ConsumerConfig>,
    ) -> Arc<ConsumerConfig> {
        if let Some(k) = self.configs.get(&config) {
            return k.clone();
        }
        let k = before.get(&config).cloned().unwrap_or(config);
        self.configs.insert(k.clone());
        k
    }

    /// What is kept, as the allocator holds it: the tables' rooms (with the
    /// control byte of each and the room they keep free) and each distinct
    /// configuration.
    pub(super) fn kept_bytes(&self) -> usize {
        let room = |entries: usize, size: usize| (entries * 8).div_ceil(7) * (size + 1);
        let streams = room(
            self.streams.capacity(),
            size_of::<(u64, Remembered<StreamConfig, StreamAt>)>(),
        );
        let consumers = room(
            self.consumers.capacity(),
            size_of::<(u64, Remembered<Arc<ConsumerConfig>, ConsumerAt>)>(),
        );
        let configs: usize = self.configs.iter().map(|k| 9 + config_bytes(k)).sum();
        let metadata: usize = (self.streams.values())
            .filter_map(|s| s.config.as_ref())
            .map(|c| metadata_bytes(&c.metadata))
            .sum();
        streams + consumers + configs + metadata
    }
}

/// Fills `c`'s configuration from `kept` when the poll did not read it, or
/// marks it reconfigured when the read one differs for the removal count.
fn fill_consumer(c: &mut ConsumerInfo, kept: Option<Arc<ConsumerConfig>>) {
    match (&c.config, kept) {
        (None, kept) => c.config = kept,
        (Some(now), Some(kept)) => {
            let kind = |c: &ConsumerConfig| CountingKind::of(Some(c));
            c.reconfigured = kind(now) != kind(&kept) || now.filters() != kept.filters();
        }
        (Some(_), None) => {}
    }
}

/// The name the server knows an account by (its public key in operator mode).
pub(super) fn own_name(a: &AccountDetail) -> &String {
    if a.id.is_empty() {
        &a.name
    } else {
        &a.id
    }
}
