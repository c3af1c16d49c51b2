//! Each account's JetStream storage from `/jsz` (`account_details`): what
//! its streams use in memory and on file, its account-wide limits
//! (`max_mem`, `max_file`), and when it fills at the current rate.
//!
//! A full account refuses every publish to its streams: the server checks
//! the account's usage plus the new message against its limit before it
//! stores anything (`wouldExceedLimits` in nats-server's `jetstream.go`).
//! The publishers see it only if they check their acknowledgements.
//!
//! `/jsz` gives the usage and the account-wide limits on every supported
//! server (2.9 to 2.15), of every account, to HTTP and system-account polls
//! alike. It does not give the stream and consumer counts, their limits, nor
//! tiered (R1, R3) limits: `$JS.API.INFO` has them, and a server
//! answers it only within the account itself; in operator mode the
//! account's JWT has the limits (`account_jwts.rs`). A tiered account shows its
//! usage here and limits of 0: no limit is exported for it.
//!
//! The forecast takes the growth of the usage between polls at least a span
//! apart (an eighth of `--consumer-status-window`, as the removal forecast
//! of consumers), by the server's clock: the seconds until the usage
//! reaches the limit at that rate, 0 once it has, absent while the usage
//! does not grow or the account has no limit.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use prometheus_client::encoding::DescriptorEncoder;

use super::AccountDetail;
use crate::lock::LockOrRecover;
use crate::sources::TargetSnapshot;
use crate::text::families::gauge_family;

/// The two kinds of JetStream storage, as the `storage` label names them.
const KINDS: [&str; 2] = ["file", "memory"];

/// One account's storage of one kind, as one poll of one server saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AccountStorage {
    /// The account's name (its name tag where one is set).
    pub(crate) account: String,
    /// `file` or `memory`.
    pub(crate) kind: &'static str,
    /// Bytes its streams use, every replica counted.
    pub(crate) used: u64,
    /// Its account-wide limit; `None` when unlimited or tiered.
    pub(crate) limit: Option<u64>,
    /// Seconds until the usage reaches the limit at the current rate; 0
    /// once it has; `None` while it does not grow, before a rate is
    /// measured, or without a limit.
    pub(crate) full_in: Option<f64>,
}

/// The growth of one figure, measured between polls at least a span apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FillRate {
    /// When the anchor was taken (the server's clock).
    anchor_time: f64,
    /// The usage then.
    anchor_used: u64,
    /// Bytes per second over the last span; `None` before one was measured.
    rate: Option<f64>,
}

impl FillRate {
    pub(crate) fn new(now: f64, used: u64) -> FillRate {
        FillRate {
            anchor_time: now,
            anchor_used: used,
            rate: None,
        }
    }

    /// Takes `used` at `now`; measures the rate once `span` seconds have
    /// passed since the anchor. A clock gone back starts again.
    pub(crate) fn record(&mut self, now: f64, used: u64, span: f64) -> Option<f64> {
        if now < self.anchor_time {
            *self = FillRate::new(now, used);
        } else if now - self.anchor_time >= span && now > self.anchor_time {
            let grew = used as f64 - self.anchor_used as f64;
            self.rate = Some(grew / (now - self.anchor_time));
            self.anchor_time = now;
            self.anchor_used = used;
        }
        self.rate
    }
}

/// What one server's `/jsz` source remembers of its accounts between polls:
/// the rate of each account's storage of each kind.
#[derive(Debug, Default)]
pub(crate) struct FillRates {
    /// The span a rate is measured over, in seconds.
    span: f64,
    rates: Mutex<HashMap<(String, &'static str), FillRate>>,
}

impl FillRates {
    /// Rates measured over at least `span`.
    pub(crate) fn new(span: std::time::Duration) -> FillRates {
        FillRates {
            span: span.as_secs_f64(),
            rates: Mutex::default(),
        }
    }

