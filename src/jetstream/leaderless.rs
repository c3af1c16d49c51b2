//! Streams and consumers whose group no polled server leads keep their
//! series: the last values a leader gave, marked, until a leader is back
//! or [`HOLD`] passes.
//!
//! A group loses its leader when a quorum of its servers is lost, and for a
//! moment at every election; the servers still listing it then give only a
//! follower's figures (`num_pending` 0), never the group's state
//! (`sources/jsz/view.rs`). Dropping the series would resolve every alert
//! on the consumer at the moment its group stopped. So the last figures a
//! leader gave are kept per replicated stream and consumer (about 130
//! bytes each, plus names) and written again, with
//! `nats_delivery_stream_leaderless_seconds` /
//! `nats_delivery_consumer_leaderless_seconds` saying how long ago a
//! leader gave them.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use prometheus_client::encoding::DescriptorEncoder;

use crate::sources::jsz::{ConsumerInfo, ConsumerRow, HeldRows, OrphanConsumer, SequenceInfo};
use crate::sources::jsz::{StreamContents, StreamDetail, StreamRow};
use crate::text::families::gauge_family;

/// How long a group without a leader keeps its last leader's values: long
/// enough for an election on a loaded cluster, short enough that a stream
/// or consumer deleted while its group had no leader does not linger.
pub(crate) const HOLD: f64 = 120.0;

/// A consumer's figures as a leader last gave them.
#[derive(Debug, Clone, Copy)]
struct ConsumerFigures {
    delivered: SequenceInfo,
    ack_floor: SequenceInfo,
    ack_pending: u64,
    redelivered: u64,
    waiting: u64,
    pending: u64,
    /// The leader's clock then, for the ages written from them.
    server_now: Option<f64>,
}

/// When a leader last gave a group's figures (exporter clock), and them.
#[derive(Debug, Clone)]
struct Led<T> {
    at: f64,
    figures: T,
}

/// One stream's last led figures and its consumers'.
#[derive(Debug, Default)]
struct StreamLed {
    stream: Option<Led<StreamContents>>,
    consumers: HashMap<Box<str>, Led<ConsumerFigures>>,
}

/// The last figures a leader gave, of every replicated stream and consumer
/// led within [`HOLD`].
#[derive(Debug, Default)]
pub(crate) struct LastLed {
    accounts: HashMap<Box<str>, HashMap<Box<str>, StreamLed>>,
}

/// Streams and consumers written from held figures, owned by the snapshot:
/// each with the seconds since a leader gave them.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// (account, stream, seconds without a leader).
    pub(crate) streams: Vec<(String, StreamDetail, f64)>,
    /// (account, stream, consumer, the leader's clock then, seconds).
    pub(crate) consumers: Vec<(String, String, ConsumerInfo, Option<f64>, f64)>,
}

impl Held {
    /// The held rows, for [`crate::sources::jsz::Leaders::rows`].
    pub(crate) fn rows(&self) -> HeldRows<'_> {
        let streams = (self.streams.iter())
            .map(|(a, s, _)| (a.as_str(), s))
            .collect();
        let consumers = (self.consumers.iter())
            .map(|(a, s, c, now, _)| (a.as_str(), s.as_str(), c, *now))
            .collect();
        (streams, consumers)
    }

    /// How many series [`Held::encode`] writes.
    pub(crate) fn series(&self) -> u64 {
        (self.streams.len() + self.consumers.len()) as u64
    }

    /// Writes the marks: how long each held stream and consumer has been
    /// without a leader's figures.
    pub(crate) fn encode(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        gauge_family(
            enc,
            STREAM_MARK.0,
            STREAM_MARK.1,
            (self.streams.iter())
                .map(|(a, s, t)| ([("account", a.as_str()), ("stream", s.name.as_str())], *t)),
        )?;
        gauge_family(
            enc,
            CONSUMER_MARK.0,
            CONSUMER_MARK.1,
            self.consumers.iter().map(|(a, s, c, _, t)| {
                let labels = [
                    ("account", a.as_str()),
                    ("stream", s.as_str()),
                    ("consumer", &*c.name),
                ];
                (labels, *t)
            }),
        )
    }
}

