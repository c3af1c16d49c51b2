//! nats-delivery-exporter: Prometheus metrics for where NATS loses messages.
//!
//! The binary polls nats-server monitoring endpoints on every scrape
//! ([`Exporter`]), one module per endpoint under `sources/`, and serves the
//! result over HTTP ([`router`]). ARCHITECTURE.md gives the layers and which
//! may use which.
//!
//! This library is the binary's: its modules are private, and the items
//! below are the ones the binary, the tests, the benchmarks, the fuzz
//! targets and the examples use, each under one path, and the types their
//! signatures and fields show (`unnameable_types`). `unreachable_pub` keeps
//! every other item `pub(crate)` or narrower, so the compiler finds what
//! nothing uses.
#![deny(missing_docs)]
#![warn(unreachable_pub, unnameable_types)]

mod cli;
mod flags;
mod http;
mod jetstream;
mod listeners;
mod lock;
mod nats;
mod poll_error;
mod redact;
mod scrape;
mod sources;
mod system;
mod text;

// Start-up and serving, in main.rs's order: the flags, logging, the
// listening sockets, the scrape engine and its collectors, the routes.
// The tests build and serve an exporter the same way.
pub use cli::config::Config;
pub use cli::logging::init as init_logging;
pub use cli::web_config::WebConfig;
pub use http::connection::ConnectionLimits;
pub use http::listen::bind as bind_listener;
pub use http::routes::{router, router_at, with_web_config};
pub use http::serve::{serve, Stopped};
pub use redact::redacted;
pub use scrape::exporter::{Exporter, ExporterBuilder};
pub use scrape::process_metrics::{BuildInfo, ProcessCollector};
pub use scrape::settings::ScrapeSettings;
pub use text::Format;

// Connections to NATS and what runs over them beside the scrapes: the
// advisory and client-report listeners, message timestamp and lost-data
// reads, polling and events through the system account.
pub use jetstream::message_timestamps::fetch::is_2_10_or_later;
pub use jetstream::message_timestamps::{
    connect as connect_message_timestamps, MessageTimestamps, ReadResult, TimestampReply,
    TimestampRequest,
};
pub use jetstream::stream_lost::{LostRecord, StreamLostReader};
pub use listeners::advisories::durable::{ensure_stream, DurableError, StreamFit};
pub use listeners::advisories::metrics::AccountLabels;
pub use listeners::advisories::store::TotalsStore;
pub use listeners::advisories::totals::Totals;
pub use listeners::advisories::{AccountListener, AdvisoryArgs, AdvisoryMetrics, Listeners};
pub use listeners::canary::{start_canary, CanaryArgs};
pub use listeners::client_reports::{
    connect as connect_client_reports, run_client_reports, ClientReports, ReportLimits,
};
pub use nats::{cause_layer, server_account_name, warn_on_account_mismatch, Auth, NatsArgs};
pub use system::events::{run as run_system_events, DisconnectCounter, SystemEventMetrics};
pub use system::poll::connect as connect_system_polling;
pub use system::survey::{Survey, SurveyOutcome, Waiting};

// Readers of what servers send, called without a server by the fuzz
// targets and the mutation tests: monitoring replies, advisories, survey
// replies, STREAM.INFO replies, and the label escaping of the text format.
pub use jetstream::stream_lost::{parse_info as parse_stream_info, Found};
pub use listeners::advisories::parse::{
    parse as parse_advisory, parse_on as parse_advisory_on, SUBJECTS as ADVISORY_SUBJECTS,
};
pub use sources::accstatz::Accstatz;
pub use sources::connz::Connz;
pub use sources::gatewayz::Gatewayz;
pub use sources::healthz::{Healthz, PROBLEM_KINDS as HEALTHZ_PROBLEM_KINDS};
pub use sources::jsz::split::{parse as parse_jsz_split, parse_whole as parse_jsz_whole};
pub use sources::jsz::{reports_pausing, Jsz};
pub use sources::routez::{RoutePending, Routez};
pub use sources::varz::Varz;
pub use system::survey::parse_reply as parse_survey_reply;
pub use text::families::gauge_family;

// The pieces the benchmarks time on their own: reading a /jsz reply
// (fetched, bounded, parsed) and consumer health's update; the source
// names, which the tests of every source iterate over.
pub use jetstream::consumer_health::{ConsumerHealth, Replies};
pub use sources::jsz::{ConsumerInfo, ExternalOrigin, OriginInfo, StreamDetail};
pub use sources::kept::KeptBudget;
pub use sources::parse_error::ParseError;
pub use sources::{Fetcher, Source, SourceSettings};

// The types the items above show in their signatures and public fields,
// so that every type a caller can hold it can also name: errors, settings,
// and the parts of the parsed replies.
pub use cli::connection_args::ConnectionArgs;
pub use cli::logging::LogArgs;
pub use flags::listen_address::ListenAddress;
pub use jetstream::cardinality::series::ConsumerSeries;
pub use jetstream::consumer_health::ConsumerHealthRow;
pub use jetstream::message_timestamps::fetch::ReadError;
pub use jetstream::seq_ranges::SeqRanges;
pub use listeners::advisories::parse::{Advisory, ParseError as AdvisoryParseError};
pub use listeners::advisories::store::Stored;
pub use listeners::advisories::totals::EventId;
pub use listeners::client_reports::ReportError;
pub use nats::retry::ListenerError;
pub use nats::{ConnectionError, Secret};
pub use poll_error::PollError;
pub use scrape::exporter::ExporterBuildError;
pub use scrape::exposition::ScrapeAborted;
pub use sources::gatewayz::GatewayPending;
pub use sources::jsz::de::Kept;
pub use sources::jsz::{
    metadata_label_name, name_metadata_labels, ConsumerAt, CountingKind, JszFilter, RemovalCheck,
    StreamAt, LAG_THRESHOLD_KEY, MAX_LABEL_KEYS, MAX_LABEL_VALUE_BYTES,
};
pub use sources::jsz::{
    AccountDetail, ClusterInfo, ConsumerConfig, PriorityGroup, SequenceInfo, StreamConfig,
    StreamContents,
};
pub use sources::parse_error::Refused;
pub use sources::routez::RouteInfo;
pub use system::poll::{PollSettings, SystemPolling, SystemPollingSetupError};
pub use system::survey::{Answer, ReplyError, ServerError, ServerInfo, SurveyError};
