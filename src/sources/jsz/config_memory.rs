//! What is kept of one server's streams and consumers between reads of
//! their configuration: per stream and consumer, a hash of its names and
//! its `created`, its configuration (consumers' shared among equal ones,
//! and with the polls' consumers) and the figures of the last poll the
//! removal check compares. About 64 bytes per consumer at 100,000
//! consumers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::mem::size_of;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config_learned::{in_account, local_key, LearnedAccounts};
use super::de::{config_bytes, metadata_bytes};
use super::removal_figures::{ConsumerAt, CountingKind, StreamAt};
use super::{AccountDetail, ConsumerConfig, ConsumerInfo, JszPoll, StreamConfig};
use crate::poll_error::PollError;
use crate::sources::ServerLink;

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

/// What [`Memory::absorb`] does with a stream or consumer the last poll
/// did not have.
#[derive(Debug, Clone, Copy)]
pub(super) enum Unseen {
    /// Left unknown: the next poll that has it reads it again.
    Skipped,
    /// Kept with zero figures: the poll kept next has it.
    Kept,
}

/// The accounts whose configuration a poll lacks ([`Memory::stale_accounts`]).
#[derive(Debug, Default)]
pub(super) struct Stale {
    /// A stream or consumer whose configuration is not known.
    pub(super) unknown: BTreeSet<String>,
    /// A consumer whose removal count could grow.
    pub(super) counting: BTreeSet<String>,
}

impl Stale {
    /// Every account, either way.
    pub(super) fn all(&self) -> BTreeSet<String> {
        self.unknown.union(&self.counting).cloned().collect()
    }
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
    /// Consumers whose configuration a read beside the scrapes found
    /// changed for the removal count: it starts again at their next poll.
    changed: HashSet<u64>,
}

/// `names` begin with the account's.
fn key(names: &[&str], created: u64) -> u64 {
    let (account, names) = names.split_first().expect("an account's name");
    in_account(account, local_key(names, created))
}

impl Memory {
    /// Whether the configuration is due: never read, or `interval` ago.
    pub(super) fn due(&self, interval: Duration) -> bool {
        self.read_at.is_none_or(|at| at.elapsed() >= interval)
    }

    /// Seconds since the last read of every account's configuration began.
    pub(super) fn age(&self) -> Option<f64> {
        self.read_at.map(|at| at.elapsed().as_secs_f64())
    }

    /// Whether a configuration was ever read into it.
    pub(super) fn read_before(&self) -> bool {
        self.read_at.is_some()
    }

    /// Fills in the configuration kept where a poll that could not read it
    /// needs it, and leaves what is kept as it was. A consumer whose
    /// configuration is not known, or whose removal count `check` says
    /// could grow, is marked reconfigured: its count starts again rather
    /// than count what a configuration not read could explain.
    pub(super) fn fill(&self, polled: &mut JszPoll, check: Option<RemovalCheck>) {
        for a in &mut polled.accounts {
            for s in &mut a.stream_detail {
                let kept_stream = self.streams.get(&key(&[&a.name, &s.name], s.created));
                if s.config.is_none() {
                    s.config = kept_stream.and_then(|k| k.config.clone());
                }
                let stream_now = StreamAt::of(&s.state);
                for c in &mut s.consumer_detail {
                    let consumer_key = key(&[&a.name, &s.name, &c.name], c.created);
                    c.reconfigured |= self.changed.contains(&consumer_key);
                    let kept = self.consumers.get(&consumer_key);
                    let (Some(ks), Some(kc), Some(config)) =
                        (kept_stream, kept, kept.and_then(|k| k.config.as_ref()))
                    else {
                        c.reconfigured = true;
                        continue;
                    };
                    if c.config.is_none() {
                        c.config = Some(config.clone());
                    }
                    if let Some(check) = check {
                        let now = (stream_now, ConsumerAt::of(c));
                        c.reconfigured |=
                            check((ks.at, kc.at), now, CountingKind::of(Some(config)));
                    }
                }
            }
        }
    }

