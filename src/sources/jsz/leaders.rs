//! Which streams and consumers to export: each from the server that leads
//! it, once, chosen over every server's poll.

use std::collections::{HashMap, HashSet};

use super::view::{choose, consumer_view, stream_view, View};
use super::{ConsumerInfo, JszPoll, StreamDetail};

/// A consumer chosen for export: account, stream, the consumer, the server clock.
pub(crate) type ConsumerRow<'a> = (&'a str, &'a str, &'a ConsumerInfo, Option<f64>);
/// A stream chosen for export: account and the stream.
pub(crate) type StreamRow<'a> = (&'a str, &'a StreamDetail);
/// A consumer listed with no view that counts: account, its stream, itself.
pub(crate) type OrphanConsumer<'a> = (&'a str, &'a StreamDetail, &'a ConsumerInfo);

/// Streams and consumers written from figures held since their group's
/// last leader (`jetstream/leaderless.rs`), owned outside the polls: the
/// streams' (account, stream) and the consumers' rows.
pub(crate) type HeldRows<'a> = (Vec<StreamRow<'a>>, Vec<ConsumerRow<'a>>);

/// The poll position of a held row: its index follows.
const HELD: u32 = u32::MAX;

/// Which streams and consumers to export, as positions in the polls: each
/// from the server whose view counts ([`super::view::choose`]), once.
/// Chosen once per scrape, read by every part of the exposition.
#[derive(Debug, Default)]
pub(crate) struct Leaders {
    /// (poll, account, stream) positions.
    streams: Vec<[u32; 3]>,
    /// (poll, account, stream, consumer) positions.
    consumers: Vec<[u32; 4]>,
    /// Groups listed with no view that counts: one entry of each.
    orphan_streams: Vec<[u32; 3]>,
    orphan_consumers: Vec<[u32; 4]>,
}

/// A poll with its server's name, if known.
type Named<'a> = (Option<&'a str>, &'a JszPoll);

/// Picks, over all servers, each stream and consumer from the server whose
/// view of it counts, once; in the order of the polls. `polls[i]` is the
/// i-th server's poll and its name, if any; `targets` names every server
/// this exporter polls, those whose poll failed included (a group they
/// lead has no leader's view this time, see [`Leaders::orphans`]).
pub(crate) fn select_leaders(polls: &[Option<Named>], targets: &[&str]) -> Leaders {
    let at = |i: usize| u32::try_from(i).expect("fewer than 2^32 entries");
    let stream = |[p, a, s]: [u32; 3]| {
        let (server, poll) = polls[p as usize].expect("a listed poll is present");
        let st = &poll.accounts[a as usize].stream_detail[s as usize];
        stream_view(st, server, poll.reports_leader_since)
    };
    let consumer = |[p, a, s, c]: [u32; 4]| {
        let (server, poll) = polls[p as usize].expect("a listed poll is present");
        let st = &poll.accounts[a as usize].stream_detail[s as usize];
        let cons = &st.consumer_detail[c as usize];
        consumer_view(cons, st, server, poll.reports_leader_since)
    };
    let mut out = Leaders::default();
    let polled = polls.iter().flatten().filter_map(|(n, _)| *n);
    let names: HashSet<&str> = polled.chain(targets.iter().copied()).collect();
    let present = || (polls.iter().enumerate()).filter_map(|(i, p)| Some((at(i), (*p)?.1)));
    if present().count() <= 1 {
        // One server never lists a stream or consumer twice.
        for (p, poll) in present() {
            for (a, acc) in poll.accounts.iter().enumerate() {
                for (s, st) in acc.stream_detail.iter().enumerate() {
                    let pos = [p, at(a), at(s)];
                    let views = [stream(pos)];
                    match choose(&views) {
                        Some(_) => out.streams.push(pos),
                        None => out
                            .orphan_streams
                            .extend(orphan(&views, &names).map(|_| pos)),
                    }
                    for c in 0..st.consumer_detail.len() {
                        let pos = [p, at(a), at(s), at(c)];
                        let views = [consumer(pos)];
                        match choose(&views) {
                            Some(_) => out.consumers.push(pos),
                            None => {
                                let orphaned = orphan(&views, &names).map(|_| pos);
                                out.orphan_consumers.extend(orphaned);
                            }
                        }
                    }
                }
            }
        }
        return out;
    }
    // Every server's entry of each group, in the order of the polls.
    let mut streams: HashMap<(&str, &str), Vec<[u32; 3]>> = HashMap::new();
    let mut consumers: HashMap<(&str, &str, &str), Vec<[u32; 4]>> = HashMap::new();
    for (p, poll) in present() {
        for (a, acc) in poll.accounts.iter().enumerate() {
            for (s, st) in acc.stream_detail.iter().enumerate() {
                let key = (acc.name.as_str(), st.name.as_str());
                streams.entry(key).or_default().push([p, at(a), at(s)]);
                for (c, cons) in st.consumer_detail.iter().enumerate() {
                    let key = (key.0, key.1, &*cons.name);
                    consumers
                        .entry(key)
                        .or_default()
                        .push([p, at(a), at(s), at(c)]);
                }
            }
        }
    }
    for entries in streams.values() {
        let views: Vec<View> = entries.iter().map(|&e| stream(e)).collect();
        match choose(&views) {
            Some(i) => out.streams.push(entries[i]),
            None => out
                .orphan_streams
                .extend(orphan(&views, &names).map(|i| entries[i])),
        }
    }
    drop(streams);
    for entries in consumers.values() {
        let views: Vec<View> = entries.iter().map(|&e| consumer(e)).collect();
        match choose(&views) {
            Some(i) => out.consumers.push(entries[i]),
            None => {
                let orphaned = orphan(&views, &names).map(|i| entries[i]);
                out.orphan_consumers.extend(orphaned);
            }
        }
    }
    drop(consumers);
    out.streams.sort_unstable();
    out.consumers.sort_unstable();
    out.orphan_streams.sort_unstable();
    out.orphan_consumers.sort_unstable();
    // Held for the whole scrape: without the room (up to as much again) it grew.
    out.consumers.shrink_to_fit();
    out
}

