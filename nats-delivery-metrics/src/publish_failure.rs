//! Why a JetStream publish was not stored, read from the server's answer.
//!
//! The server names most refusals by the JetStream API error code
//! (`err_code`). The three "stream full under discard new" refusals share one
//! code, 10077 (`JSStreamStoreFailedF`, whose description is the store's
//! error), so for that code alone the description tells them apart; it is the
//! text of the store's error constants, unchanged since nats-server 2.9.

use std::error::Error as _;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};

/// `JSStreamStoreFailedF`: the store refused the message; the description
/// says why.
const STREAM_STORE_FAILED: u64 = 10077;
/// `JSStreamWrongLastSequenceErrF` ("wrong last sequence: N"), for both
/// `Nats-Expected-Last-Sequence` and `Nats-Expected-Last-Subject-Sequence`.
const WRONG_LAST_SEQUENCE: u64 = 10071;
/// `JSStreamWrongLastSequenceConstantErr` ("wrong last sequence", no number).
const WRONG_LAST_SEQUENCE_CONSTANT: u64 = 10164;
/// `JSStreamWrongLastMsgIDErrF` ("wrong last msg ID: ID").
const WRONG_LAST_MSG_ID: u64 = 10070;

/// Why a JetStream publish got no positive acknowledgement; the `reason`
/// label of `nats_delivery_client_jetstream_publish_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PublishFailure {
    /// The stream holds `max_msgs` messages and discards new ones
    /// (error code 10077, "maximum messages exceeded").
    MaxMessages,
    /// The stream holds `max_bytes` and discards new messages
    /// (error code 10077, "maximum bytes exceeded").
    MaxBytes,
    /// The subject holds `max_msgs_per_subject` messages, on a stream with
    /// `discard: new` and `discard_new_per_subject` (error code 10077,
    /// "maximum messages per subject exceeded").
    MaxMessagesPerSubject,
    /// The expected last sequence of the stream or of the subject did not
    /// match (error code 10071, or 10164).
    WrongLastSequence,
    /// The expected last message id did not match (error code 10070).
    WrongLastMessageId,
    /// Nothing answered the subject: no stream stores it, or the stream has
    /// no leader (the server's no-responders status).
    NoResponders,
    /// No answer arrived within the JetStream context's timeout. The server
    /// may have stored the message.
    TimedOut,
    /// The application stopped waiting (the publish future was dropped)
    /// before the answer arrived. The server may have stored the message.
    Abandoned,
    /// Any other failure: another API error (message too large, expected
    /// stream mismatch, ...), a publish that could not be sent, or an
    /// answer that could not be read.
    Other,
}

impl PublishFailure {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [PublishFailure; 9] = [
        PublishFailure::MaxMessages,
        PublishFailure::MaxBytes,
        PublishFailure::MaxMessagesPerSubject,
        PublishFailure::WrongLastSequence,
        PublishFailure::WrongLastMessageId,
        PublishFailure::NoResponders,
        PublishFailure::TimedOut,
        PublishFailure::Abandoned,
        PublishFailure::Other,
    ];

    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            PublishFailure::MaxMessages => "max_messages",
            PublishFailure::MaxBytes => "max_bytes",
            PublishFailure::MaxMessagesPerSubject => "max_messages_per_subject",
            PublishFailure::WrongLastSequence => "wrong_last_sequence",
            PublishFailure::WrongLastMessageId => "wrong_last_msg_id",
            PublishFailure::NoResponders => "no_responders",
            PublishFailure::TimedOut => "timed_out",
            PublishFailure::Abandoned => "abandoned",
            PublishFailure::Other => "other",
        }
    }

    /// Why the publish that returned `error` (from async-nats or this
    /// crate's [`InstrumentedJetStream`](crate::InstrumentedJetStream)) was
    /// not acknowledged.
    pub fn of(error: &PublishError) -> PublishFailure {
        let api_error = error
            .source()
            .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>());
        if let Some(api_error) = api_error {
            return Self::of_api_error(api_error);
        }
        match error.kind() {
            PublishErrorKind::StreamNotFound => PublishFailure::NoResponders,
            PublishErrorKind::TimedOut => PublishFailure::TimedOut,
            _ => PublishFailure::Other,
        }
    }

    /// The reason for a JetStream API error answered to a publish.
    pub fn of_api_error(error: &async_nats::jetstream::Error) -> PublishFailure {
        match error.error_code().0 {
            WRONG_LAST_SEQUENCE | WRONG_LAST_SEQUENCE_CONSTANT => PublishFailure::WrongLastSequence,
            WRONG_LAST_MSG_ID => PublishFailure::WrongLastMessageId,
            STREAM_STORE_FAILED => match description(error).as_deref() {
                Some("maximum messages exceeded") => PublishFailure::MaxMessages,
                Some("maximum bytes exceeded") => PublishFailure::MaxBytes,
                Some("maximum messages per subject exceeded") => {
                    PublishFailure::MaxMessagesPerSubject
                }
                _ => PublishFailure::Other,
            },
            _ => PublishFailure::Other,
        }
    }
}

/// The server's `description`: async-nats keeps it private but serializes
/// the error as the server sent it.
fn description(error: &async_nats::jetstream::Error) -> Option<String> {
    match serde_json::to_value(error).ok()?.get("description")? {
        serde_json::Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, err_code: u64, description: &str) -> PublishError {
        let error: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": code, "err_code": err_code, "description": description
        }))
        .unwrap();
        PublishError::with_source(PublishErrorKind::Other, error)
    }

    #[test]
    fn store_refusals_are_told_apart_by_description_other_codes_by_code() {
        let cases = [
            ((503, 10077, "maximum messages exceeded"), "max_messages"),
            ((503, 10077, "maximum bytes exceeded"), "max_bytes"),
            (
                (503, 10077, "maximum messages per subject exceeded"),
                "max_messages_per_subject",
            ),
            ((503, 10077, "message too large"), "other"),
            (
                (400, 10071, "wrong last sequence: 1"),
                "wrong_last_sequence",
            ),
            ((400, 10164, "wrong last sequence"), "wrong_last_sequence"),
            ((400, 10070, "wrong last msg ID: a"), "wrong_last_msg_id"),
            ((400, 10060, "expected stream does not match"), "other"),
            // A description alone never decides: another code is "other".
            ((503, 10054, "maximum messages exceeded"), "other"),
        ];
        for ((code, err_code, text), want) in cases {
            let got = PublishFailure::of(&api_error(code, err_code, text));
            assert_eq!(got.label(), want, "{err_code} {text}");
        }
    }

    #[test]
    fn errors_without_an_api_error_follow_async_nats_kind() {
        let of = |kind| PublishFailure::of(&PublishError::new(kind));
        assert_eq!(
            of(PublishErrorKind::StreamNotFound),
            PublishFailure::NoResponders
        );
        assert_eq!(of(PublishErrorKind::TimedOut), PublishFailure::TimedOut);
        assert_eq!(of(PublishErrorKind::BrokenPipe), PublishFailure::Other);
        assert_eq!(of(PublishErrorKind::MaxAckPending), PublishFailure::Other);
    }
}
