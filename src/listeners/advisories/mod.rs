//! JetStream delivery advisories: messages that exhausted `max_deliver`, were
//! terminated (by a client or by stream limits) or NAKed, counted exactly once.
//!
//! Two ways to listen, per account:
//! - live (`live`): a core subscription to the advisory subjects. Advisories
//!   sent while the exporter is down are lost (core NATS is at-most-once).
//! - durable ([`durable`], recommended): a stream captures the advisories and
//!   the exporter reads it with a durable pull consumer, acknowledging each
//!   advisory only after counting it, so nothing is lost across restarts and
//!   replicas sharing the consumer split the work without double counting.
//!
//! Optionally (`dead_letter`) each dead message is copied into a
//! dead-letter stream.

mod api_errors;
mod batch;
mod counting;
mod dead_letter;
pub mod durable;
mod durable_setup;
mod incarnation;
mod live;
pub mod metrics;
pub mod parse;
pub mod store;
pub mod totals;

use std::time::Duration;

use tokio::sync::watch;

pub use counting::{AdvisoryCounter, Outcome};
pub use metrics::AdvisoryMetrics;

use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use crate::flags::duration::parse_duration;
use crate::nats::retry::{ErrorKind, ListenerError};
use crate::nats::{Auth, ConnectionError, NatsArgs};

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
    pub stream_max_age: Duration,

    /// Name of the durable pull consumer on the advisory stream; replicas sharing it split the work.
    #[arg(
        id = "advisories_consumer",
        value_name = "NAME",
        long = "advisories-consumer",
        env = "NATS_DELIVERY_ADVISORIES_CONSUMER",
        default_value = "nats-delivery-exporter",
        value_parser = crate::flags::values::nats_name
    )]
    pub consumer: String,

    /// How long the server waits for the exporter to acknowledge an advisory before redelivering it.
    #[arg(
        id = "advisories_ack_wait",
        value_name = "DURATION",
        long = "advisories-ack-wait",
        env = "NATS_DELIVERY_ADVISORIES_ACK_WAIT",
        default_value = "30s",
        value_parser = parse_duration
    )]
    pub ack_wait: Duration,

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
    pub totals_bucket: Option<String>,

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
    pub replicas: u8,

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
    pub max_series: usize,

    /// Live mode: how many recent advisories are remembered to ignore re-sent ones (durable
    /// mode remembers the last 16 events of each series in its totals bucket).
    #[arg(
        id = "advisories_dedup_window",
        value_name = "EVENTS",
        long = "advisories-dedup-window",
        env = "NATS_DELIVERY_ADVISORIES_DEDUP_WINDOW",
        default_value_t = 100_000
    )]
    pub dedup_window: usize,

    /// Live mode: advisories the subscription may buffer before the exporter's own client
    /// drops (counted in nats_delivery_exporter_dropped_messages_total).
    #[arg(
        id = "advisories_buffer",
        value_name = "MESSAGES",
        long = "advisories-buffer",
        env = "NATS_DELIVERY_ADVISORIES_BUFFER",
        default_value_t = live::SUBSCRIPTION_CAPACITY,
        value_parser = crate::flags::values::at_least_one
    )]
    pub buffer: usize,

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
    pub dead_letter_subject_prefix: String,

    /// Also copy terminated messages into the dead-letter stream.
    #[arg(
        id = "dead_letter_terminated",
        long = "dead-letter-terminated",
        env = "NATS_DELIVERY_DEAD_LETTER_TERMINATED",
        default_value_t = false
    )]
    pub dead_letter_terminated: bool,

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
    pub system_account: Option<Auth>,

    /// Cap on distinct client names in slow-consumer disconnect counts; further names count as "__overflow__".
    #[arg(
        id = "system_events_max_client_names",
        value_name = "N",
        long = "system-events-max-client-names",
        env = "NATS_DELIVERY_SYSTEM_EVENTS_MAX_CLIENT_NAMES",
        default_value_t = 1000
    )]
    pub max_client_names: usize,
}