/// Whether a group none of whose `views` counts has no leader among the
/// servers this exporter polls (named `polled`, their polls failed or
/// not): a server lists it with a cluster block, and any leader named is
/// one of them (whose claim did not count, or whose poll failed). Returns the first view with a cluster block, standing for the
/// group. A group whose leader was not polled (another exporter's, or a
/// failed poll) is not one.
fn orphan(views: &[View], polled: &HashSet<&str>) -> Option<usize> {
    let no_leader = views.iter().all(|v| match v {
        View::LedBy(name) => polled.contains(name),
        View::Unclustered | View::Claims(_) | View::Leaderless(_) => true,
    });
    let first = views.iter().position(|v| !matches!(v, View::Unclustered));
    first.filter(|_| no_leader)
}

impl Leaders {
    /// The chosen streams and consumers of `polls` (the same polls, in the
    /// same order, they were chosen from), then the `held` ones added by
    /// [`Leaders::hold`].
    pub(crate) fn rows<'a>(
        &self,
        polls: &[Option<&'a JszPoll>],
        held: &HeldRows<'a>,
    ) -> (Vec<StreamRow<'a>>, Vec<ConsumerRow<'a>>) {
        let (streams, consumers) = self.each_row(polls, held);
        (streams.collect(), consumers.collect())
    }

    /// [`Leaders::rows`], one at a time.
    pub(crate) fn each_row<'s, 'a>(
        &'s self,
        polls: &'s [Option<&'a JszPoll>],
        held: &'s HeldRows<'a>,
    ) -> (
        impl Iterator<Item = StreamRow<'a>> + 's,
        impl Iterator<Item = ConsumerRow<'a>> + 's,
    ) {
        let poll = move |i: u32| polls[i as usize].expect("a chosen poll is present");
        let streams = self.streams.iter().map(move |&[p, a, s]| {
            if p == HELD {
                return held.0[a as usize];
            }
            let acc = &poll(p).accounts[a as usize];
            (acc.name.as_str(), &acc.stream_detail[s as usize])
        });
        let consumers = self.consumers.iter().map(move |&[p, a, s, c]| {
            if p == HELD {
                return held.1[a as usize];
            }
            let polled = poll(p);
            let acc = &polled.accounts[a as usize];
            let st = &acc.stream_detail[s as usize];
            let cons = &st.consumer_detail[c as usize];
            (acc.name.as_str(), st.name.as_str(), cons, polled.now)
        });
        (streams, consumers)
    }

    /// The groups listed with no view that counts, one entry of each.
    pub(crate) fn orphans<'a>(
        &self,
        polls: &[Option<&'a JszPoll>],
    ) -> (Vec<StreamRow<'a>>, Vec<OrphanConsumer<'a>>) {
        let poll = |i: u32| polls[i as usize].expect("a listed poll is present");
        let streams = (self.orphan_streams.iter())
            .map(|&[p, a, s]| {
                let acc = &poll(p).accounts[a as usize];
                (acc.name.as_str(), &acc.stream_detail[s as usize])
            })
            .collect();
        let consumers = (self.orphan_consumers.iter())
            .map(|&[p, a, s, c]| {
                let acc = &poll(p).accounts[a as usize];
                let st = &acc.stream_detail[s as usize];
                (acc.name.as_str(), st, &st.consumer_detail[c as usize])
            })
            .collect();
        (streams, consumers)
    }

    /// Adds `streams` and `consumers` held rows after the chosen ones (the
    /// held rows [`Leaders::rows`] is then given, in their order).
    pub(crate) fn hold(&mut self, streams: usize, consumers: usize) {
        let at = |i: usize| u32::try_from(i).expect("fewer than 2^32 entries");
        self.streams.extend((0..streams).map(|i| [HELD, at(i), 0]));
        self.consumers
            .extend((0..consumers).map(|i| [HELD, at(i), 0, 0]));
        self.orphan_streams = Vec::new();
        self.orphan_consumers = Vec::new();
    }

    /// How many of the rows come from polls, not held: the first ones
    /// until the rows are put in another order.
    pub(crate) fn led(&self) -> (usize, usize) {
        let polled = |p: u32| p != HELD;
        (
            self.streams.iter().filter(|x| polled(x[0])).count(),
            self.consumers.iter().filter(|x| polled(x[0])).count(),
        )
    }
}

