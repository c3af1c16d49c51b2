//! Which streams and consumers to export: each from the server that leads
//! it, once, chosen over every server's poll.

use std::collections::HashSet;

use super::{ClusterInfo, ConsumerInfo, JszPoll, StreamDetail};

/// Whether `server` reports the entry as its leader. An entry without
/// cluster information (a server outside a cluster) leads unless
/// `named_only`.
fn leads(cluster: &Option<ClusterInfo>, server: Option<&str>, named_only: bool) -> bool {
    match (cluster, server) {
        (None, _) => !named_only,
        (Some(c), Some(s)) => &*c.leader == s,
        (Some(_), None) => false,
    }
}

/// A consumer chosen for export: account, stream, the consumer, the server clock.
pub(crate) type ConsumerRow<'a> = (&'a str, &'a str, &'a ConsumerInfo, Option<f64>);
/// A stream chosen for export: account and the stream.
pub(crate) type StreamRow<'a> = (&'a str, &'a StreamDetail);

/// Which streams and consumers to export, as positions in the polls: each
/// from the server that leads it, once. Chosen once per scrape, read by every
/// part of the exposition.
#[derive(Debug, Default)]
pub(crate) struct Leaders {
    /// (poll, account, stream) positions.
    streams: Vec<[u32; 3]>,
    /// (poll, account, stream, consumer) positions.
    consumers: Vec<[u32; 4]>,
}

/// Picks, over all servers, each stream and consumer from the server that
/// leads it, once. `polls[i]` is the i-th server's poll and its name, if any.
pub(crate) fn select_leaders(polls: &[Option<(Option<&str>, &JszPoll)>]) -> Leaders {
    let mut out = Leaders::default();
    // One server never lists a stream or consumer twice; only several
    // servers can disagree about who leads (during a change of leader).
    let dedupe = polls.iter().flatten().count() > 1;
    let mut seen_streams = HashSet::new();
    let mut seen_consumers = HashSet::new();
    let at = |i: usize| u32::try_from(i).expect("fewer than 2^32 entries");
    // With several servers, an entry without cluster information is taken
    // only where no server names itself its leader: a server recovering
    // after a restart first lists its replicas without it, with their
    // figures of before the restart.
    let passes: &[bool] = if dedupe { &[true, false] } else { &[false] };
    for &named_only in passes {
        for (p, (server, poll)) in polls
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, (*p)?)))
        {
            for (a, acc) in poll.accounts.iter().enumerate() {
                for (s, st) in acc.stream_detail.iter().enumerate() {
                    if leads(&st.cluster, server, named_only)
                        && (!dedupe || seen_streams.insert((acc.name.as_str(), st.name.as_str())))
                    {
                        out.streams.push([at(p), at(a), at(s)]);
                    }
                    for (c, cons) in st.consumer_detail.iter().enumerate() {
                        let key = (acc.name.as_str(), st.name.as_str(), &*cons.name);
                        if leads(&cons.cluster, server, named_only)
                            && (!dedupe || seen_consumers.insert(key))
                        {
                            out.consumers.push([at(p), at(a), at(s), at(c)]);
                        }
                    }
                }
            }
        }
    }
    // Held for the whole scrape: without the room (up to as much again) it grew.
    out.consumers.shrink_to_fit();
    out
}

impl Leaders {
    /// The chosen streams and consumers of `polls` (the same polls, in the
    /// same order, they were chosen from).
    pub(crate) fn rows<'a>(
        &self,
        polls: &[Option<&'a JszPoll>],
    ) -> (Vec<StreamRow<'a>>, Vec<ConsumerRow<'a>>) {
        let poll = |i: u32| polls[i as usize].expect("a chosen poll is present");
        let streams = self
            .streams
            .iter()
            .map(|&[p, a, s]| {
                let acc = &poll(p).accounts[a as usize];
                (acc.name.as_str(), &acc.stream_detail[s as usize])
            })
            .collect();
        let consumers = self
            .consumers
            .iter()
            .map(|&[p, a, s, c]| {
                let polled = poll(p);
                let acc = &polled.accounts[a as usize];
                let st = &acc.stream_detail[s as usize];
                (
                    acc.name.as_str(),
                    st.name.as_str(),
                    &st.consumer_detail[c as usize],
                    polled.now,
                )
            })
            .collect();
        (streams, consumers)
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
    select_leaders(&named).rows(&plain)
}

#[cfg(test)]
mod tests {
    use super::super::{unix_seconds, Jsz};
    use super::*;
    use crate::jetstream::jsz_families::age;

    fn poll(leader: &str, ack_pending: u64) -> JszPoll {
        let json = format!(
            r#"{{"now":"2026-01-01T00:00:10Z","account_details":[{{"name":"A","stream_detail":[{{"name":"S",
            "cluster":{{"leader":"{leader}"}},"state":{{"messages":1}},
            "consumer_detail":[{{"name":"C","cluster":{{"leader":"{leader}"}},"num_ack_pending":{ack_pending},
            "delivered":{{"stream_seq":9,"last_active":"2026-01-01T00:00:04Z"}}}}]}}]}}]}}"#
        );
        let jsz: Jsz = serde_json::from_str(&json).unwrap();
        JszPoll {
            now: unix_seconds(&jsz.now),
            accounts: jsz.account_details,
            config_read: true,
            config_read_failures: 0,
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
        // Where no server names a leader, the entry is still exported once.
        let (streams, consumers) = select(&[(Some("a"), &recovering), (Some("c"), &stale)]);
        assert_eq!((streams.len(), consumers.len()), (1, 1));
        // One server outside a cluster: its entries, as before.
        let (streams, consumers) = select(&[(Some("a"), &recovering)]);
        assert_eq!((streams.len(), consumers.len()), (1, 1));
    }
}
