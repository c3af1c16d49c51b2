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
                    let kept = self
                        .consumers
                        .get(&key(&[&a.name, &s.name, &c.name], c.created));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::jsz::Jsz;

    /// A poll of stream S with consumers `names` (`max_ack_pending` 5 each
    /// when `config`), each at delivered stream sequence `delivered`.
    fn poll(names: &[&str], config: bool, delivered: u64) -> JszPoll {
        let consumers: Vec<String> = names
            .iter()
            .map(|n| {
                let config = if config {
                    r#","config":{"durable_name":"d","max_ack_pending":5}"#
                } else {
                    ""
                };
                format!(r#"{{"name":"{n}","created":"t"{config},"delivered":{{"stream_seq":{delivered}}}}}"#)
            })
            .collect();
        let json = format!(
            r#"{{"account_details":[{{"name":"A","stream_detail":[{{"name":"S","created":"t",
            "state":{{"last_seq":9}},"consumer_detail":[{}]}}]}}]}}"#,
            consumers.join(",")
        );
        let jsz: Jsz = serde_json::from_str(&json).unwrap();
        JszPoll {
            accounts: jsz.account_details,
            ..JszPoll::default()
        }
    }

    fn consumers(polled: &JszPoll) -> Vec<(Option<i64>, bool)> {
        let s = &polled.accounts[0].stream_detail[0];
        let of = |c: &ConsumerInfo| {
            (
                c.config.as_ref().and_then(|k| k.max_ack_pending),
                c.reconfigured,
            )
        };
        s.consumer_detail.iter().map(of).collect()
    }

    /// Any change of the delivered sequence could count a removal.
    fn moved(before: (StreamAt, ConsumerAt), now: (StreamAt, ConsumerAt), _: CountingKind) -> bool {
        before.1.delivered != now.1.delivered
    }

    #[test]
    fn a_poll_without_configuration_is_filled_and_what_is_kept_stays() {
        let mut memory = Memory::default();
        memory.remember(&mut poll(&["a", "b"], true, 1), true);
        let kept = memory.kept_bytes();
        // "a" known, "c" new: the new one has no configuration and starts
        // its count again.
        let mut later = poll(&["a", "c"], false, 1);
        memory.fill(&mut later, Some(moved));
        assert_eq!(consumers(&later), [(Some(5), false), (None, true)]);
        // "a" moved since the read: its count could grow, so it starts
        // again; the figures kept stay those of the read.
        let mut moved_on = poll(&["a"], false, 2);
        memory.fill(&mut moved_on, Some(moved));
        assert_eq!(consumers(&moved_on), [(Some(5), true)]);
        let mut again = poll(&["a"], false, 2);
        memory.fill(&mut again, Some(moved));
        assert_eq!(consumers(&again), [(Some(5), true)]);
        assert_eq!(memory.kept_bytes(), kept);
        assert!(memory.read_before());
        assert!(!Memory::default().read_before());
    }
}
