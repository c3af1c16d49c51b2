//! One module per monitoring endpoint. Each holds the serde types for the
//! fields it uses (and only those: a new server version must not break
//! parsing, and a field an older server lacks stays `None`, never 0) and the
//! code that turns one reply into metric rows.

pub(crate) mod accstatz;
pub(crate) mod connz;
mod fetch;
pub(crate) mod gatewayz;
pub(crate) mod healthz;
pub(crate) mod jsz;
pub(crate) mod kept;
mod link;
mod link_pending;
pub(crate) mod parse_error;
pub(crate) mod routez;
pub(crate) mod server_cost;
mod shape;
pub(crate) mod varz;

pub use fetch::Fetcher;
pub(crate) use link::{DetachedLink, ServerLink, SystemLink};
pub(crate) use shape::{Absorb, AnySource, MonitoringSource, NatsOption};

use std::collections::BTreeMap;

use prometheus_client::encoding::DescriptorEncoder;
use url::Url;

use accstatz::Accstatz;
use connz::{ClosedKey, TopPending};
use gatewayz::GatewayPending;
use healthz::Healthz;
use jsz::JszPoll;
use routez::RoutePending;
use varz::Varz;

/// The table of sources: the `Source` enum, its names, [`Source::ALL`], the
/// `--sources` help and each source's system-account options all come from
/// one line per source. A source's name is its endpoint's path; its type's
/// [`MonitoringSource`] implementation gives its help line and options, so a
/// line whose type lacks them does not compile.
macro_rules! source_table {
    ($($variant:ident $name:literal $kind:ty,
        made by |$settings:ident| $make:expr,
        encoded by $encode:path;)+) => {
        /// A monitoring endpoint family the exporter polls.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Source {
            $(#[doc = concat!("`/", $name, "`, polled by `", stringify!($kind), "`.")] $variant,)+
        }

        impl Source {
            /// Every source, in the order they are reported.
            pub const ALL: [Source; [$($name),+].len()] = [$(Source::$variant),+];

            /// The `source` label value, its name in `--sources` and its endpoint.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Source::$variant => $name,)+
                }
            }

            /// Its line among the `--sources` values of `--help`.
            pub(crate) fn help(self) -> &'static str {
                match self {
                    $(Source::$variant => <$kind as MonitoringSource>::HELP,)+
                }
            }

            /// Its HTTP query options and their system-account form.
            pub(crate) fn nats_options(self) -> &'static [NatsOption] {
                match self {
                    $(Source::$variant => <$kind as MonitoringSource>::NATS_OPTIONS,)+
                }
            }
        }

        /// The enabled sources of one server, each with its own memory of
        /// that server, in the table's order.
        pub(crate) fn per_target(settings: &SourceSettings) -> Vec<Box<dyn AnySource>> {
            let mut sources: Vec<Box<dyn AnySource>> = Vec::new();
            $(if settings.enabled.contains(&Source::$variant) {
                let $settings = settings;
                let source: $kind = $make;
                sources.push(Box::new(source));
            })+
            sources
        }

        /// Writes every source's families for the servers of one scrape,
        /// in the table's order.
        pub(crate) fn encode_sources(
            enc: &mut DescriptorEncoder,
            targets: &[TargetSnapshot],
        ) -> std::fmt::Result {
            $($encode(enc, targets)?;)+
            Ok(())
        }

        /// The `--sources` help: every name, from the table (`--help` lists
        /// each with its [`Source::help`]).
        pub(crate) const SOURCES_HELP: &str = concat!(
            "Sources to poll, comma-separated, each one of:",
            $(" ", $name,)+
        );
    };
}

source_table! {
    Varz "varz" varz::VarzSource,
        made by |_s| varz::VarzSource,
        encoded by varz::encode_targets;
    Connz "connz" connz::ConnzSource,
        made by |s| connz::ConnzSource::new(s.connz_top, s.max_client_names),
        encoded by connz::encode_targets;
    Jsz "jsz" jsz::JszSource,
        made by |s| jsz::JszSource::new(
            s.jsz_page_size, s.jsz_filter.clone(), s.jsz_config(), s.jsz_fill_span),
        encoded by jsz::accounts::encode_targets;
    Accstatz "accstatz" accstatz::AccstatzSource,
        made by |_s| accstatz::AccstatzSource,
        encoded by accstatz::encode_targets;
    Routez "routez" routez::RoutezSource,
        made by |_s| routez::RoutezSource,
        encoded by routez::encode_targets;
    Gatewayz "gatewayz" gatewayz::GatewayzSource,
        made by |_s| gatewayz::GatewayzSource,
        encoded by gatewayz::encode_targets;
    Healthz "healthz" healthz::HealthzSource,
        made by |_s| healthz::HealthzSource,
        encoded by healthz::encode_targets;
}

/// The `--sources` values as clap reads and lists them, from the table.
impl clap::ValueEnum for Source {
    fn value_variants<'a>() -> &'a [Self] {
        &Source::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()).help(self.help()))
    }
}

/// Each server's reply from one source, with its `server` label, for the
/// servers whose poll of that source succeeded.
fn answered<'a, T>(
    targets: &'a [TargetSnapshot],
    reply: impl Fn(&'a TargetSnapshot) -> Option<&'a T>,
) -> Vec<(&'a str, &'a T)> {
    let each = |t: &'a TargetSnapshot| reply(t).map(|r| (t.server.as_str(), r));
    targets.iter().filter_map(each).collect()
}

