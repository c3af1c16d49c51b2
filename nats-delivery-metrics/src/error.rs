//! The crate's error and what failed.

use std::fmt;

/// What failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The subscription could not be created.
    Subscribe,
    /// A JetStream acknowledgement could not be sent.
    Acknowledge,
    /// The connection could not be established.
    Connect,
    /// The metrics already belong to another connection.
    OtherConnection,
    /// The sid of an async-nats `Subscriber` could not be read.
    SidUnreadable,
    /// Unsubscribing or draining failed, or the subscription had already
    /// been stopped.
    Unsubscribe,
    /// A request failed.
    Request,
}

/// An error from this crate; the async-nats error is its `source()`.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl Error {
    pub(crate) fn new(
        kind: ErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error {
            kind,
            source: source.into(),
        }
    }

    pub(crate) fn acknowledge(source: Box<dyn std::error::Error + Send + Sync>) -> Self {
        Error::new(ErrorKind::Acknowledge, source)
    }

    /// What failed.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::Subscribe => write!(f, "cannot subscribe: {}", self.source),
            ErrorKind::Acknowledge => write!(f, "cannot acknowledge: {}", self.source),
            ErrorKind::Connect => write!(f, "cannot connect: {}", self.source),
            ErrorKind::OtherConnection => write!(f, "wrong connection: {}", self.source),
            ErrorKind::SidUnreadable => write!(f, "cannot read the sid: {}", self.source),
            ErrorKind::Unsubscribe => write!(f, "cannot unsubscribe: {}", self.source),
            ErrorKind::Request => write!(f, "request failed: {}", self.source),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