const STREAM_MARK: (&str, &str) = (
    "nats_delivery_stream_leaderless_seconds",
    "Seconds since a leader of the stream last gave its figures; written only while no polled server leads it, when the stream's series hold those figures (at most 120 s).",
);

const CONSUMER_MARK: (&str, &str) = (
    "nats_delivery_consumer_leaderless_seconds",
    "Seconds since a leader of the consumer last gave its figures; written only while no polled server leads it, when the consumer's series hold those figures (at most 120 s).",
);

/// `map[key]`, made (default) if missing; the key is copied only then.
fn slot<'m, K, V>(map: &'m mut HashMap<K, V>, key: &str) -> &'m mut V
where
    K: Borrow<str> + for<'k> From<&'k str> + Hash + Eq,
    V: Default,
{
    if !map.contains_key(key) {
        map.insert(key.into(), V::default());
    }
    map.get_mut(key).expect("just inserted")
}

impl LastLed {
    /// Records the rows a leader gave at exporter time `now` (replicated
    /// groups only), then returns the held rows of `orphans` (groups
    /// listed, with no view that counts) whose leader gave figures within
    /// [`HOLD`], and forgets what is older.
    pub(crate) fn update<'a>(
        &mut self,
        (streams, consumers): (
            impl Iterator<Item = StreamRow<'a>>,
            impl Iterator<Item = ConsumerRow<'a>>,
        ),
        orphans: (&[StreamRow], &[OrphanConsumer]),
        now: f64,
    ) -> Held {
        for (account, s) in streams.filter(|(_, s)| s.cluster.is_some()) {
            let st = slot(slot(&mut self.accounts, account), &s.name);
            st.stream = Some(Led {
                at: now,
                figures: s.state.clone(),
            });
        }
        for (account, stream, c, server_now) in consumers {
            if c.cluster.is_none() {
                continue;
            }
            let st = slot(slot(&mut self.accounts, account), stream);
            let figures = ConsumerFigures {
                delivered: c.delivered,
                ack_floor: c.ack_floor,
                ack_pending: c.num_ack_pending,
                redelivered: c.num_redelivered,
                waiting: c.num_waiting,
                pending: c.num_pending,
                server_now,
            };
            st.consumers
                .insert(c.name.clone(), Led { at: now, figures });
        }
        self.forget(now - HOLD);
        let held_stream = |&(account, s): &StreamRow| {
            let led = self.accounts.get(account)?.get(&*s.name)?.stream.as_ref()?;
            let mut detail = StreamDetail {
                name: s.name.clone(),
                created: s.created,
                config: s.config.clone(),
                state: led.figures.clone(),
                ..StreamDetail::default()
            };
            detail.state.consumer_count = s.state.consumer_count;
            Some((account.to_string(), detail, now - led.at))
        };
        let held_consumer = |&(account, s, c): &OrphanConsumer| {
            let led = self.accounts.get(account)?.get(&*s.name)?;
            let led = led.consumers.get(&*c.name)?;
            let f = led.figures;
            let info = ConsumerInfo {
                name: c.name.clone(),
                created: c.created,
                config: c.config.clone(),
                delivered: f.delivered,
                ack_floor: f.ack_floor,
                num_ack_pending: f.ack_pending,
                num_redelivered: f.redelivered,
                num_waiting: f.waiting,
                num_pending: f.pending,
                paused: c.paused,
                pause_remaining: c.pause_remaining,
                ..ConsumerInfo::default()
            };
            Some((
                account.to_string(),
                s.name.clone(),
                info,
                f.server_now,
                now - led.at,
            ))
        };
        Held {
            streams: orphans.0.iter().filter_map(held_stream).collect(),
            consumers: orphans.1.iter().filter_map(held_consumer).collect(),
        }
    }

    /// Forgets figures a leader gave before `before`.
    fn forget(&mut self, before: f64) {
        for streams in self.accounts.values_mut() {
            for st in streams.values_mut() {
                st.consumers.retain(|_, c| c.at >= before);
                if st.stream.as_ref().is_some_and(|s| s.at < before) {
                    st.stream = None;
                }
            }
            streams.retain(|_, st| st.stream.is_some() || !st.consumers.is_empty());
        }
        self.accounts.retain(|_, streams| !streams.is_empty());
    }
}

#[cfg(test)]
#[path = "leaderless_tests.rs"]
mod tests;
