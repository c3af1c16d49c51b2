//! JetStream API errors the listeners act on, recognised by their error
//! code (never by the text of the message, which servers may reword).

use async_nats::jetstream;

/// True for "stream not found" (JetStream error 10059).
pub(crate) fn is_stream_not_found(e: &jetstream::context::GetStreamError) -> bool {
    matches!(
        e.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(ref j)
            if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// True for "consumer not found" (JetStream error 10014, which async-nats
/// gives as its own kind), from the boxed error of `Stream::get_consumer`.
pub(crate) fn is_consumer_not_found(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    use jetstream::context::{ConsumerInfoError, ConsumerInfoErrorKind};
    e.downcast_ref::<ConsumerInfoError>()
        .is_some_and(|e| matches!(e.kind(), ConsumerInfoErrorKind::NotFound))
}

/// True for "wrong last sequence" (JetStream error 10071): a write
/// expecting another revision of its key, which async-nats gives as its
/// own kind from the error code of the publish acknowledgement.
pub(crate) fn is_wrong_last_sequence(e: &jetstream::context::PublishError) -> bool {
    e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence
}
