//! Connection failures told in one line, naming the account, the servers and
//! the cause, at most once per [`QUIET`] per connection.
//!
//! The client library's connection events carry only the kind of failure
//! ("IO error" for a wrong CA, a missing or a rejected client certificate
//! alike); the cause is in its own debug-level log event. [`cause_layer`]
//! keeps the last such cause so that the event handler can name it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_nats::Event;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer};

use super::{Auth, NatsArgs};
use crate::lock::LockOrRecover;
use crate::nats::retry::ErrorKind;

/// Repeats of a failure within this time are counted, not logged.
pub(super) const QUIET: Duration = Duration::from_secs(30);

/// The last connection failure the client library logged, and when.
static LAST_CAUSE: Mutex<Option<(Instant, String)>> = Mutex::new(None);

/// A tracing layer that records the cause of each failed connection attempt
/// the client library logs (at debug level; give the layer its own filter).
pub fn cause_layer<S: tracing::Subscriber>() -> impl Layer<S> {
    CauseLayer
}

struct CauseLayer;

impl<S: tracing::Subscriber> Layer<S> for CauseLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("async_nats") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.message.contains("connection attempt failed") {
            if let Some(error) = fields.error {
                *LAST_CAUSE.lock_or_recover() = Some((Instant::now(), error));
            }
        }
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    error: Option<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "error" => self.error = Some(format!("{value:?}")),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "error" => self.error = Some(value.to_string()),
            _ => {}
        }
    }
}

/// The cause the client library logged last, if it is recent.
fn recent_cause() -> Option<String> {
    let last = LAST_CAUSE.lock_or_recover();
    let (at, cause) = last.as_ref()?;
    (at.elapsed() < Duration::from_secs(10)).then(|| cause.clone())
}

/// One connection's failure log: what to name, and when it last spoke.
pub(super) struct FailureLog {
    account: String,
    purpose: String,
    servers: String,
    /// Whether the connection presents a client certificate.
    client_certificate: bool,
    state: Mutex<Quiet>,
    /// True from a failed attempt until the next connection: an outage is
    /// reported once, however often the client retries.
    failing: AtomicBool,
    on_failure: Option<OnFailure>,
}

/// What a connection's owner is told of its failures (see
/// [`super::connect_watched`]).
pub(crate) type OnFailure = Box<dyn Fn(ErrorKind) + Send + Sync>;

impl std::fmt::Debug for FailureLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailureLog")
            .field("connection", &self.to_string())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Quiet {
    last: Option<(Instant, String)>,
    suppressed: u64,
}

impl FailureLog {
    /// The log of the `purpose` connection of `account` to `servers`
    /// (already free of credentials).
    pub(super) fn new(account: &str, purpose: &str, servers: &[String]) -> FailureLog {
        FailureLog {
            account: account.to_string(),
            purpose: purpose.to_string(),
            servers: servers.join(","),
            client_certificate: false,
            state: Mutex::default(),
            failing: AtomicBool::new(false),
            on_failure: None,
        }
    }

    /// Also tells `on_failure` of each outage ([`ErrorKind::Connect`], once
    /// until the next connection) and of each subject the server refuses
    /// ([`ErrorKind::Permission`]).
    pub(super) fn with_on_failure(mut self, on_failure: Option<OnFailure>) -> FailureLog {
        self.on_failure = on_failure;
        self
    }

    fn tell(&self, kind: ErrorKind) {
        if let Some(f) = &self.on_failure {
            f(kind);
        }
    }