    /// Each account's storage of each kind in `accounts`, polled at `now`
    /// (the server's clock; `None`: no rate is measured). Accounts no
    /// longer listed are forgotten.
    pub(crate) fn update(
        &self,
        accounts: &[AccountDetail],
        now: Option<f64>,
    ) -> Vec<AccountStorage> {
        let mut rates = self.rates.lock_or_recover();
        let mut out = Vec::new();
        for a in accounts {
            let figures = [
                (KINDS[0], a.storage, a.reserved_storage),
                (KINDS[1], a.memory, a.reserved_memory),
            ];
            for (kind, used, reserved) in figures {
                let Some(used) = used else { continue };
                let limit = reserved.filter(|r| *r != 0 && *r <= i64::MAX as u64);
                let rate = now.and_then(|now| {
                    let key = (a.name.clone(), kind);
                    let entry = rates.entry(key).or_insert_with(|| FillRate::new(now, used));
                    entry.record(now, used, self.span)
                });
                out.push(AccountStorage {
                    account: a.name.clone(),
                    kind,
                    used,
                    limit,
                    full_in: limit.and_then(|limit| full_in(used, limit, rate)),
                });
            }
        }
        rates.retain(|(name, _), _| accounts.iter().any(|a| a.name == *name));
        out
    }
}

/// Seconds until `used` reaches `limit` at `rate` bytes a second: 0 once
/// it has, `None` while it does not grow.
pub(crate) fn full_in(used: u64, limit: u64, rate: Option<f64>) -> Option<f64> {
    if used >= limit {
        return Some(0.0);
    }
    let rate = rate.filter(|r| *r > 0.0)?;
    Some((limit - used) as f64 / rate)
}

/// Writes the account families for the servers of one scrape whose `/jsz`
/// poll succeeded.
pub(crate) fn encode_targets(
    enc: &mut DescriptorEncoder,
    targets: &[TargetSnapshot],
) -> fmt::Result {
    let rows = || {
        targets.iter().flat_map(|t| {
            let storage = t.jsz.as_ref().map_or(&[][..], |j| &j.account_storage);
            storage.iter().map(move |s| {
                let labels = [
                    ("server", t.server.as_str()),
                    ("account", s.account.as_str()),
                    ("storage", s.kind),
                ];
                (labels, s)
            })
        })
    };
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_used_bytes",
        "Bytes the account's streams use in this kind of storage, every replica counted, as this server reports.",
        rows().map(|(l, s)| (l, s.used)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_limit_bytes",
        "The account's limit for this kind of storage (max_file, max_mem), past which it refuses every publish to its streams; absent when unlimited or tiered.",
        rows().filter_map(|(l, s)| Some((l, s.limit?))),
    )?;
    gauge_family(
        enc,
        "nats_delivery_account_jetstream_full_forecast_seconds",
        "Seconds until the account's usage of this kind of storage reaches its limit at the current rate; 0 once it has; absent while it does not grow or without a limit.",
        rows().filter_map(|(l, s)| Some((l, s.full_in?))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(storage: u64, reserved: u64) -> AccountDetail {
        AccountDetail {
            name: "A".into(),
            storage: Some(storage),
            reserved_storage: Some(reserved),
            ..Default::default()
        }
    }

    fn file(rates: &FillRates, storage: u64, reserved: u64, now: f64) -> AccountStorage {
        let got = rates.update(&[account(storage, reserved)], Some(now));
        assert_eq!(got.len(), 1, "memory is absent from the reply");
        got[0].clone()
    }

    #[test]
    fn the_forecast_comes_once_a_span_has_passed_and_goes_when_growth_stops() {
        let rates = FillRates::new(std::time::Duration::from_secs(10));
        assert_eq!(file(&rates, 1000, 11_000, 100.0).full_in, None);
        // Within the span: no rate yet.
        assert_eq!(file(&rates, 1500, 11_000, 105.0).full_in, None);
        // 2000 bytes in 10 s: 200 B/s, 8000 left: 40 s.
        assert_eq!(file(&rates, 3000, 11_000, 110.0).full_in, Some(40.0));
        // The rate holds until the next span: 7000 left at 200 B/s.
        assert_eq!(file(&rates, 4000, 11_000, 115.0).full_in, Some(35.0));
        // No growth over a span: no forecast.
        assert_eq!(file(&rates, 3000, 11_000, 120.0).full_in, None);
        // Full: 0, whatever the rate.
        assert_eq!(file(&rates, 11_000, 11_000, 121.0).full_in, Some(0.0));
    }

    #[test]
    fn unlimited_and_tiered_accounts_have_no_limit_nor_forecast() {
        let rates = FillRates::new(std::time::Duration::ZERO);
        for reserved in [u64::MAX, 0, i64::MAX as u64 + 1] {
            file(&rates, 0, reserved, 1.0);
            let got = file(&rates, 500, reserved, 2.0);
            assert_eq!((got.used, got.limit, got.full_in), (500, None, None));
        }
        let limited = file(&rates, 500, 1000, 3.0);
        assert_eq!(limited.limit, Some(1000));
    }

    #[test]
    fn a_clock_gone_back_starts_again_and_gone_accounts_are_forgotten() {
        let rates = FillRates::new(std::time::Duration::from_secs(1));
        file(&rates, 0, 1000, 10.0);
        assert_eq!(file(&rates, 100, 1000, 11.0).full_in, Some(9.0));
        assert_eq!(file(&rates, 200, 1000, 5.0).full_in, None);
        rates.update(&[], Some(6.0));
        assert!(rates.rates.lock_or_recover().is_empty());
    }
}
