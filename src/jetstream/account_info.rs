//! Each account's streams and consumers, and their limits where a server
//! gives them.
//!
//! For the timestamp reader's account, from `$JS.API.INFO`, once per poll:
//! the server answers it only within the account itself, from its cluster's
//! meta layer (every stream, wherever placed), with `max_streams` and
//! `max_consumers`. For every other account `/jsz` lists of the polled
//! servers are counted (`sources/jsz/account_assets.rs`); their limits
//! come from their JWT in operator mode (`sources/jsz/account_jwts.rs`),
//! as no other reply outside the account gives them (2.9 to 2.15), and are
//! absent otherwise.
//!
//! The account's `max_consumers` caps the consumers of each stream (the
//! server checks it against the stream's own count when a consumer is
//! made), while `consumers` counts the whole account's: the two are not a
//! ratio.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use super::account_tiers::Tier;
use crate::sources::jsz::account_jwts::JwtLimits;
use crate::text::families::gauge_family;

/// What one `$JS.API.INFO` reply says of its account's streams and consumers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AccountCounts {
    /// The account (the reader's, as its flags name it).
    pub(crate) account: String,
    /// Streams of the account.
    pub(crate) streams: u64,
    /// Consumers of every stream of the account.
    pub(crate) consumers: u64,
    /// `max_streams`; `None` when unlimited or tiered.
    pub(crate) max_streams: Option<u64>,
    /// `max_consumers` (per stream); `None` when unlimited or tiered.
    pub(crate) max_consumers: Option<u64>,
    /// A tiered account's tiers, by name (`R1`, `R3`); empty otherwise.
    pub(crate) tiers: HashMap<String, Tier>,
}

#[derive(Deserialize)]
struct InfoReply {
    #[serde(default)]
    streams: Option<u64>,
    #[serde(default)]
    consumers: Option<u64>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    tiers: HashMap<String, Tier>,
}

#[derive(Deserialize, Default)]
struct Limits {
    #[serde(default)]
    max_streams: Option<i64>,
    #[serde(default)]
    max_consumers: Option<i64>,
}

/// Reads one `$JS.API.INFO` reply: `None` for an error reply or one
/// without the counts.
pub(crate) fn parse(account: &str, payload: &[u8]) -> Option<AccountCounts> {
    let reply: InfoReply = serde_json::from_slice(payload).ok()?;
    if reply.error.is_some() {
        return None;
    }
    // -1 is unlimited; a tiered account's top-level limits are 0.
    let limit = |v: Option<i64>| v.filter(|n| *n > 0).map(|n| n as u64);
    Some(AccountCounts {
        account: account.to_string(),
        streams: reply.streams?,
        consumers: reply.consumers?,
        max_streams: limit(reply.limits.max_streams),
        max_consumers: limit(reply.limits.max_consumers),
        tiers: reply.tiers,
    })
}

/// Asks `client`'s account for its JetStream info within `deadline`;
/// `None` when it does not answer in time or answers with an error (a
/// warning says why), and at once while the connection is down (its own
/// failures are logged): a request queued for a later connection would
/// hold every scrape until its deadline.
pub(crate) async fn read(
    client: &Client,
    account: &str,
    deadline: Duration,
) -> Option<AccountCounts> {
    if !crate::nats::is_connected(client) {
        tracing::debug!(account, "$JS.API.INFO not asked: the connection is down");
        return None;
    }
    let asked = client.request("$JS.API.INFO", Bytes::new());
    match tokio::time::timeout(deadline, asked).await {
        Ok(Ok(reply)) => {
            let counts = parse(account, &reply.payload);
            if counts.is_none() {
                tracing::warn!(
                    account,
                    "$JS.API.INFO answered without the account's counts"
                );
            }
            counts
        }
        Ok(Err(error)) => {
            tracing::warn!(account, %error, "$JS.API.INFO failed");
            None
        }
        Err(_) => {
            tracing::warn!(account, "$JS.API.INFO did not answer in time");
            None
        }
    }
}

