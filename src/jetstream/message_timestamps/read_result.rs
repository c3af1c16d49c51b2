//! The `result` label of `nats_delivery_message_timestamp_reads_total`: what
//! became of each requested timestamp, errors mapped to their kind.

use super::fetch::ReadError;

/// What became of one requested timestamp, the `result` label of
/// `nats_delivery_message_timestamp_reads_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadResult {
    /// Read from the stream: a message was found.
    Read,
    /// Read from the stream: no matching message at or after the sequence.
    NoMessage,
    /// Answered from the cache, no request sent.
    Cached,
    /// Not read: the budget was spent on requests listed earlier.
    OverBudget,
    /// Not read: the stream is in another account than the connection's.
    OtherAccount,
    /// Not answered within the deadline.
    Timeout,
    /// The stream does not exist (in the connection's account).
    StreamNotFound,
    /// Nothing answered: no JetStream in the account, or no permission.
    NoResponders,
    /// The JetStream API refused the request.
    ApiError,
    /// The reply could not be read.
    BadReply,
    /// The request could not be sent (not connected).
    RequestFailed,
}

impl ReadResult {
    /// Every result, in exposition order.
    pub(crate) const ALL: [ReadResult; 11] = [
        ReadResult::Read,
        ReadResult::NoMessage,
        ReadResult::Cached,
        ReadResult::OverBudget,
        ReadResult::OtherAccount,
        ReadResult::Timeout,
        ReadResult::StreamNotFound,
        ReadResult::NoResponders,
        ReadResult::ApiError,
        ReadResult::BadReply,
        ReadResult::RequestFailed,
    ];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ReadResult::Read => "read",
            ReadResult::NoMessage => "no_message",
            ReadResult::Cached => "cached",
            ReadResult::OverBudget => "over_budget",
            ReadResult::OtherAccount => "other_account",
            ReadResult::Timeout => "timeout",
            ReadResult::StreamNotFound => "stream_not_found",
            ReadResult::NoResponders => "no_responders",
            ReadResult::ApiError => "api_error",
            ReadResult::BadReply => "bad_reply",
            ReadResult::RequestFailed => "request_failed",
        }
    }
}

impl From<&ReadError> for ReadResult {
    fn from(e: &ReadError) -> ReadResult {
        match e {
            ReadError::Timeout => ReadResult::Timeout,
            ReadError::NoResponders => ReadResult::NoResponders,
            ReadError::StreamNotFound => ReadResult::StreamNotFound,
            ReadError::Api { .. } => ReadResult::ApiError,
            ReadError::BadReply(_) => ReadResult::BadReply,
            ReadError::Request(_) => ReadResult::RequestFailed,
        }
    }
}
