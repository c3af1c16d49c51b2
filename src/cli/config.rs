//! The exporter's configuration: command-line flags, each with an environment
//! variable, parsed once in `main`.

use std::time::Duration;

use clap::Parser;
use url::Url;

use crate::flags::byte_size::parse_byte_size;
use crate::flags::duration::parse_duration;
use crate::flags::listen_address::ListenAddress;

use crate::sources::Source;

/// Prometheus exporter that counts where NATS loses messages.
///
/// It polls nats-server monitoring endpoints on every scrape and serves the
/// result at /metrics.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "nats-delivery-exporter",
    version = concat!(
        env!("CARGO_PKG_VERSION"),
        " (revision ",
        env!("NATS_DELIVERY_REVISION"),
        ", rustc ",
        env!("NATS_DELIVERY_RUSTC_VERSION"),
        ")"
    ),
    about,
    long_about = None
)]
pub struct Config {
    /// nats-server monitoring URL (http or https), repeatable; one per server to watch.
    #[arg(
        long = "monitor-url",
        env = "NATS_DELIVERY_MONITOR_URL",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8222",
        value_parser = crate::flags::values::monitor_url
    )]
    pub monitor_urls: Vec<Url>,

    /// Poll every server of the cluster or supercluster through one
    /// system-account NATS connection (`--system-account`, `--nats-servers`)
    /// instead of `--monitor-url`s: a survey finds the servers on every
    /// scrape, and each is asked for its sources over NATS. Servers joined
    /// by routes and gateways all answer; a leaf node server answers only
    /// when one of its leaf connections binds the system account (a remote
    /// with the system account's credentials and `account: <system account>`).
    #[arg(long, env = "NATS_DELIVERY_SYSTEM_ACCOUNT_POLLING")]
    pub system_account_polling: bool,

    /// Servers each system-account survey waits for before it ends; 0
    /// waits for every server seen since start (a server seen once and
    /// silent now is reported down, never forgotten).
    #[arg(long, env = "NATS_DELIVERY_SYSTEM_EXPECTED_SERVERS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub(crate) system_expected_servers: u32,

    /// A system-account survey ends this long after the last reply, when
    /// not every expected server has answered (within `--timeout` anyway;
    /// before the first reply it waits up to `--timeout`).
    #[arg(long, env = "NATS_DELIVERY_SYSTEM_SURVEY_GAP", default_value = "1s", value_parser = parse_duration)]
    pub(crate) system_survey_gap: Duration,

    /// Filters of the system-account survey, as the servers apply them: a
    /// server answers only when its name contains `--system-server-name`,
    /// its cluster's name contains `--system-cluster`, it has every tag of
    /// `--system-tags` and its JetStream domain is `--system-domain`.
    #[command(flatten)]
    pub(crate) system_filter: crate::system::poll::filter::SurveyFilter,

    /// Addresses the exporter's HTTP server listens on (/metrics, /healthz,
    /// /): repeatable or comma-separated, each served alike. `:PORT` is
    /// every address, IPv6 and IPv4 (IPv4 alone on a machine without
    /// IPv6); `IP:PORT` that address (`[::]:PORT` takes IPv4 too).
    #[arg(
        long = "web.listen-address",
        visible_alias = "listen",
        env = "NATS_DELIVERY_LISTEN",
        value_delimiter = ',',
        default_value = ":7778"
    )]
    pub listen: Vec<ListenAddress>,

    /// Path under which the metrics are served.
    #[arg(long = "web.telemetry-path", env = "NATS_DELIVERY_WEB_TELEMETRY_PATH", default_value = "/metrics", value_parser = crate::flags::values::telemetry_path)]
    pub telemetry_path: String,

    /// Time allowed for each monitoring request, reply included (e.g. 500ms,
    /// 5s; a bare number means seconds).
    #[arg(long, env = "NATS_DELIVERY_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,

    /// Largest monitoring reply accepted (e.g. 256MiB, 100MB); a larger one,
    /// announced or counted, leaves its source down with kind="too_large".
    #[arg(long, env = "NATS_DELIVERY_MAX_REPLY_SIZE", default_value = "256MiB", value_parser = parse_byte_size)]
    pub(crate) max_reply_size: usize,

    /// Most memory the replies of one server may keep in one poll (e.g.
    /// 88MiB), counted as they are parsed: the values kept (a consumer with
    /// what the exporter holds for it, about 700 bytes), never whitespace or
    /// fields the exporter does not use; a reply that would keep more leaves
    /// its source down with kind="too_large".
    #[arg(long, env = "NATS_DELIVERY_MAX_KEPT_SIZE", default_value = "88MiB", value_parser = parse_byte_size)]
    pub(crate) max_kept_size: usize,

    /// A /metrics answer whose reader takes nothing for this long is cut off.
    #[arg(long, env = "NATS_DELIVERY_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub write_timeout: Duration,

    /// After SIGTERM or Ctrl-C, time given to answers in flight (and to the
    /// listeners' last acknowledgements) before the exporter exits anyway.
    #[arg(long, env = "NATS_DELIVERY_SHUTDOWN_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// Header, idle and connection bounds of the HTTP server.
    #[command(flatten)]
    pub connections: crate::cli::connection_args::ConnectionArgs,

    /// Web configuration file (node_exporter's format): TLS
    /// (`tls_server_config`) and basic authentication (`basic_auth_users`,
    /// bcrypt hashes) for /metrics and the other pages.
    #[arg(long = "web.config.file", env = "NATS_DELIVERY_WEB_CONFIG_FILE", value_name = "FILE", value_parser = crate::cli::web_config::parse_web_config)]
    pub web_config: Option<crate::cli::web_config::WebConfig>,

    /// Leaves out the exporter's own process metrics (`process_*`), as
    /// node_exporter's flag of that name does; the build info stays.
    #[arg(
        long = "web.disable-exporter-metrics",
        env = "NATS_DELIVERY_WEB_DISABLE_EXPORTER_METRICS"
    )]
    pub disable_exporter_metrics: bool,

    /// PEM file with the CA certificate(s) that signed https monitoring
    /// endpoints, when the system's roots do not cover them.
    #[arg(long, env = "NATS_DELIVERY_MONITOR_TLS_CA", value_name = "FILE", value_parser = crate::flags::values::pem_file)]
    pub(crate) monitor_tls_ca: Option<std::path::PathBuf>,

    /// The sources to poll.
    #[arg(
        long,
        help = crate::sources::SOURCES_HELP,
        env = "NATS_DELIVERY_SOURCES",
        value_delimiter = ',',
        default_value = "varz,connz,jsz,accstatz"
    )]
    pub(crate) sources: Vec<Source>,

    /// How many connections per server to report by pending bytes (the ones closest to being cut).
    #[arg(long, env = "NATS_DELIVERY_CONNZ_TOP", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) connz_top: u32,

    /// Accounts per /jsz request; more accounts are read in pages of this size.
    #[arg(long, env = "NATS_DELIVERY_JSZ_PAGE_SIZE", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) jsz_page_size: u32,

    /// Span of consumer history behind `nats_delivery_consumer_status` (e.g.
    /// 5m); a consumer is `unknown` until the exporter has watched it this
    /// long. `0s` turns consumer status and lag off (nothing is kept).
    #[arg(long, env = "NATS_DELIVERY_CONSUMER_STATUS_WINDOW", default_value = "5m", value_parser = crate::flags::duration::parse_window)]
    pub(crate) consumer_status_window: Duration,

    /// Message timestamps read over NATS per scrape, for the consumers that
    /// lag most, to make their lag exact rather than estimated; 0 = never read.
    #[arg(long, env = "NATS_DELIVERY_CONSUMER_TIMESTAMP_READS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub(crate) consumer_timestamp_reads: u32,

    /// Streams whose lost data (messages the server lost from its store) is
    /// read per scrape over NATS, in turn, from the streams of the
    /// `--nats-servers` connection's account; 0 = never read. Each read
    /// lists every deleted sequence of its stream.
    #[arg(long, env = "NATS_DELIVERY_STREAM_LOST_READS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub stream_lost_reads: u32,

    /// Stream and consumer metadata keys (2.10+) copied as labels onto
    /// nats_delivery_stream_metadata_info and nats_delivery_consumer_metadata_info
    /// (a key becomes `metadata_` and the key lower-cased, other characters
    /// than a-z, 0-9 and _ made _; values cut at 128 bytes), e.g. team,owner.
    #[arg(
        long,
        env = "NATS_DELIVERY_JSZ_METADATA_LABELS",
        value_delimiter = ',',
        value_name = "KEYS"
    )]
    pub jsz_metadata_labels: Vec<String>,

    /// Most distinct (account, client name) pairs kept as label values for cut
    /// connections; more are counted under client_name="__overflow__".
    #[arg(long, env = "NATS_DELIVERY_MAX_CLIENT_NAMES", default_value_t = 1000)]
    pub(crate) max_client_names: usize,

    /// Re-export the totals that applications using nats-delivery-metrics
    /// publish over NATS (their "one scrape target" reports).
    #[arg(long, env = "NATS_DELIVERY_CLIENT_REPORTS")]
    pub client_reports: bool,

    /// Subject prefix of the application reports: each application reports on
    /// PREFIX.CLIENT, and a report whose client is not that last token is
    /// rejected (and counted).
    #[arg(
        long,
        env = "NATS_DELIVERY_CLIENT_REPORTS_SUBJECT",
        default_value = "nats_delivery.reports"
    )]
    pub client_reports_subject: String,

    /// An application that has not reported for this long is forgotten (its series end).
    #[arg(long, env = "NATS_DELIVERY_CLIENT_REPORTS_EXPIRY", default_value = "60s", value_parser = parse_duration)]
    pub client_reports_expiry: Duration,

    /// Most application instances whose reports are kept under their own
    /// labels; reports of further instances are summed under
    /// "__overflow__" (and counted), up to 16 times this many instances (at most 65,536);
    /// past that they are rejected (and counted) until one expires.
    #[arg(long, env = "NATS_DELIVERY_CLIENT_REPORTS_MAX_INSTANCES", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub client_reports_max_instances: u32,

    /// Most instances of one client, kept and summed together; reports of its
    /// further instances are rejected (and counted) until one expires.
    #[arg(long, env = "NATS_DELIVERY_CLIENT_REPORTS_MAX_INSTANCES_PER_CLIENT", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub client_reports_max_instances_per_client: u32,

    /// Most series the kept application instances may make a scrape carry (24 an
    /// instance, 7 a subscription name, 6 a consumer); past it new names and instances
    /// are summed under "__overflow__" (and counted).
    #[arg(long, env = "NATS_DELIVERY_CLIENT_REPORTS_MAX_SERIES", default_value_t = 25_000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    pub client_reports_max_series: u32,

    /// Subscription names, and (stream, consumer) pairs, kept per instance;
    /// more are summed under "__overflow__".
    #[arg(long, env = "NATS_DELIVERY_CLIENT_REPORTS_MAX_ENTRIES", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub client_reports_max_entries: u32,

    /// Largest report body in bytes; larger ones are rejected unread.
    #[arg(long, env = "NATS_DELIVERY_CLIENT_REPORTS_MAX_BYTES", default_value_t = 65_536, value_parser = clap::value_parser!(u32).range(1024..=67_108_864))]
    pub client_reports_max_bytes: u32,

    /// Which accounts, streams and consumers are exported, and ephemeral
    /// consumers folded.
    #[command(flatten)]
    pub(crate) cardinality: crate::jetstream::cardinality::CardinalityArgs,

    /// What the servers are asked for, and how often.
    #[command(flatten)]
    pub(crate) server_cost: crate::sources::server_cost::ServerCostArgs,

    /// NATS connection of the advisory and system-event listeners.
    #[command(flatten)]
    pub nats: crate::nats::NatsArgs,

    /// JetStream advisories, dead-letter capture and system events.
    #[command(flatten)]
    pub advisories: crate::listeners::advisories::AdvisoryArgs,

    /// The end-to-end canary.
    #[command(flatten)]
    pub canary: crate::listeners::canary::CanaryArgs,

    /// Log level and format.
    #[command(flatten)]
    pub log: crate::cli::logging::LogArgs,
}

