//! `/accstatz`: per-account statistics. The exporter takes each account's
//! `slow_consumers`, the connections of that account the server cut as slow
//! consumers since the account was loaded: a running total, so a counter (a
//! server restart is a counter reset).
//!
//! It asks with `unused=true`: without it the server lists only accounts
//! with a connection open now, so an account whose only subscriber was just
//! cut would drop out of the reply, and its counter series with it, at the
//! very moment it matters.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use super::{MonitoringSource, NatsOption, TargetSnapshot};
use super::{ServerLink, Source};
use crate::poll_error::PollError;
use crate::text::families::counter_family;

/// The fields of an `/accstatz` reply the exporter uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Accstatz {
    /// One entry per account the server has loaded.
    pub(crate) account_statz: Vec<AccountStat>,
}

/// One account's statistics.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct AccountStat {
    /// The account's name (its public key in operator mode), as `/connz`
    /// names it: the `account` label.
    pub(crate) acc: String,
    /// Connections of this account cut as slow consumers; absent when the
    /// server does not report it.
    pub(crate) slow_consumers: Option<u64>,
}

/// Reads the server's `/accstatz`, unused accounts included.
pub(crate) async fn poll(link: &ServerLink<'_>) -> Result<Accstatz, PollError> {
    link.get_json(Source::Accstatz, &[("unused", "true".into())])
        .await
}

/// The `/accstatz` source of one server.
#[derive(Debug, Default)]
pub(crate) struct AccstatzSource;

impl MonitoringSource for AccstatzSource {
    type Reply = Accstatz;
    const HELP: &'static str = "`/accstatz`: per-account slow consumers";
    const NATS_OPTIONS: &'static [NatsOption] =
        &[NatsOption::flag("unused").named("include_unused")];

    fn source(&self) -> Source {
        Source::Accstatz
    }

    fn poll<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> impl std::future::Future<Output = Result<Accstatz, PollError>> + Send + 'a {
        poll(link)
    }

    fn absorb(&self, reply: Accstatz, snap: &mut TargetSnapshot) {
        snap.accstatz = Some(reply);
    }
}

/// Writes this source's families for the servers of one scrape.
pub(crate) fn encode_targets(
    enc: &mut DescriptorEncoder,
    targets: &[TargetSnapshot],
) -> fmt::Result {
    encode(enc, &super::answered(targets, |t| t.accstatz.as_ref()))
}

/// Writes the per-account families for the servers polled successfully.
pub(crate) fn encode(enc: &mut DescriptorEncoder, servers: &[(&str, &Accstatz)]) -> fmt::Result {
    counter_family(
        enc,
        "nats_delivery_account_slow_consumers",
        "Connections of this account the server cut as slow consumers since it loaded the account.",
        servers.iter().flat_map(|(s, a)| {
            a.account_statz.iter().filter_map(move |acc| {
                let n = acc.slow_consumers?;
                Some(([("server", *s), ("account", acc.acc.as_str())], n))
            })
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_count_stays_absent() {
        let reply: Accstatz = serde_json::from_str(
            r#"{"server_id":"X","account_statz":[
                {"acc":"A","conns":1,"slow_consumers":3},
                {"acc":"B","name":"tag"}]}"#,
        )
        .unwrap();
        let got: Vec<_> = reply
            .account_statz
            .iter()
            .map(|a| (a.acc.as_str(), a.slow_consumers))
            .collect();
        assert_eq!(got, [("A", Some(3)), ("B", None)]);
    }
}