/// How one poll of one source of one server went.
#[derive(Debug, Clone)]
pub(crate) struct SourceHealth {
    /// Which source.
    pub(crate) source: Source,
    /// Whether this poll succeeded.
    pub(crate) up: bool,
    /// How long the poll took, in seconds.
    pub(crate) duration: f64,
    /// Bytes of the replies the poll received (all pages and requests).
    pub(crate) reply_bytes: u64,
    /// Unix time of the last successful poll, if any.
    pub(crate) last_success: Option<f64>,
    /// Failed polls so far, by error kind.
    pub(crate) errors: BTreeMap<&'static str, u64>,
}

/// One server's data from one scrape. A source that failed is `None`: its
/// values are not shown, never stale ones.
#[derive(Debug, Default)]
pub(crate) struct TargetSnapshot {
    /// The `server` label.
    pub(crate) server: String,
    /// The server's own name, once any /varz poll has told it.
    pub(crate) server_name: Option<String>,
    /// The server's version (`/varz` `version`), once any /varz poll has told it.
    pub(crate) server_version: Option<String>,
    /// `/varz`, when polled successfully.
    pub(crate) varz: Option<Varz>,
    /// Top connections by pending bytes, when polled successfully.
    pub(crate) top_pending: Option<TopPending>,
    /// The server's `max_pending` (this poll's, else the last one known).
    pub(crate) max_pending: Option<i64>,
    /// `/jsz`, when polled successfully.
    pub(crate) jsz: Option<JszPoll>,
    /// `/accstatz`, when polled successfully.
    pub(crate) accstatz: Option<Accstatz>,
    /// Route connections, when `/routez` was polled successfully.
    pub(crate) routes: Option<Vec<RoutePending>>,
    /// Gateway connections, when `/gatewayz` was polled successfully.
    pub(crate) gateways: Option<Vec<GatewayPending>>,
    /// The server's health check, when `/healthz` was polled successfully.
    pub(crate) healthz: Option<Healthz>,
    /// Connections cut as slow consumers, counted so far.
    pub(crate) closed: BTreeMap<ClosedKey, u64>,
    /// One entry per polled source.
    pub(crate) health: Vec<SourceHealth>,
}

/// The settings the sources take from the configuration.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// The sources to poll.
    pub enabled: Vec<Source>,
    /// Connections listed by pending bytes per server.
    pub connz_top: u32,
    /// Distinct (account, client name) pairs kept for cut connections.
    pub max_client_names: usize,
    /// Accounts per /jsz request.
    pub jsz_page_size: u32,
    /// The accounts, streams and consumers /jsz keeps.
    pub jsz_filter: jsz::JszFilter,
    /// Longest time between reads of /jsz's configuration.
    pub jsz_config_interval: std::time::Duration,
    /// The removal count's check, before which the configuration is read.
    pub jsz_removal_check: Option<jsz::RemovalCheck>,
    /// The time a `/jsz` poll has: a configuration read leaves part of it
    /// to a poll without configuration, which answers when that read
    /// fails. `None`: the poller sets the scrape's `timeout`.
    pub jsz_poll_timeout: Option<std::time::Duration>,
    /// The deadline of a configuration read beside the scrapes.
    pub jsz_config_timeout: std::time::Duration,
    /// The shortest span the growth of an account's storage is measured
    /// over, for its forecast of when it is full.
    pub jsz_fill_span: std::time::Duration,
}

impl SourceSettings {
    fn jsz_config(&self) -> jsz::ConfigOnDemand {
        let timeout = self.jsz_poll_timeout.unwrap_or_default();
        jsz::ConfigOnDemand::new(
            self.jsz_config_interval,
            self.jsz_removal_check,
            timeout,
            self.jsz_config_timeout,
        )
    }
}

/// Builds `<base>/<endpoint>?<query>` keeping any base path the operator gave.
pub(crate) fn endpoint_url(base: &Url, endpoint: &str, query: &[(&str, String)]) -> Url {
    let mut url = base.clone();
    let path = format!("{}/{endpoint}", base.path().trim_end_matches('/'));
    url.set_path(&path);
    if !query.is_empty() {
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
    }
    url
}

/// Whether a server of this version (`/varz` `version`, as `2.10.26` or
/// `2.12.0-beta.1`) is at least `least`; a version that does not parse is not.
pub(crate) fn version_at_least(version: &str, least: (u64, u64, u64)) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u64>().ok());
    let mut next = || parts.next().flatten();
    match (next(), next(), next()) {
        (Some(major), Some(minor), Some(patch)) => (major, minor, patch) >= least,
        _ => false,
    }
}

/// Reads an optional RFC 3339 timestamp straight into Unix seconds, without
/// keeping the text: a large /jsz reply holds two per consumer. A timestamp
/// that does not parse is absent, like a missing one.
pub(crate) fn timestamp<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let text: Option<std::borrow::Cow<'de, str>> = serde::Deserialize::deserialize(d)?;
    Ok(text.as_deref().and_then(unix_seconds))
}

/// Parses an RFC 3339 timestamp as the server writes it, into Unix seconds.
pub(crate) fn unix_seconds(text: &str) -> Option<f64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    // The server writes the zero time.Time for "never".
    if t.year() <= 1 {
        return None;
    }
    Some(t.unix_timestamp_nanos() as f64 / 1e9)
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
