//! The advisory, dead-letter and system-event listener flags.

use std::time::Duration;

use super::live;
use crate::flags::duration::parse_duration;
use crate::nats::Auth;

/// Advisory listener flags.
#[derive(clap::Args, Clone, Debug)]
pub struct AdvisoryArgs {
    /// Listen to JetStream advisories (max deliveries, terminated, NAK) in every configured account.
    #[arg(
        id = "advisories",
        long = "advisories",
        env = "NATS_DELIVERY_ADVISORIES",
        default_value_t = false
    )]
    pub enabled: bool,

    /// Durable mode (recommended in production): the stream that captures the advisories
    /// while the exporter is away. Created if missing; used as-is if it captures the
    /// advisory subjects. Without it the exporter listens live and misses advisories
    /// sent while it is down.
    #[arg(
        id = "advisories_stream",
        value_name = "STREAM",
        long = "advisories-stream",
        env = "NATS_DELIVERY_ADVISORIES_STREAM",
        value_parser = crate::flags::values::nats_name
    )]
    pub stream: Option<String>,

    /// Maximum age of advisories kept in a stream the exporter creates (e.g. 90s, 30m, 12h, 7d).
    #[arg(
        id = "advisories_stream_max_age",
        value_name = "DURATION",
        long = "advisories-stream-max-age",
        env = "NATS_DELIVERY_ADVISORIES_STREAM_MAX_AGE",
        default_value = "7d",
        value_parser = parse_duration
    )]
    pub(crate) stream_max_age: Duration,

    /// Name of the durable pull consumer on the advisory stream; replicas sharing it split the work.
    #[arg(
        id = "advisories_consumer",
        value_name = "NAME",
        long = "advisories-consumer",
        env = "NATS_DELIVERY_ADVISORIES_CONSUMER",
        default_value = "nats-delivery-exporter",
        value_parser = crate::flags::values::nats_name
    )]
    pub(crate) consumer: String,

    /// How long the server waits for the exporter to acknowledge an advisory before redelivering it.
    #[arg(
        id = "advisories_ack_wait",
        value_name = "DURATION",
        long = "advisories-ack-wait",
        env = "NATS_DELIVERY_ADVISORIES_ACK_WAIT",
        default_value = "30s",
        value_parser = parse_duration
    )]
    pub(crate) ack_wait: Duration,

    /// Durable mode: the key-value bucket that stores the totals; an advisory is acknowledged
    /// only after its count is stored there. Replicas sharing the consumer share the bucket.
    /// Default: the consumer name followed by "-totals".
    #[arg(
        id = "advisories_totals_bucket",
        value_name = "BUCKET",
        long = "advisories-totals-bucket",
        env = "NATS_DELIVERY_ADVISORIES_TOTALS_BUCKET",
        value_parser = crate::flags::values::bucket_name
    )]
    pub(crate) totals_bucket: Option<String>,

    /// Durable mode: replicas of the advisory stream, consumer and totals bucket the exporter
    /// creates (3 in a cluster, so a server can fail without stopping the count).
    #[arg(
        id = "advisories_replicas",
        value_name = "N",
        long = "advisories-replicas",
        env = "NATS_DELIVERY_ADVISORIES_REPLICAS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u8).range(1..=5)
    )]
    pub(crate) replicas: u8,

    /// Cap on distinct (stream, consumer) series per account; advisories of further series are
    /// counted under stream and consumer "__overflow__".
    #[arg(
        id = "advisories_max_series",
        value_name = "N",
        long = "advisories-max-series",
        env = "NATS_DELIVERY_ADVISORIES_MAX_SERIES",
        default_value_t = 10_000,
        value_parser = crate::flags::values::at_least_one
    )]
    pub(crate) max_series: usize,

    /// Live mode: how many recent advisories are remembered to ignore re-sent ones (durable
    /// mode remembers the last 16 events of each series in its totals bucket).
    #[arg(
        id = "advisories_dedup_window",
        value_name = "EVENTS",
        long = "advisories-dedup-window",
        env = "NATS_DELIVERY_ADVISORIES_DEDUP_WINDOW",
        default_value_t = 100_000
    )]
    pub(crate) dedup_window: usize,

    /// Live mode: advisories received and not yet counted that the listener may hold before
    /// it drops (counted in nats_delivery_exporter_dropped_messages_total).
    #[arg(
        id = "advisories_buffer",
        value_name = "MESSAGES",
        long = "advisories-buffer",
        env = "NATS_DELIVERY_ADVISORIES_BUFFER",
        default_value_t = live::SUBSCRIPTION_CAPACITY,
        value_parser = crate::flags::values::at_least_one
    )]
    pub(crate) buffer: usize,

    /// Live mode: bytes of advisories received and not yet counted; past it (or past
    /// --advisories-buffer messages) an advisory is dropped (counted in
    /// nats_delivery_exporter_dropped_messages_total).
    #[arg(
        id = "advisories_buffer_bytes",
        value_name = "BYTES",
        long = "advisories-buffer-bytes",
        env = "NATS_DELIVERY_ADVISORIES_BUFFER_BYTES",
        default_value = "64MiB",
        value_parser = crate::flags::byte_size::parse_byte_size
    )]
    pub(crate) buffer_bytes: usize,

    /// Copy each dead message (max deliveries) into this stream. Created if missing.
    #[arg(
        id = "dead_letter_stream",
        value_name = "STREAM",
        long = "dead-letter-stream",
        env = "NATS_DELIVERY_DEAD_LETTER_STREAM",
        value_parser = crate::flags::values::nats_name
    )]
    pub dead_letter_stream: Option<String>,

    /// Subject prefix of dead-letter copies: `<prefix>.<stream>.<consumer>`.
    #[arg(
        id = "dead_letter_subject_prefix",
        value_name = "PREFIX",
        long = "dead-letter-subject-prefix",
        env = "NATS_DELIVERY_DEAD_LETTER_SUBJECT_PREFIX",
        default_value = "dead_letter"
    )]
    pub(crate) dead_letter_subject_prefix: String,

    /// Also copy terminated messages into the dead-letter stream.
    #[arg(
        id = "dead_letter_terminated",
        long = "dead-letter-terminated",
        env = "NATS_DELIVERY_DEAD_LETTER_TERMINATED",
        default_value_t = false
    )]
    pub(crate) dead_letter_terminated: bool,

    /// System-account credentials (creds:FILE, nkey:FILE, user:USER:PASSWORD or token:TOKEN):
    /// count slow-consumer disconnects by client name from $SYS.ACCOUNT.*.DISCONNECT.
    #[arg(
        id = "system_account",
        value_name = "CREDENTIALS",
        long = "system-account",
        env = "NATS_DELIVERY_SYSTEM_ACCOUNT",
        value_parser = crate::nats::NoEchoParser::<Auth>::new(),
        hide_env_values = true
    )]
    pub(crate) system_account: Option<Auth>,

    /// Cap on distinct client names in slow-consumer disconnect counts; further names count as "__overflow__".
    #[arg(
        id = "system_events_max_client_names",
        value_name = "N",
        long = "system-events-max-client-names",
        env = "NATS_DELIVERY_SYSTEM_EVENTS_MAX_CLIENT_NAMES",
        default_value_t = 1000
    )]
    pub(crate) max_client_names: usize,
}

impl AdvisoryArgs {
    /// The totals bucket of durable mode.
    pub(crate) fn totals_bucket(&self) -> String {
        self.totals_bucket
            .clone()
            .unwrap_or_else(|| format!("{}-totals", self.consumer))
    }

    /// Builds the flags from flag-style arguments (no program name); for
    /// tests and embedding. Environment variables apply.
    pub fn from_flags<I, T>(flags: I) -> Result<AdvisoryArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        crate::flags::args::parse_args(flags)
    }
}