impl AdvisoryArgs {
    /// The totals bucket of durable mode.
    pub fn totals_bucket(&self) -> String {
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

/// True when every subject matched by `subject` is matched by the stream
/// subject `filter` (token-wise, honouring `*` and `>`).
pub fn subject_covers(filter: &str, subject: &str) -> bool {
    let f: Vec<&str> = filter.split('.').collect();
    let s: Vec<&str> = subject.split('.').collect();
    for (i, ft) in f.iter().enumerate() {
        if *ft == ">" {
            return i < s.len();
        }
        match s.get(i) {
            None => return false,
            Some(&">") => return false,
            Some(st) if *ft == "*" || ft == st => {}
            Some(_) => return false,
        }
    }
    f.len() == s.len()
}

/// Everything one account's listener needs.
#[derive(Clone, Debug)]
pub struct AccountListener {
    /// Connection flags (servers, TLS, client name).
    pub nats: NatsArgs,
    /// Account label.
    pub account: String,
    /// Credentials for this account.
    pub auth: Auth,
    /// Advisory flags.
    pub args: AdvisoryArgs,
    /// Where to count.
    pub metrics: AdvisoryMetrics,
}

impl crate::nats::retry::ListenerHealth for AccountListener {
    fn set_up(&self, up: bool) {
        self.metrics.set_up(&self.account, up);
    }

    fn count_error(&self, kind: ErrorKind) {
        self.metrics.listener_error(&self.account, kind.as_label());
    }

    fn account(&self) -> Option<&str> {
        Some(&self.account)
    }
}

impl AccountListener {
    /// Connects for `purpose`, counting the connection's background failures
    /// (a refused login once per outage, each refused subject) in
    /// `nats_delivery_advisory_listener_errors_total` of this account.
    pub(crate) async fn connect(
        &self,
        purpose: &str,
        subscription_capacity: usize,
    ) -> Result<async_nats::Client, ListenerError> {
        let (metrics, account) = (self.metrics.clone(), self.account.clone());
        let on_failure: crate::nats::OnFailure =
            Box::new(move |kind| metrics.listener_error(&account, kind.as_label()));
        crate::nats::connect_watched(
            &self.nats,
            &self.auth,
            purpose,
            subscription_capacity,
            Some(on_failure),
        )
        .await
        .map_err(|e| ListenerError::new(ErrorKind::Connect, e.to_string()))
    }

    /// Runs until `shutdown` turns true (or its sender is dropped): durable
    /// mode when `--advisories-stream` is set, live mode otherwise. Errors are
    /// logged and retried; they never end the task.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        // Down until a session is set up: a login the server keeps refusing
        // shows as 0, never as a missing series.
        self.metrics.set_up(&self.account, false);
        tokio::spawn({
            let (nats, auth, account) =
                (self.nats.clone(), self.auth.clone(), self.account.clone());
            async move { crate::nats::warn_on_account_mismatch(&nats, &auth, &account).await }
        });
        if self.args.stream.is_some() {
            durable::run(self, shutdown).await
        } else {
            live::run(self, shutdown).await
        }
    }
}

/// Registers the metrics of what is enabled and spawns the listeners: one
/// advisory listener per configured account (with `--advisories`) and the
/// system-event listener (with `--system-account`). Nothing is registered for
/// what is off. Fails only on contradictory flags, before anything starts.
/// After `shutdown` turns true, await the handles: durable listeners flush
/// their acknowledgements before they end.
pub fn spawn_listeners(
    nats: &NatsArgs,
    args: &AdvisoryArgs,
    registry: &mut Registry,
    shutdown: watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, ConnectionError> {
    let mut tasks = Vec::new();
    if args.enabled && args.stream.is_some() {
        // The default bucket name comes from the consumer name, which may
        // hold characters a bucket name may not.
        crate::flags::values::bucket_name(&args.totals_bucket()).map_err(|e| {
            ConnectionError::Config(format!(
                "--advisories-totals-bucket: {e}; the default is the consumer name followed by \"-totals\", so name the bucket"
            ))
        })?;
    }
    if !args.enabled && (args.stream.is_some() || args.dead_letter_stream.is_some()) {
        tracing::warn!(
            "--advisories-stream or --dead-letter-stream is set but --advisories is not: no advisory listener runs"
        );
    }
    if args.enabled {
        let accounts = nats.resolved_accounts()?;
        let metrics = AdvisoryMetrics::register(registry);
        for (account, auth) in accounts {
            metrics.init_account(&account, args.stream.is_some());
            let listener = AccountListener {
                nats: nats.clone(),
                account,
                auth,
                args: args.clone(),
                metrics: metrics.clone(),
            };
            tasks.push(tokio::spawn(listener.run(shutdown.clone())));
        }
    }
    if let Some(auth) = &args.system_account {
        let metrics = crate::system::events::SystemEventMetrics::register(registry);
        tasks.push(tokio::spawn(crate::system::events::run(
            nats.clone(),
            auth.clone(),
            args.max_client_names,
            metrics,
            shutdown,
        )));
    }
    Ok(tasks)
}

/// The running listeners, for `main`: start them before serving, stop them
/// after. Stopping lets durable listeners flush their acknowledgements.
#[derive(Debug)]
pub struct Listeners {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Listeners {
    /// Registers the metrics of what is enabled into `registry` and starts
    /// the listeners (see [`spawn_listeners`]); none when all are off.
    pub fn start(
        nats: &NatsArgs,
        args: &AdvisoryArgs,
        registry: &mut Registry,
    ) -> Result<Listeners, ConnectionError> {
        let (stop, rx) = watch::channel(false);
        let tasks = spawn_listeners(nats, args, registry, rx)?;
        Ok(Listeners { stop, tasks })
    }

    /// Signals every listener to stop and waits for them (at most 10 s).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(std::time::Duration::from_secs(10), all)
            .await
            .is_err()
        {
            tracing::warn!("advisory listeners did not stop within 10 s");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_coverage() {
        let md = parse::MAX_DELIVERIES_SUBJECT;
        assert!(subject_covers("$JS.EVENT.ADVISORY.CONSUMER.>", md));
        assert!(subject_covers("$JS.EVENT.ADVISORY.>", md));
        assert!(subject_covers(md, md));
        assert!(!subject_covers(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.*",
            md
        ));
        assert!(!subject_covers(
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>",
            md
        ));
        assert!(subject_covers("a.*.c", "a.b.c"));
        assert!(!subject_covers("a.b", "a.b.c"));
    }
}
