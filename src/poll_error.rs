//! Why a poll of a monitoring endpoint failed; each variant is one value of
//! the `kind` label of `nats_delivery_scrape_errors_total`.

use std::time::Duration;

/// A failed poll of one monitoring endpoint.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// No complete answer within the per-request timeout.
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    /// The TCP or TLS connection could not be made.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The server answered with a non-success HTTP status.
    #[error("HTTP status {0}")]
    Status(u16),
    /// The connection broke while the reply was being read.
    #[error("reading the reply failed: {0}")]
    Body(String),
    /// The reply is not JSON of the shape this endpoint returns.
    #[error("reply is not valid JSON for this endpoint: {0}")]
    Parse(String),
    /// The reply is larger than `--max-reply-size` (announced or counted).
    #[error("reply larger than the limit of {0} bytes (--max-reply-size)")]
    TooLarge(usize),
    /// The server's replies of this poll would keep more than
    /// `--max-kept-size` in memory.
    #[error("the server's replies keep more than the limit of {0} bytes (--max-kept-size)")]
    TooMuchKept(usize),
    /// The server answered with a redirect, which is not followed: a
    /// monitoring endpoint has no reason to send one elsewhere.
    #[error("redirect (HTTP status {0}) not followed")]
    Redirect(u16),
    /// Any other failure of the request.
    #[error("request failed: {0}")]
    Request(String),
    /// Polling through the system account: the server did not answer the
    /// survey, or nothing answers its own subject any more.
    #[error("no reply: {0}")]
    NoReply(String),
    /// Polling through the system account: the server answered with an error.
    #[error("the server answered with an error: {0}")]
    ServerError(String),
    /// Polling through the system account: the NATS connection failed.
    #[error("NATS: {0}")]
    Nats(String),
}

impl PollError {
    /// The `kind` label value for this error.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            PollError::Timeout(_) => "timeout",
            PollError::Connect(_) => "connect",
            PollError::Status(_) => "http_status",
            PollError::Body(_) => "body",
            PollError::Parse(_) => "parse",
            PollError::TooLarge(_) | PollError::TooMuchKept(_) => "too_large",
            PollError::Redirect(_) => "redirect",
            PollError::Request(_) => "request",
            PollError::NoReply(_) => "no_reply",
            PollError::ServerError(_) => "server_error",
            PollError::Nats(_) => "nats",
        }
    }

    /// Classifies a reqwest error, keeping its full cause chain in the text
    /// but not the URL, which may hold credentials.
    pub(crate) fn from_reqwest(e: reqwest::Error, timeout: Duration) -> PollError {
        let e = e.without_url();
        let text = error_chain(&e);
        if e.is_timeout() {
            PollError::Timeout(timeout)
        } else if e.is_connect() {
            PollError::Connect(text)
        } else if e.is_body() || e.is_decode() {
            PollError::Body(text)
        } else if let Some(status) = e.status() {
            PollError::Status(status.as_u16())
        } else {
            PollError::Request(text)
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
