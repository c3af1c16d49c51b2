//! `/jsz`: JetStream streams and consumers, with their configuration.
//!
//! Every replica of a clustered stream or consumer reports its own view; only
//! the leader's is current, so a stream or consumer is taken from the server
//! that leads it (and once, should two servers claim it during a change of
//! leader). Accounts are read in pages (`offset`, `limit`) so that servers
//! with more accounts than one page are read whole.

use std::collections::BTreeSet;

use super::{MonitoringSource, NatsOption, TargetSnapshot};
use super::{ServerLink, Source};
use crate::poll_error::PollError;

pub(crate) mod account_assets;
pub(crate) mod account_jwts;
pub(crate) mod accounts;
mod config_background;
mod config_learned;
mod config_memory;
mod config_on_demand;
mod cut;
pub(crate) mod de;
mod filter;
mod leaders;
mod metadata;
mod pages;
pub(crate) mod patterns;
mod removal_figures;
pub(crate) mod replicas;
mod reply;
pub(crate) mod split;
mod stream_end;
pub(crate) mod view;
pub use config_memory::RemovalCheck;
pub(crate) use config_on_demand::ConfigOnDemand;
pub use filter::JszFilter;
pub(crate) use leaders::{
    select_leaders, ConsumerRow, HeldRows, Leaders, OrphanConsumer, StreamRow,
};
pub(crate) use metadata::Metadata;
pub use metadata::{
    metadata_label_name, name_metadata_labels, LAG_THRESHOLD_KEY, MAX_LABEL_KEYS,
    MAX_LABEL_VALUE_BYTES,
};
pub use removal_figures::{ConsumerAt, CountingKind, StreamAt};
pub use reply::*;

/// One server's JetStream state from one poll (all pages).
#[derive(Debug, Default)]
pub(crate) struct JszPoll {
    /// The server's clock at the first page, as Unix seconds.
    pub(crate) now: Option<f64>,
    /// Every account on every page.
    pub(crate) accounts: Vec<AccountDetail>,
    /// The configuration was asked for (of every account or of some); the
    /// rest is kept from the last read ([`ConfigOnDemand`]).
    pub(crate) config_read: bool,
    /// Configuration reads of this server that failed so far, each poll
    /// then answered without configuration, with what was kept.
    pub(crate) config_read_failures: u64,
    /// Seconds since the last read of every account's configuration
    /// began (`None`: none yet).
    pub(crate) config_age: Option<f64>,
    /// The server sends `leader_since` (2.11+): a claim without it is a
    /// Raft leader not yet serving ([`view::Claim::serving`]).
    pub(crate) reports_leader_since: bool,
    /// Each account's storage of each kind, with its limit and forecast.
    pub(crate) account_storage: Vec<accounts::AccountStorage>,
    /// The streams and consumers this server listed for each account,
    /// before the name filters.
    pub(crate) account_assets: Vec<account_assets::AccountAssets>,
    /// Each account's JWT limits known so far, by account name (operator
    /// mode only).
    pub(crate) account_jwts: Vec<(String, account_jwts::JwtLimits)>,
}

/// Which accounts to read: all, or these (by the name the server knows).
#[derive(Clone, Copy)]
enum Which<'s> {
    All,
    Accounts(&'s BTreeSet<String>),
}

/// What one poll reads with: the link, the page size, the filter.
#[derive(Clone, Copy)]
struct Reader<'r, 'l> {
    link: &'r ServerLink<'l>,
    page_size: u32,
    filter: &'r JszFilter,
}

impl Reader<'_, '_> {
    /// Reads `which` accounts, with their configuration if `config`.
    async fn read(self, which: Which<'_>, config: bool) -> Result<JszPoll, PollError> {
        let mut polled = pages::PolledAccounts {
            out: JszPoll::default(),
            filter: self.filter,
        };
        polled.out.now = self.read_into(which, config, &(), &mut polled).await?;
        Ok(polled.out)
    }

