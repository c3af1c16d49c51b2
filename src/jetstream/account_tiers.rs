//! The tiers of a tiered account (R1, R3: limits per stream replica count,
//! set in an operator's account JWT), from `$JS.API.INFO` `tiers`: each
//! tier's usage, limits and when it fills.
//!
//! Only `$JS.API.INFO` gives them whole, answered within the account
//! itself, so only the timestamp reader's account has its tiers' usage;
//! the other accounts have their tiers' limits, from their JWT
//! (`sources/jsz/account_jwts.rs`). A tiered account has no
//! account-wide limit (`/jsz` writes 0): the server checks a stream's
//! publish against its own tier, the tier's usage (every replica counted)
//! plus the message against the tier's limit times its replicas
//! (`wouldExceedLimits` in nats-server's `jetstream.go`). So `limit` here is
//! that product, and a full tier refuses every publish to the streams of
//! its replica count while the other tiers take them.
//!
//! A tier limit of 0 allows no stream of that storage in the tier (the
//! server refuses the stream when it is made): no publish can be refused
//! for it, so it is absent, as an unlimited one (-1).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use crate::lock::LockOrRecover;
use crate::sources::jsz::account_jwts::JwtLimits;
use crate::sources::jsz::accounts::{full_in, FillRate};
use crate::text::families::gauge_family;

/// One tier as `$JS.API.INFO` gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct Tier {
    /// Bytes of memory storage the tier's streams use, every replica.
    memory: u64,
    /// Bytes of file storage, every replica.
    storage: u64,
    /// Streams of the tier.
    pub(crate) streams: u64,
    /// Consumers of the tier.
    pub(crate) consumers: u64,
    limits: TierLimits,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
struct TierLimits {
    max_memory: i64,
    max_storage: i64,
    max_streams: i64,
    max_consumers: i64,
}

/// Replicas of a tier named `R<n>`; 1 for any other name.
fn replicas(tier: &str) -> u64 {
    let n = tier.strip_prefix('R').and_then(|n| n.parse::<u64>().ok());
    n.filter(|n| *n > 0).unwrap_or(1)
}

/// A limit above 0, as the server counts it.
fn positive(v: i64) -> Option<u64> {
    u64::try_from(v).ok().filter(|v| *v > 0)
}

/// One tier's storage of one kind, with its limit and forecast.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TierStorage {
    /// `file` or `memory`.
    pub(crate) kind: &'static str,
    /// Bytes used, every replica counted.
    pub(crate) used: u64,
    /// The tier's limit times its replicas; `None` when unlimited or 0.
    pub(crate) limit: Option<u64>,
    /// Seconds until `used` reaches `limit` at the current rate (0 once it
    /// has); `None` while it does not grow or without a limit.
    pub(crate) full_in: Option<f64>,
}

/// One tier of the reader's account, as one poll saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TierFigures {
    /// `R1`, `R3`, ...
    pub(crate) tier: String,
    /// Streams and consumers of the tier.
    pub(crate) streams: u64,
    pub(crate) consumers: u64,
    /// `max_streams`, `max_consumers` (a cap per stream); `None` when
    /// unlimited.
    pub(crate) max_streams: Option<u64>,
    pub(crate) max_consumers: Option<u64>,
    /// File and memory storage.
    pub(crate) storage: [TierStorage; 2],
}

/// The growth of each tier's storage between polls, measured over at
/// least a span (as the account-wide forecast's).
#[derive(Debug, Default)]
pub(crate) struct TierRates {
    span: f64,
    rates: Mutex<HashMap<(String, String, &'static str), FillRate>>,
}

impl TierRates {
    /// Rates measured over at least `span`.
    pub(crate) fn new(span: Duration) -> TierRates {
        TierRates {
            span: span.as_secs_f64(),
            rates: Mutex::default(),
        }
    }

    /// `account`'s `tiers` read at `now` (Unix seconds, the exporter's
    /// clock), with their forecasts, in tier order. Tiers and accounts no
    /// longer read are forgotten.
    pub(crate) fn update(
        &self,
        account: &str,
        tiers: &HashMap<String, Tier>,
        now: f64,
    ) -> Vec<TierFigures> {
        let mut rates = self.rates.lock_or_recover();
        rates.retain(|(a, t, _), _| a == account && tiers.contains_key(t));
        let mut names: Vec<&String> = tiers.keys().collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let t = &tiers[name];
            let r = replicas(name);
            let mut storage = [
                ("file", t.storage, t.limits.max_storage),
                ("memory", t.memory, t.limits.max_memory),
            ]
            .map(|(kind, used, max)| {
                let key = (account.to_string(), name.clone(), kind);
                let rate = rates.entry(key).or_insert_with(|| FillRate::new(now, used));
                let limit = positive(max).map(|m| m.saturating_mul(r));
                let rate = rate.record(now, used, self.span);
                TierStorage {
                    kind,
                    used,
                    limit,
                    full_in: limit.and_then(|l| full_in(used, l, rate)),
                }
            });
            storage.sort_by_key(|s| s.kind);
            out.push(TierFigures {
                tier: name.clone(),
                streams: t.streams,
                consumers: t.consumers,
                max_streams: positive(t.limits.max_streams),
                max_consumers: positive(t.limits.max_consumers),
                storage,
            });
        }
        out
    }
}