/// Every account's counts: `info`'s (the reader's account, from
/// `$JS.API.INFO`) for its account, `listed`'s (from `/jsz`, by account
/// name: streams, consumers) for the others, with the limits of their
/// JWT where `jwts` has it (operator mode).
pub(crate) fn merged(
    info: Option<&AccountCounts>,
    listed: &BTreeMap<String, (u64, u64)>,
    jwts: &BTreeMap<String, JwtLimits>,
) -> Vec<AccountCounts> {
    let others = (listed.iter())
        .filter(|(name, _)| info.is_none_or(|i| i.account != **name))
        .map(|(name, &(streams, consumers))| AccountCounts {
            account: name.clone(),
            streams,
            consumers,
            max_streams: jwts.get(name).and_then(|j| j.max_streams),
            max_consumers: jwts.get(name).and_then(|j| j.max_consumers),
            ..AccountCounts::default()
        });
    info.cloned().into_iter().chain(others).collect()
}

/// Writes the accounts' counts.
pub(crate) fn encode(enc: &mut DescriptorEncoder, counts: &[AccountCounts]) -> fmt::Result {
    let rows = || {
        counts
            .iter()
            .map(|c| ([("account", c.account.as_str())], c))
    };
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_streams",
        "Streams of the account: from $JS.API.INFO in the account of the exporter's NATS connection, for the others the distinct streams the polled servers list in /jsz.",
        rows().map(|(l, c)| (l, c.streams)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_consumers",
        "Consumers of every stream of the account: from $JS.API.INFO in the account of the exporter's NATS connection, for the others the distinct consumers the polled servers list in /jsz.",
        rows().map(|(l, c)| (l, c.consumers)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_max_streams",
        "Streams the account may have (max_streams): from $JS.API.INFO in the account of the exporter's NATS connection, for the others in operator mode from their JWT (/accountz); absent when unlimited or tiered.",
        rows().filter_map(|(l, c)| Some((l, c.max_streams?))),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_max_consumers",
        "Consumers each stream of the account may have (max_consumers, a cap per stream): from $JS.API.INFO in the account of the exporter's NATS connection, for the others in operator mode from their JWT (/accountz); absent when unlimited or tiered.",
        rows().filter_map(|(l, c)| Some((l, c.max_consumers?))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_that_is_down_is_not_asked_and_holds_no_scrape() {
        let client = crate::nats::never_connected().await;
        // A request queued for a later connection would wait out the hour.
        let asked = read(&client, "A", Duration::from_secs(3600));
        let answered = tokio::time::timeout(Duration::from_secs(120), asked).await;
        assert_eq!(answered.expect("returned at once"), None);
    }

    #[test]
    fn limits_unlimited_or_tiered_are_absent_and_errors_give_nothing() {
        let got = parse(
            "A",
            br#"{"memory":0,"storage":10,"streams":2,"consumers":3,
                "limits":{"max_streams":5,"max_consumers":-1}}"#,
        );
        let want = AccountCounts {
            account: "A".into(),
            streams: 2,
            consumers: 3,
            max_streams: Some(5),
            max_consumers: None,
            tiers: HashMap::new(),
        };
        assert_eq!(got, Some(want));
        let tiered = parse(
            "T",
            br#"{"streams":1,"consumers":0,"limits":{"max_streams":0}}"#,
        );
        assert_eq!(tiered.unwrap().max_streams, None);
        let error = br#"{"error":{"code":503,"description":"JetStream not enabled for account"}}"#;
        assert_eq!(parse("A", error), None);
        assert_eq!(parse("A", b"garbage"), None);
    }

    #[test]
    fn the_readers_account_keeps_its_info_and_the_others_come_from_the_lists() {
        let info = parse(
            "A",
            br#"{"streams":9,"consumers":8,"limits":{"max_streams":10,"max_consumers":7}}"#,
        );
        let listed = BTreeMap::from([("A".to_string(), (1, 1)), ("B".to_string(), (2, 3))]);
        let got = merged(info.as_ref(), &listed, &BTreeMap::new());
        let b = AccountCounts {
            account: "B".into(),
            streams: 2,
            consumers: 3,
            ..AccountCounts::default()
        };
        assert_eq!(got, vec![info.clone().unwrap(), b.clone()]);
        let a = AccountCounts {
            account: "A".into(),
            streams: 1,
            consumers: 1,
            ..b
        };
        assert_eq!(
            merged(None, &listed, &BTreeMap::new()),
            vec![a, got[1].clone()]
        );
    }
}