impl Config {
    /// Checks what single flags cannot: the same monitoring URL twice (its
    /// series would be emitted twice), and polling through the system
    /// account without its credentials or beside monitoring URLs that would
    /// not be read (`monitor_urls_given`: `--monitor-url` was given, not
    /// defaulted). Returns the flag and the reason.
    pub fn validate(&self, monitor_urls_given: bool) -> Result<(), (&'static str, String)> {
        if self.system_account_polling {
            if self.advisories.system_account.is_none() {
                return Err((
                    "--system-account-polling",
                    "needs the system account's credentials in --system-account".into(),
                ));
            }
            if monitor_urls_given {
                return Err((
                    "--monitor-url",
                    "not read with --system-account-polling: the servers are found through the system account".into(),
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for url in &self.monitor_urls {
            let key = (
                url.host_str().map(str::to_string),
                url.port_or_known_default(),
                url.path().trim_end_matches('/').to_string(),
            );
            if !seen.insert(key) {
                return Err((
                    "--monitor-url",
                    format!("'{}' is given twice", crate::redact::redacted(url)),
                ));
            }
        }
        Ok(())
    }

    /// Whether anything reads message data over the `--nats-servers`
    /// connection (message timestamps, a stream's lost data). With neither,
    /// that connection is never opened: with only system-account
    /// credentials it would be an anonymous one.
    pub fn reads_message_data(&self) -> bool {
        self.consumer_timestamp_reads > 0 || self.stream_lost_reads > 0
    }

    /// Whether `source` is to be polled.
    pub(crate) fn polls(&self, source: Source) -> bool {
        self.sources.contains(&source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = Config::try_parse_from(["x"]).unwrap();
        assert_eq!(c.monitor_urls[0].as_str(), "http://127.0.0.1:8222/");
        assert_eq!(c.listen, [ListenAddress::AnyAddress(7778)]);
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(
            c.sources,
            [Source::Varz, Source::Connz, Source::Jsz, Source::Accstatz]
        );
        assert_eq!(c.consumer_status_window, Duration::from_secs(300));
        assert_eq!(c.consumer_timestamp_reads, 50);
        assert_eq!(c.max_kept_size, 88 << 20);
        assert_eq!(
            c.cardinality.consumer_series(),
            crate::jetstream::cardinality::series::ConsumerSeries::default()
        );
    }

    #[test]
    fn every_consumer_series_and_metric_asked_for() {
        let c = Config::try_parse_from([
            "x",
            "--consumer-status-series",
            "all",
            "--consumer-opt-in-metrics",
            "all",
        ])
        .unwrap();
        assert_eq!(
            c.cardinality.consumer_series(),
            crate::jetstream::cardinality::series::ConsumerSeries::all()
        );
        assert!(!c.cardinality.keep_ephemeral_consumers);
        assert!(c.cardinality.filter().server_account().is_none());
    }

    #[test]
    fn include_filters() {
        let c = Config::try_parse_from([
            "x",
            "--include-account",
            "A",
            "--include-stream",
            "S1",
            "--include-stream",
            "S2",
        ])
        .unwrap();
        let filter = c.cardinality.filter();
        assert_eq!(filter.server_account(), Some("A"));
        assert!(filter.streams.keeps("S2") && !filter.streams.keeps("S3"));
    }

    #[test]
    fn status_window_zero_with_or_without_unit() {
        for (text, secs) in [("0s", 0), ("0", 0), ("0m", 0), ("3s", 3)] {
            let c = Config::try_parse_from(["x", "--consumer-status-window", text]).unwrap();
            assert_eq!(
                c.consumer_status_window,
                Duration::from_secs(secs),
                "{text}"
            );
        }
    }

    #[test]
    fn several_monitor_urls_and_one_source() {
        let c = Config::try_parse_from([
            "x",
            "--monitor-url",
            "http://a:1,https://b:2/base",
            "--sources",
            "jsz",
        ])
        .unwrap();
        assert_eq!(c.monitor_urls.len(), 2);
        assert!(!c.polls(Source::Varz) && c.polls(Source::Jsz));
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            vec!["x", "--monitor-url", "nats://a:4222"],
            vec!["x", "--monitor-url", "http://"],
            vec!["x", "--timeout", "0s"],
            vec!["x", "--sources", "leafz"],
            vec!["x", "--listen", "nowhere"],
            vec!["x", "--connz-top", "0"],
            vec!["x", "--consumer-status-window", "-1s"],
            vec!["x", "--consumer-status-window", "0x"],
            vec!["x", "--consumer-timestamp-reads", "-1"],
            vec!["x", "--include-stream", "("],
            vec!["x", "--exclude-account", "a{2,1}"],
            vec!["x", "--consumer-status-series", "none"],
            vec![
                "x",
                "--consumer-opt-in-metrics",
                "nats_delivery_consumer_status",
            ],
            vec!["x", "--max-kept-size", "0"],
            vec!["x", "--canary-interval", "1ms"],
            vec!["x", "--canary-deadline", "50ms"],
            vec!["x", "--canary-subject", "a.*"],
            vec!["x", "--canary-subject", "a..b"],
            vec!["x", "--canary-stream", "a.b"],
            vec!["x", "--canary-replicas", "6"],
        ] {
            assert!(
                Config::try_parse_from(&bad).is_err(),
                "{bad:?} was accepted"
            );
        }
    }
}
