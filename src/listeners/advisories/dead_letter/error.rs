//! Why a dead-letter capture failed.

/// Why a capture failed (retry later).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeadLetterError {
    /// The dead-letter stream exists but does not capture the copies' subjects.
    #[error("dead-letter stream {stream:?} exists but its subjects {subjects:?} do not capture {needed:?}")]
    StreamMismatch {
        /// Stream name.
        stream: String,
        /// The subjects it captures.
        subjects: Vec<String>,
        /// The subject it needs.
        needed: String,
    },
    /// A JetStream request failed.
    #[error("dead-letter {what}: {source}")]
    Request {
        /// What was asked, for the log.
        what: String,
        /// How it failed.
        #[source]
        source: async_nats::Error,
    },
    /// A copy refused as a duplicate is the copy of another message: its
    /// message id was reused (the stream holds copies from elsewhere).
    #[error("dead-letter copy refused as a duplicate, but the copy at {stream} seq {seq} is of another message ({header}: {have:?}, expected {want:?})")]
    OtherCopy {
        /// The dead-letter stream.
        stream: String,
        /// Sequence of the copy it holds.
        seq: u64,
        /// The header that differs.
        header: &'static str,
        /// Its value in the stored copy.
        have: Option<String>,
        /// Its value in this copy.
        want: Option<String>,
    },
}

impl DeadLetterError {
    /// The error of a failed request about `what`.
    pub(super) fn request<E: Into<async_nats::Error>>(
        what: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| DeadLetterError::Request {
            what,
            source: e.into(),
        }
    }
}