    /// A connection attempt failed: the first since the last connection
    /// starts an outage.
    fn connect_failed(&self, kind: &str) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            self.tell(ErrorKind::Connect);
        }
        self.failed(kind);
    }

    /// Records whether the connection presents a client certificate, so
    /// that a rejection can say when none was given.
    pub(super) fn with_client_certificate(mut self, given: bool) -> FailureLog {
        self.client_certificate = given;
        self
    }

    /// Logs that connecting failed with `kind`, in one line with the cause,
    /// unless the same failure was logged less than [`QUIET`] ago.
    pub(super) fn failed(&self, kind: &str) {
        let cause = match recent_cause() {
            // Authorization failures end the attempt before any debug event.
            Some(cause) if !kind.contains("authorization") => cause,
            _ => kind.to_string(),
        };
        let cause = explained(cause, self.client_certificate);
        let mut quiet = self.state.lock_or_recover();
        let now = Instant::now();
        if let Some((at, last)) = &quiet.last {
            if *last == cause && now.duration_since(*at) < QUIET {
                quiet.suppressed += 1;
                return;
            }
        }
        let repeats = std::mem::take(&mut quiet.suppressed);
        quiet.last = Some((now, cause.clone()));
        tracing::warn!(
            connection = %self,
            repeats_not_logged = repeats,
            "NATS connection failed: {cause}"
        );
    }

    /// Forgets the last failure, so that a new one after a recovery is logged.
    pub(super) fn recovered(&self) {
        self.failing.store(false, Ordering::Relaxed);
        *self.state.lock_or_recover() = Quiet::default();
    }
}

impl std::fmt::Display for FailureLog {
    /// `account=A purpose=advisories servers=nats://h:4222`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "account={} purpose={} servers={}",
            self.account, self.purpose, self.servers
        )
    }
}

/// Adds what the exporter knows to a cause that does not say it: servers
/// before 2.10 (nats-server 2.9.10) answer a missing client certificate with
/// the TLS alert `BadCertificate`, not `CertificateRequired`.
fn explained(cause: String, client_certificate: bool) -> String {
    if !client_certificate && cause.contains("BadCertificate") {
        format!(
            "{cause} (no client certificate was given: the server may require one, \
             see --nats-tls-cert and --nats-tls-key)"
        )
    } else {
        cause
    }
}

/// The `account` label of the connection made with `auth`: the account
/// (or accounts) configured with those credentials, else "system" for
/// credentials no account uses (the system account's).
pub(super) fn account_label(args: &NatsArgs, auth: &Auth) -> String {
    let names: Vec<String> = args
        .resolved_accounts()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, a)| a == auth)
        .map(|(name, _)| name)
        .collect();
    if names.is_empty() {
        "system".to_string()
    } else {
        names.join("|")
    }
}

/// Logs one connection event, naming the connection; failures go through
/// the connection's rate-limited [`FailureLog`].
pub(super) fn log_event(log: &FailureLog, event: Event) {
    match event {
        Event::Connected => {
            log.recovered();
            tracing::info!(connection = %log, "NATS connected");
        }
        Event::Disconnected => tracing::warn!(connection = %log, "NATS disconnected, reconnecting"),
        Event::SlowConsumer(sid) => {
            tracing::warn!(connection = %log, sid, "NATS client dropped a message: subscription full")
        }
        Event::ClientError(async_nats::ClientError::Other(kind)) => log.connect_failed(&kind),
        Event::ServerError(e) => {
            let text = e.to_string();
            let text = text.trim_start_matches("nats: ");
            // A refused subject is not a failed connection: the server
            // keeps the connection and says so once per refusal.
            if text.to_ascii_lowercase().contains("permissions violation") {
                log.tell(ErrorKind::Permission);
                log.failed(text);
            } else {
                log.connect_failed(text);
            }
        }
        other => tracing::warn!(connection = %log, "NATS: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_within_the_quiet_time_are_counted_not_logged() {
        let log = FailureLog::new("A", "advisories", &["nats://h:4222".into()]);
        log.failed("authorization violation");
        log.failed("authorization violation");
        log.failed("authorization violation");
        assert_eq!(log.state.lock_or_recover().suppressed, 2);
        log.failed("timed out");
        assert_eq!(log.state.lock_or_recover().suppressed, 0);
        log.recovered();
        assert!(log.state.lock_or_recover().last.is_none());
    }

    #[test]
    fn a_bad_certificate_alert_says_when_no_certificate_was_given() {
        let alert = "IO error: received fatal alert: BadCertificate".to_string();
        assert!(explained(alert.clone(), false).contains("no client certificate was given"));
        assert_eq!(explained(alert.clone(), true), alert);
        let other = "IO error: received fatal alert: CertificateRequired".to_string();
        assert_eq!(explained(other.clone(), false), other);
    }
}