    /// The accounts (as the server names them) whose configuration this
    /// poll lacks: `unknown`, where a stream or consumer is not kept, has
    /// none kept, or was made again; `counting`, where a consumer's removal
    /// count `check` says could grow (read before it is counted).
    pub(super) fn stale_accounts(&self, polled: &JszPoll, check: Option<RemovalCheck>) -> Stale {
        let mut stale = Stale::default();
        for a in &polled.accounts {
            let (mut unknown, mut counting) = (false, false);
            for s in &a.stream_detail {
                let kept = self.streams.get(&key(&[&a.name, &s.name], s.created));
                let Some(ks) = kept.filter(|k| k.config.is_some()) else {
                    unknown = true;
                    continue;
                };
                for c in &s.consumer_detail {
                    let kept = self
                        .consumers
                        .get(&key(&[&a.name, &s.name, &c.name], c.created));
                    let Some((kc, config)) = kept.and_then(|k| Some((k, k.config.as_ref()?)))
                    else {
                        unknown = true;
                        continue;
                    };
                    if let Some(check) = check.filter(|_| !counting) {
                        let now = (StreamAt::of(&s.state), ConsumerAt::of(c));
                        counting = check((ks.at, kc.at), now, CountingKind::of(Some(config)));
                    }
                }
            }
            if unknown {
                stale.unknown.insert(own_name(a).clone());
            }
            if counting {
                stale.counting.insert(own_name(a).clone());
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
                    // Not known, or changed since the poll before: no count
                    // across it.
                    c.reconfigured |= c.config.is_none() || old.changed.contains(&consumer_key);
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

    /// Takes in what a read learned (`refreshed`: of every account, begun
    /// then): its configuration replaces the one kept (a consumer's changed
    /// for the removal count starts that count again); the figures kept stay
    /// those of the last poll. A stream or consumer the last poll did not
    /// have is kept only with `Unseen::Kept`, when the poll about to be kept
    /// has it (its figures then replace the zeros it is kept with);
    /// otherwise it stays unknown and the next poll that has it reads it.
    pub(super) fn absorb(
        &mut self,
        learned: LearnedAccounts,
        refreshed: Option<Instant>,
        unseen: Unseen,
    ) {
        let empty = HashSet::new();
        let kept = |exists: bool| exists || matches!(unseen, Unseen::Kept);
        for a in learned {
            for s in a.stream_detail.into_iter().flatten() {
                let k = in_account(&a.name, s.key);
                if kept(self.streams.contains_key(&k)) {
                    let entry = self.streams.entry(k).or_insert(Remembered {
                        config: None,
                        at: StreamAt::default(),
                    });
                    entry.config = s.config.or(entry.config.take());
                }
                for c in s.consumers {
                    let k = in_account(&a.name, c.key);
                    let exists = self.consumers.contains_key(&k);
                    let Some(config) = c.config.filter(|_| kept(exists)) else {
                        continue;
                    };
                    let config = self.shared(&empty, config);
                    let entry = self.consumers.entry(k).or_insert(Remembered {
                        config: None,
                        at: ConsumerAt::default(),
                    });
                    if let Some(was) = &entry.config {
                        let kind = |c: &ConsumerConfig| CountingKind::of(Some(c));
                        if kind(was) != kind(&config) || was.filters() != config.filters() {
                            self.changed.insert(k);
                        }
                    }
                    entry.config = Some(config);
                }
            }
        }
        if let Some(at) = refreshed {
            self.read_at = Some(self.read_at.map_or(at, |was| was.max(at)));
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
        let changed = room(self.changed.capacity(), size_of::<u64>());
        streams + consumers + configs + metadata + changed
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

/// Keeps `polled`'s configuration and figures (`whole`: every account was
/// read with its configuration) in place of what was kept, charged.
pub(super) fn keep(
    memory: &mut Memory,
    link: &ServerLink<'_>,
    mut polled: JszPoll,
    whole: bool,
) -> Result<JszPoll, PollError> {
    polled.config_read |= whole;
    let before = memory.kept_bytes();
    memory.remember(&mut polled, whole);
    link.kept().release(before);
    if !link.kept().charge(memory.kept_bytes()) {
        *memory = Memory::default();
        return Err(PollError::TooMuchKept(link.kept().limit()));
    }
    Ok(polled)
}

#[cfg(test)]
#[path = "config_memory_tests.rs"]
mod tests;
