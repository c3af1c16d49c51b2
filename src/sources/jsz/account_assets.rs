//! Each account's streams and consumers, counted from the `/jsz` lists.
//!
//! No reply a server gives outside an account counts them: `/jsz`
//! `account_details` (and `$SYS.REQ.ACCOUNT.<acc>.JSZ`, the same data) has
//! the storage but no counts and no `max_streams` / `max_consumers` on any
//! supported version (2.9 to 2.15); only `$JS.API.INFO`, answered within the
//! account itself, has them (`jetstream/account_info.rs`). What `/jsz` does
//! have is the list: each server lists the streams it holds a replica of,
//! with the consumers it holds. So the account's streams are the distinct
//! streams every polled server lists, and its consumers the distinct
//! consumers: one server's list alone misses the R1 streams, and the R1
//! consumers, another server holds.
//!
//! They are recorded as each page is read, before the `--jsz-*` name
//! filters drop anything (the counts are the account's, whatever is
//! exported of it), for the accounts the account filter keeps. Names are
//! kept as 64-bit hashes, 8 bytes a stream or consumer, charged to the
//! poll's kept budget (`--max-kept-size`).

use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use super::filter::JszFilter;
use super::AccountDetail;

/// The streams and consumers one server listed for one account.
#[derive(Debug, Clone, Default)]
pub(crate) struct AccountAssets {
    /// The account's name (its name tag where one is set).
    pub(crate) account: String,
    /// Each stream, by its name's hash.
    streams: Vec<u64>,
    /// Each consumer, by the hash of its stream's name and its own.
    consumers: Vec<u64>,
}

impl AccountAssets {
    /// The memory it holds, charged to the poll's kept budget.
    pub(crate) fn kept_bytes(&self) -> usize {
        let hashes = self.streams.capacity() + self.consumers.capacity();
        std::mem::size_of::<Self>() + self.account.capacity() + 8 * hashes
    }
}

fn hash(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// What `accounts` (one page, not yet filtered) list, for the accounts
/// `filter` keeps.
pub(crate) fn record(accounts: &[AccountDetail], filter: &JszFilter) -> Vec<AccountAssets> {
    (accounts.iter())
        .filter(|a| filter.accounts.keeps_any(&[&a.name, &a.id]))
        .map(|a| AccountAssets {
            account: a.name.clone(),
            streams: (a.stream_detail.iter()).map(|s| hash(&[&s.name])).collect(),
            consumers: (a.stream_detail.iter())
                .flat_map(|s| (s.consumer_detail.iter()).map(|c| hash(&[&s.name, &c.name])))
                .collect(),
        })
        .collect()
}

/// The distinct streams and consumers of each account over every server's
/// lists (`polls`: one list per server whose `/jsz` poll succeeded), by
/// account name.
pub(crate) fn count<'a>(
    polls: impl IntoIterator<Item = &'a [AccountAssets]>,
) -> BTreeMap<String, (u64, u64)> {
    let mut seen: BTreeMap<&str, (HashSet<u64>, HashSet<u64>)> = BTreeMap::new();
    for assets in polls {
        for a in assets {
            let (streams, consumers) = seen.entry(&a.account).or_default();
            streams.extend(&a.streams);
            consumers.extend(&a.consumers);
        }
    }
    (seen.into_iter())
        .map(|(name, (s, c))| (name.to_string(), (s.len() as u64, c.len() as u64)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::jsz::{ConsumerInfo, StreamDetail};

    fn account(name: &str, streams: &[(&str, &[&str])]) -> AccountDetail {
        let stream = |(s, cs): &(&str, &[&str])| StreamDetail {
            name: s.to_string(),
            consumer_detail: (cs.iter())
                .map(|c| ConsumerInfo {
                    name: (*c).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        AccountDetail {
            name: name.into(),
            stream_detail: streams.iter().map(stream).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn replicas_count_once_and_each_servers_own_streams_add_up() {
        let filter = JszFilter::default();
        // Server 0 holds R3 (with c1) and R1a; server 1 holds R3 (with c1
        // and an R1 consumer c2) and R1b; a consumer named alike on
        // another stream is another consumer.
        let n0 = record(
            &[account("A", &[("R3", &["c1"]), ("R1a", &["c1"])])],
            &filter,
        );
        let n1 = record(
            &[
                account("A", &[("R3", &["c1", "c2"]), ("R1b", &[])]),
                account("B", &[]),
            ],
            &filter,
        );
        let got = count([&n0[..], &n1[..]]);
        let want = BTreeMap::from([("A".to_string(), (3, 3)), ("B".to_string(), (0, 0))]);
        assert_eq!(got, want);
    }
}
