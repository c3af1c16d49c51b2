//! What the NATS listeners (advisories, system events, application
//! reports) share: the kinds of failure that feed their `kind` labels, the
//! pause before a new try, and waiting that shutdown can cut short.
//!
//! A leaf module: it imports nothing of the crate, so every listener can use
//! it without the listeners importing each other.

use std::time::Duration;

use tokio::sync::watch;

/// What stopped a listener's session: the `kind` label of the listeners'
/// `..._listener_errors_total` counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Connecting or authenticating failed.
    Connect,
    /// The advisory stream exists but does not capture the advisory subjects.
    StreamMismatch,
    /// The advisory stream is gone (deleted, or the server lost its store).
    StreamMissing,
    /// The advisory consumer is gone.
    ConsumerMissing,
    /// JetStream is disabled for the account or not answering at all.
    JetStreamUnavailable,
    /// The server refused a subject to the exporter's user.
    Permission,
    /// A request got no answer in time.
    Timeout,
    /// The totals bucket could not be read or written.
    Store,
    /// Anything else (subscription ended, unexpected reply).
    Other,
}

impl ErrorKind {
    /// The label value.
    pub fn as_label(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::StreamMismatch => "stream_mismatch",
            ErrorKind::StreamMissing => "stream_missing",
            ErrorKind::ConsumerMissing => "consumer_missing",
            ErrorKind::JetStreamUnavailable => "jetstream_unavailable",
            ErrorKind::Permission => "permission",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Store => "store",
            ErrorKind::Other => "other",
        }
    }

    /// Sorts a failed JetStream request by the server's error code or the
    /// client's error text (async-nats gives most of them only as text).
    pub fn of_request(text: &str) -> ErrorKind {
        let t = text.to_ascii_lowercase();
        if t.contains("10014") || t.contains("consumer not found") {
            ErrorKind::ConsumerMissing
        } else if t.contains("10059") || t.contains("stream not found") {
            ErrorKind::StreamMissing
        } else if t.contains("10039") || t.contains("not enabled") || t.contains("no responders") {
            ErrorKind::JetStreamUnavailable
        } else if t.contains("permission") || t.contains("authorization") {
            ErrorKind::Permission
        } else if t.contains("timed out") || t.contains("timeout") {
            ErrorKind::Timeout
        } else {
            ErrorKind::Other
        }
    }
}

/// Why a listener's session ended.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ListenerError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What failed, for the log.
    pub message: String,
}

impl ListenerError {
    /// A failure of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ListenerError {
            kind,
            message: message.into(),
        }
    }

    /// A failed JetStream request, sorted by [`ErrorKind::of_request`].
    pub fn request(what: &str, e: impl std::fmt::Display) -> Self {
        let text = format!("{what}: {e}");
        ListenerError::new(ErrorKind::of_request(&text), text)
    }

    /// A failure of the totals bucket.
    pub fn store(message: impl Into<String>) -> Self {
        ListenerError::new(ErrorKind::Store, message)
    }
}

/// Pause before a listener that failed connects again.
pub const RETRY_DELAY: Duration = Duration::from_secs(5);

/// Where a listener reports its own health: its `listener_up` gauge and its
/// error counter by kind.
pub(crate) trait ListenerHealth {
    /// Sets `listener_up`.
    fn set_up(&self, up: bool);
    /// Counts one failure of `kind`.
    fn count_error(&self, kind: ErrorKind);
    /// The account the listener serves, for the log line (`None` when it
    /// serves no one account).
    fn account(&self) -> Option<&str> {
        None
    }
}

/// After a failed session: the listener reports itself down
/// (`listener_up` 0) until a session is back, counts the failure by kind,
/// says why, and waits [`RETRY_DELAY`] before the next try. Returns true
/// when shutting down instead: a listener never gives up otherwise.
pub(crate) async fn retry_after(
    health: &impl ListenerHealth,
    what: &str,
    error: ListenerError,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    health.set_up(false);
    health.count_error(error.kind);
    tracing::error!(
        account = health.account().map(tracing::field::display),
        kind = error.kind.as_label(),
        "{what}: {error}; retrying in {} s",
        RETRY_DELAY.as_secs()
    );
    sleep_or_stop(RETRY_DELAY, shutdown).await
}

/// Resolves when `shutdown` is true or its sender is gone.
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Runs `f` unless shutdown comes first (then `None`): for setup steps that
/// may wait long, such as the first flush while the server refuses us.
pub(crate) async fn or_stop<F: std::future::Future>(
    shutdown: &mut watch::Receiver<bool>,
    f: F,
) -> Option<F::Output> {
    tokio::select! {
        r = f => Some(r),
        _ = stopped(shutdown) => None,
    }
}

/// Sleeps `d`, or returns early (true) when shutting down.
pub(crate) async fn sleep_or_stop(d: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stopped(shutdown) => true,
    }
}