    /// Reads `which` accounts, with their configuration if `config`, into
    /// `sink`; returns the server's clock at the first page.
    async fn read_into<S: pages::StreamForm>(
        self,
        which: Which<'_>,
        config: bool,
        with: &S::With,
        sink: &mut (dyn pages::PageSink<S> + Send),
    ) -> Result<Option<f64>, PollError> {
        let pages = pages::Pages {
            account: None,
            size: self.page_size,
            config,
        };
        let Which::Accounts(accounts) = which else {
            return pages::read_all(self.link, pages, self.filter, with, sink).await;
        };
        let mut now = None;
        for account in accounts {
            let one = pages::Pages {
                account: Some(account),
                ..pages
            };
            now = now.or(pages::read_account(self.link, one, with, sink).await?);
        }
        Ok(now)
    }
}

/// The `/jsz` source of one server.
#[derive(Debug, Default)]
pub(crate) struct JszSource {
    page_size: u32,
    filter: JszFilter,
    config: ConfigOnDemand,
    /// The growth of each account's storage, between polls.
    fill: accounts::FillRates,
    /// The accounts' JWT limits, read beside the scrapes.
    jwts: account_jwts::AccountJwts,
}

impl JszSource {
    /// Reads `page_size` accounts per request, keeps what `filter` keeps,
    /// and reads the configuration as `config` says; measures the accounts'
    /// storage growth over `fill_span`.
    pub(crate) fn new(
        page_size: u32,
        filter: JszFilter,
        config: ConfigOnDemand,
        fill_span: std::time::Duration,
    ) -> JszSource {
        let jwts = account_jwts::AccountJwts::new(config.interval, config.beside_timeout());
        JszSource {
            page_size,
            filter,
            config,
            fill: accounts::FillRates::new(fill_span),
            jwts,
        }
    }
}

impl MonitoringSource for JszSource {
    type Reply = JszPoll;
    const HELP: &'static str = "`/jsz`: JetStream streams and consumers (leader's view)";
    const NATS_OPTIONS: &'static [NatsOption] = &[
        NatsOption::flag("accounts"),
        NatsOption::flag("streams"),
        NatsOption::flag("consumers").named("consumer"),
        NatsOption::flag("config"),
        NatsOption::number("offset"),
        NatsOption::number("limit"),
        NatsOption::text("acc").named("account"),
    ];

    fn source(&self) -> Source {
        Source::Jsz
    }

    async fn poll<'a>(&'a self, link: &'a ServerLink<'a>) -> Result<JszPoll, PollError> {
        let mut polled = self.config.poll(link, self.page_size, &self.filter).await?;
        polled.account_jwts = self.jwts.poll(link, &polled.accounts);
        Ok(polled)
    }

    fn absorb(&self, mut jsz: JszPoll, snap: &mut TargetSnapshot) {
        jsz.account_storage = self.fill.update(&jsz.accounts, jsz.now);
        snap.jsz = Some(jsz);
    }

    fn reading_beside(&self) -> bool {
        self.config.reading_beside() || self.jwts.reading()
    }

    /// `paused` is sent only when true: on a server known to report pausing
    /// its absence means "not paused"; on older or unknown ones it stays absent.
    fn finish(&self, snap: &mut TargetSnapshot) {
        let version = snap.server_version.as_deref();
        if let Some(jsz) = snap.jsz.as_mut() {
            jsz.reports_leader_since = version.is_some_and(reports_leader_since);
        }
        let reports = version.is_some_and(reports_pausing);
        if let (true, Some(jsz)) = (reports, snap.jsz.as_mut()) {
            for a in &mut jsz.accounts {
                for s in &mut a.stream_detail {
                    for c in &mut s.consumer_detail {
                        c.paused.get_or_insert(false);
                    }
                }
            }
        }
    }
}

/// Whether a server of this version (`/varz` `version`, as `2.11.0` or
/// `2.12.0-beta.1`) reports consumer pausing: 2.11 and later.
pub fn reports_pausing(version: &str) -> bool {
    super::version_at_least(version, (2, 11, 0))
}

/// Whether a server of this version sends a group leader's `leader_since`:
/// 2.11 and later.
pub(crate) fn reports_leader_since(version: &str) -> bool {
    super::version_at_least(version, (2, 11, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pausing_is_reported_from_2_11_on() {
        for (v, want) in [
            ("2.9.10", false),
            ("2.10.26", false),
            ("2.11.0", true),
            ("2.12.0-beta.1", true),
            ("3.0.0", true),
            ("", false),
            ("garbage", false),
        ] {
            assert_eq!(reports_pausing(v), want, "{v}");
        }
    }
}