impl Leaders {
    /// Keeps the consumers whose `keep` entry (one per consumer, in the
    /// order of [`Leaders::rows`]) is true.
    pub(crate) fn retain_consumers(&mut self, keep: &[bool]) {
        let mut keep = keep.iter();
        self.consumers
            .retain(|_| keep.next().copied().unwrap_or(true));
    }

    /// Puts the consumers in `order` (positions in the order of
    /// [`Leaders::rows`]) and keeps the first `keep`.
    pub(crate) fn reorder_consumers(&mut self, order: &[usize], keep: usize) {
        self.consumers = order[..keep].iter().map(|&i| self.consumers[i]).collect();
    }
}

/// [`select_leaders`] and [`Leaders::rows`] in one step, for the tests.
#[cfg(test)]
fn select<'a>(
    polls: &[(Option<&'a str>, &'a JszPoll)],
) -> (Vec<StreamRow<'a>>, Vec<ConsumerRow<'a>>) {
    let named: Vec<_> = polls.iter().map(|&(n, p)| Some((n, p))).collect();
    let plain: Vec<_> = polls.iter().map(|&(_, p)| Some(p)).collect();
    select_leaders(&named, &[]).rows(&plain, &Default::default())
}

#[cfg(test)]
mod tests {
    use super::super::Jsz;
    use super::*;
    use crate::jetstream::jsz_families::age;
    use crate::sources::unix_seconds;

    fn poll(leader: &str, ack_pending: u64) -> JszPoll {
        let json = format!(
            r#"{{"now":"2026-01-01T00:00:10Z","account_details":[{{"name":"A","stream_detail":[{{"name":"S",
            "cluster":{{"leader":"{leader}","replicas":[{{"current":true}}]}},"state":{{"messages":1}},
            "consumer_detail":[{{"name":"C","cluster":{{"leader":"{leader}","replicas":[{{"current":true}}]}},"num_ack_pending":{ack_pending},
            "delivered":{{"stream_seq":9,"last_active":"2026-01-01T00:00:04Z"}}}}]}}]}}]}}"#
        );
        let jsz: Jsz = serde_json::from_str(&json).unwrap();
        JszPoll {
            now: unix_seconds(&jsz.now),
            accounts: jsz.account_details,
            config_read: true,
            config_read_failures: 0,
            ..Default::default()
        }
    }

    #[test]
    fn takes_each_consumer_from_its_leader_once() {
        // Both replicas name b as leader; a's view is stale.
        let (a, b) = (poll("b", 7), poll("b", 3));
        let (streams, consumers) = select(&[(Some("a"), &a), (Some("b"), &b)]);
        assert_eq!(streams.len(), 1);
        assert_eq!(consumers.len(), 1);
        assert_eq!(consumers[0].2.num_ack_pending, 3);
        assert_eq!(
            age(consumers[0].3, consumers[0].2.delivered.last_active()),
            Some(6.0)
        );
        // A server whose name is unknown cannot be shown to lead anything.
        let (streams, consumers) = select(&[(None, &b)]);
        assert!(streams.is_empty() && consumers.is_empty());
        // During a change of leader two servers may both claim it: once only.
        let other = poll("b", 5);
        let (_, consumers) = select(&[(Some("b"), &b), (Some("b"), &other)]);
        assert_eq!(consumers.len(), 1);
    }

    #[test]
    fn a_replica_without_cluster_information_does_not_hide_the_leader() {
        // A restarted server, polled first, still recovering: no cluster
        // information and the figures of before its restart.
        let stale = poll("b", 7);
        let mut recovering = poll("b", 7);
        let st = &mut recovering.accounts[0].stream_detail[0];
        st.cluster = None;
        st.consumer_detail[0].cluster = None;
        st.state.messages = 99;
        let leader = poll("b", 3);
        let polls = [
            (Some("a"), &recovering),
            (Some("b"), &leader),
            (Some("c"), &stale),
        ];
        let (streams, consumers) = select(&polls);
        assert_eq!(streams.len(), 1);
        assert_eq!(streams[0].1.state.messages, 1);
        assert_eq!(consumers.len(), 1);
        assert_eq!(consumers[0].2.num_ack_pending, 3);
        // Where no polled server leads, neither the recovering server's
        // figures of before nor a follower's are the group's state.
        let (streams, consumers) = select(&[(Some("a"), &recovering), (Some("c"), &stale)]);
        assert_eq!((streams.len(), consumers.len()), (0, 0));
        // One server outside a cluster: its entries, as before.
        let (streams, consumers) = select(&[(Some("a"), &recovering)]);
        assert_eq!((streams.len(), consumers.len()), (1, 1));
    }
}
