//! The headers a dead-letter copy carries: where the original came from,
//! and its own `Nats-` headers renamed.

/// Header: the original stream.
pub(crate) const HEADER_STREAM: &str = "Dead-Letter-Stream";
/// Header: the original stream sequence.
pub(crate) const HEADER_SEQUENCE: &str = "Dead-Letter-Stream-Sequence";
/// Header: the original subject.
pub(crate) const HEADER_SUBJECT: &str = "Dead-Letter-Subject";
/// Header: the consumer that gave up on the message.
pub(crate) const HEADER_CONSUMER: &str = "Dead-Letter-Consumer";
/// Header: delivery count from the advisory.
pub(crate) const HEADER_DELIVERIES: &str = "Dead-Letter-Deliveries";
/// Header: `max_deliveries` or a termination reason label.
pub(crate) const HEADER_REASON: &str = "Dead-Letter-Reason";
/// Header: the advisory's timestamp.
pub(crate) const HEADER_TIME: &str = "Dead-Letter-Time";
/// Header (durable mode): the original stream's creation time (Unix ns), which
/// tells one incarnation of a stream name from the next.
pub(crate) const HEADER_STREAM_CREATED: &str = "Dead-Letter-Stream-Created";
/// Header: the account label.
pub(crate) const HEADER_ACCOUNT: &str = "Dead-Letter-Account";
/// The original's own `Nats-<name>` headers are kept as
/// `Dead-Letter-Original-<name>`: the server would act on them (expected
/// sequence, rollup, TTL, message id), and servers before 2.10 find
/// `Nats-Msg-Id` anywhere in a header name, so the new name must not contain it.
pub(crate) const ORIGINAL_HEADER_PREFIX: &str = "Dead-Letter-Original-";
