//! What the NATS listeners (advisories, system events, application
//! reports) share: the kinds of failure that feed their `kind` labels, the
//! pause before a new try, and waiting that shutdown can cut short.
//!
//! A leaf module: it imports nothing of the crate, so every listener can use
//! it without the listeners importing each other.

use std::time::Duration;

use async_nats::jetstream::{self, context, ErrorCode};
use tokio::sync::watch;

/// What stopped a listener's session: the `kind` label of the listeners'
/// `..._listener_errors_total` counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
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
    pub(crate) fn as_label(self) -> &'static str {
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

    /// Sorts a failed NATS or JetStream request by what async-nats reports
    /// of it: the JetStream API error code, a timeout or no responders, from
    /// the first error in `error`'s chain of sources that tells one (the
    /// text of a message is never read: servers may reword it).
    pub(crate) fn of_request(error: &(dyn std::error::Error + 'static)) -> ErrorKind {
        std::iter::successors(Some(error), |e| e.source())
            .find_map(told_by)
            .unwrap_or(ErrorKind::Other)
    }

    /// The kind of a JetStream API error code.
    pub(crate) fn of_code(code: ErrorCode) -> ErrorKind {
        match code {
            ErrorCode::CONSUMER_NOT_FOUND => ErrorKind::ConsumerMissing,
            ErrorCode::STREAM_NOT_FOUND => ErrorKind::StreamMissing,
            ErrorCode::JETSTREAM_NOT_ENABLED | ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT => {
                ErrorKind::JetStreamUnavailable
            }
            _ => ErrorKind::Other,
        }
    }
}

/// The kind one error of a chain tells; `None` leaves it to its source.
/// async-nats wraps a request's failure in the error of each call (stream
/// info, consumer create, bucket...), which keeps the code or the request
/// kind either in its own kind or in its source.
fn told_by(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    if let Some(e) = e.downcast_ref::<jetstream::Error>() {
        return Some(ErrorKind::of_code(e.error_code()));
    }
    if let Some(e) = e.downcast_ref::<context::RequestError>() {
        return match e.kind() {
            context::RequestErrorKind::TimedOut => Some(ErrorKind::Timeout),
            context::RequestErrorKind::NoResponders => Some(ErrorKind::JetStreamUnavailable),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<async_nats::RequestError>() {
        return match e.kind() {
            async_nats::RequestErrorKind::TimedOut => Some(ErrorKind::Timeout),
            async_nats::RequestErrorKind::NoResponders => Some(ErrorKind::JetStreamUnavailable),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<context::ConsumerInfoError>() {
        use context::ConsumerInfoErrorKind as Kind;
        return match e.kind() {
            Kind::NotFound => Some(ErrorKind::ConsumerMissing),
            Kind::StreamNotFound => Some(ErrorKind::StreamMissing),
            Kind::TimedOut => Some(ErrorKind::Timeout),
            Kind::NoResponders => Some(ErrorKind::JetStreamUnavailable),
            Kind::JetStream(j) => Some(ErrorKind::of_code(j.error_code())),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<context::GetStreamError>() {
        return match e.kind() {
            context::GetStreamErrorKind::JetStream(j) => Some(ErrorKind::of_code(j.error_code())),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<context::CreateStreamError>() {
        use context::CreateStreamErrorKind as Kind;
        return match e.kind() {
            Kind::NotFound => Some(ErrorKind::StreamMissing),
            Kind::JetStreamUnavailable => Some(ErrorKind::JetStreamUnavailable),
            Kind::TimedOut => Some(ErrorKind::Timeout),
            Kind::JetStream(j) => Some(ErrorKind::of_code(j.error_code())),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<jetstream::stream::ConsumerError>() {
        use jetstream::stream::ConsumerErrorKind as Kind;
        return match e.kind() {
            Kind::TimedOut => Some(ErrorKind::Timeout),
            Kind::JetStream(j) => Some(ErrorKind::of_code(j.error_code())),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<jetstream::consumer::StreamError>() {
        return match e.kind() {
            jetstream::consumer::StreamErrorKind::TimedOut => Some(ErrorKind::Timeout),
            _ => None,
        };
    }
    None
}

/// Why a listener's session ended.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ListenerError {
    /// What kind of failure.
    pub(crate) kind: ErrorKind,
    /// What failed, for the log.
    pub message: String,
}

impl ListenerError {
    /// A failure of `kind`.
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ListenerError {
            kind,
            message: message.into(),
        }
    }

    /// A failed NATS or JetStream request, sorted by
    /// [`ErrorKind::of_request`].
    pub(crate) fn request(what: &str, e: &(dyn std::error::Error + 'static)) -> Self {
        ListenerError::new(ErrorKind::of_request(e), format!("{what}: {e}"))
    }

    /// A failure of the totals bucket.
    pub(crate) fn store(message: impl Into<String>) -> Self {
        ListenerError::new(ErrorKind::Store, message)
    }
}

/// Pause before a listener that failed connects again.
pub(crate) const RETRY_DELAY: Duration = Duration::from_secs(5);

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

#[cfg(test)]
mod tests {
    use async_nats::jetstream::context::{
        ConsumerInfoError, ConsumerInfoErrorKind, GetStreamError, GetStreamErrorKind,
        KeyValueError, KeyValueErrorKind, RequestError, RequestErrorKind,
    };

    use super::*;

    /// A JetStream API error as the server sends it.
    fn api_error(code: u64, description: &str) -> jetstream::Error {
        serde_json::from_value(serde_json::json!({
            "code": 404, "err_code": code, "description": description
        }))
        .unwrap()
    }

    #[test]
    fn the_code_decides_not_the_text() {
        // A description that names another failure, and a code 10059.
        let get = GetStreamError::new(GetStreamErrorKind::JetStream(api_error(
            10059,
            "consumer not found",
        )));
        assert_eq!(ErrorKind::of_request(&get), ErrorKind::StreamMissing);
        // Found under the error of the call that wrapped it.
        let bucket = KeyValueError::with_source(KeyValueErrorKind::GetBucket, get);
        assert_eq!(ErrorKind::of_request(&bucket), ErrorKind::StreamMissing);
        let disabled = GetStreamError::new(GetStreamErrorKind::JetStream(api_error(10039, "")));
        assert_eq!(
            ErrorKind::of_request(&disabled),
            ErrorKind::JetStreamUnavailable
        );
        let unknown = GetStreamError::new(GetStreamErrorKind::JetStream(api_error(
            10008,
            "stream not found, timeout",
        )));
        assert_eq!(ErrorKind::of_request(&unknown), ErrorKind::Other);
    }

    #[test]
    fn kinds_of_requests_and_calls() {
        let missing = ConsumerInfoError::new(ConsumerInfoErrorKind::NotFound);
        assert_eq!(ErrorKind::of_request(&missing), ErrorKind::ConsumerMissing);
        let timed_out = GetStreamError::with_source(
            GetStreamErrorKind::Request,
            RequestError::new(RequestErrorKind::TimedOut),
        );
        assert_eq!(ErrorKind::of_request(&timed_out), ErrorKind::Timeout);
        let nobody = async_nats::RequestError::new(async_nats::RequestErrorKind::NoResponders);
        assert_eq!(
            ErrorKind::of_request(&nobody),
            ErrorKind::JetStreamUnavailable
        );
        let text = std::io::Error::other("consumer not found (10014), timed out");
        assert_eq!(ErrorKind::of_request(&text), ErrorKind::Other);
    }
}