/// One tier's limits as a row: account, tier, file and memory limit (times
/// its replicas), `max_streams`, `max_consumers`.
type TierLimitRow<'a> = (
    &'a str,
    &'a str,
    [(&'static str, Option<u64>); 2],
    Option<u64>,
    Option<u64>,
);

/// The tiers' limits of the reader's account (`reader`, from
/// `$JS.API.INFO`) and of the others (`jwts`, from their JWT).
fn limit_rows<'a>(
    reader: Option<(&'a str, &'a [TierFigures])>,
    jwts: &'a BTreeMap<String, JwtLimits>,
) -> Vec<TierLimitRow<'a>> {
    let mut rows: Vec<TierLimitRow<'a>> = Vec::new();
    if let Some((account, tiers)) = reader {
        for t in tiers {
            let storage = t.storage.each_ref().map(|s| (s.kind, s.limit));
            rows.push((account, &t.tier, storage, t.max_streams, t.max_consumers));
        }
    }
    let others = jwts
        .iter()
        .filter(|(a, _)| reader.is_none_or(|(r, _)| r != *a));
    for (account, limits) in others {
        for t in &limits.tiers {
            let r = replicas(&t.tier);
            let times = |v: Option<u64>| v.map(|v| v.saturating_mul(r));
            let storage = [("file", times(t.max_file)), ("memory", times(t.max_memory))];
            rows.push((account, &t.tier, storage, t.max_streams, t.max_consumers));
        }
    }
    rows
}

/// Writes the tiers of the reader's account (`reader`: its name and
/// tiers), and the tiers' limits of the other accounts' JWTs (`jwts`).
pub(crate) fn encode(
    enc: &mut DescriptorEncoder,
    reader: Option<(&str, &[TierFigures])>,
    jwts: &BTreeMap<String, JwtLimits>,
) -> fmt::Result {
    let tiers = reader.map_or(&[][..], |(_, t)| t);
    let account = reader.map_or("", |(a, _)| a);
    let per_tier =
        || (tiers.iter()).map(move |t| ([("account", account), ("tier", t.tier.as_str())], t));
    let per_kind = || {
        per_tier().flat_map(|([a, t], f)| {
            f.storage
                .iter()
                .map(move |s| ([a, t, ("storage", s.kind)], s))
        })
    };
    let limits = limit_rows(reader, jwts);
    let limit_tier =
        || (limits.iter()).map(|(a, t, _, s, c)| ([("account", *a), ("tier", *t)], (s, c)));
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_tier_used_bytes",
        "Bytes the streams of this tier (replica count) of the account use in this kind of storage, every replica counted, from $JS.API.INFO in the account of the exporter's NATS connection.",
        per_kind().map(|(l, s)| (l, s.used)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_tier_limit_bytes",
        "The tier's limit for this kind of storage times its replicas, as the server checks a publish: from $JS.API.INFO in the account of the exporter's NATS connection, for the others in operator mode from their JWT (/accountz); absent when unlimited or 0.",
        (limits.iter()).flat_map(|(a, t, storage, _, _)| {
            (storage.iter()).filter_map(move |(kind, l)| Some(([("account", *a), ("tier", *t), ("storage", *kind)], (*l)?)))
        }),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_tier_full_forecast_seconds",
        "Seconds until the tier's usage of this kind of storage reaches its limit at the current rate, when it refuses every publish to the tier's streams; 0 once it has; absent while it does not grow or without a limit.",
        per_kind().filter_map(|(l, s)| Some((l, s.full_in?))),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_tier_streams",
        "Streams of this tier of the account, from $JS.API.INFO.",
        per_tier().map(|(l, t)| (l, t.streams)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_tier_consumers",
        "Consumers of this tier of the account, from $JS.API.INFO.",
        per_tier().map(|(l, t)| (l, t.consumers)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_tier_max_streams",
        "Streams this tier of the account may have (from $JS.API.INFO, or in operator mode the account's JWT); absent when unlimited.",
        limit_tier().filter_map(|(l, (s, _))| Some((l, (*s)?))),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_tier_max_consumers",
        "Consumers each stream of this tier may have (a cap per stream; from $JS.API.INFO, or in operator mode the account's JWT); absent when unlimited.",
        limit_tier().filter_map(|(l, (_, c))| Some((l, (*c)?))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiers(storage: u64) -> HashMap<String, Tier> {
        let json = format!(
            r#"{{"R1":{{"memory":0,"storage":{storage},"streams":1,"consumers":2,
                "limits":{{"max_memory":0,"max_storage":1000,"max_streams":5,"max_consumers":-1}}}},
              "R3":{{"storage":30,"limits":{{"max_memory":-1,"max_storage":1000}}}}}}"#
        );
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn limits_scale_by_replicas_and_the_forecast_follows_the_growth() {
        let rates = TierRates::new(Duration::from_secs(10));
        let first = rates.update("T", &tiers(100), 0.0);
        assert_eq!(first.len(), 2);
        let (r1, r3) = (&first[0], &first[1]);
        assert_eq!((r1.tier.as_str(), r1.streams, r1.consumers), ("R1", 1, 2));
        assert_eq!((r1.max_streams, r1.max_consumers), (Some(5), None));
        let file = |t: &TierFigures| t.storage[0].clone();
        assert_eq!(
            (file(r1).used, file(r1).limit, file(r1).full_in),
            (100, Some(1000), None)
        );
        assert_eq!(file(r3).limit, Some(3000));
        // Memory: 0 (none allowed) and -1 (unlimited) both absent.
        assert_eq!((r1.storage[1].limit, r3.storage[1].limit), (None, None));
        // 400 bytes in 10 s: 40 B/s, 500 left: 12.5 s.
        let later = rates.update("T", &tiers(500), 10.0);
        assert_eq!(file(&later[0]).full_in, Some(12.5));
        assert_eq!(
            file(&rates.update("T", &tiers(1000), 11.0)[0]).full_in,
            Some(0.0)
        );
    }
}
