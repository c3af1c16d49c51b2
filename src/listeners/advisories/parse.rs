//! Parsing the three JetStream delivery advisories.
//!
//! Format (nats-server `server/jetstream_events.go`): every advisory has
//! `type`, `id`, `timestamp`; these three add `stream`, `consumer`,
//! `stream_seq`, `deliveries`, and (terminated, nak) `consumer_seq`,
//! (terminated) `reason`.

use serde::Deserialize;

/// Subject of max-deliveries advisories (`.<stream>.<consumer>` follows).
pub(crate) const MAX_DELIVERIES_SUBJECT: &str = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>";
/// Subject of terminated advisories.
pub(crate) const TERMINATED_SUBJECT: &str = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>";
/// Subject of NAK advisories.
pub(crate) const NAKED_SUBJECT: &str = "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>";
/// The three subjects the exporter listens to.
pub const SUBJECTS: [&str; 3] = [MAX_DELIVERIES_SUBJECT, TERMINATED_SUBJECT, NAKED_SUBJECT];

/// `type` of a max-deliveries advisory.
pub(crate) const MAX_DELIVER_TYPE: &str = "io.nats.jetstream.advisory.v1.max_deliver";
/// `type` of a terminated advisory.
pub(crate) const TERMINATED_TYPE: &str = "io.nats.jetstream.advisory.v1.terminated";
/// `type` of a NAK advisory.
pub(crate) const NAK_TYPE: &str = "io.nats.jetstream.advisory.v1.nak";

/// Reason text the server uses when stream limits remove a message a consumer still had to deliver.
pub(crate) const STREAM_LIMITS_REASON: &str = "Message deleted by stream limits";
/// Reason text the server uses when stream limits remove a delivered but unacknowledged message.
pub(crate) const UNACKED_DELETED_REASON: &str = "Unacknowledged message was deleted";

/// Why a message was terminated: the `reason` label's fixed set of values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TerminationReason {
    /// The client sent `+TERM` without a reason text.
    Client,
    /// Stream limits removed the message before it was delivered.
    StreamLimits,
    /// Stream limits removed the message while it was delivered and unacknowledged.
    UnackedDeleted,
    /// Any other reason text: a client's own `+TERM <text>` (2.10.4+), or a
    /// server reason newer than this exporter. Servers before 2.10.4 send no
    /// reason at all, so there every termination is [`Self::Client`].
    Other,
}

impl TerminationReason {
    /// Maps the advisory's `reason` text.
    pub(crate) fn from_text(text: Option<&str>) -> Self {
        match text.map(str::trim) {
            None | Some("") => TerminationReason::Client,
            Some(STREAM_LIMITS_REASON) => TerminationReason::StreamLimits,
            Some(UNACKED_DELETED_REASON) => TerminationReason::UnackedDeleted,
            Some(_) => TerminationReason::Other,
        }
    }

    /// The label value.
    pub(crate) fn as_label(self) -> &'static str {
        match self {
            TerminationReason::Client => "client",
            TerminationReason::StreamLimits => "stream_limits",
            TerminationReason::UnackedDeleted => "unacked_deleted",
            TerminationReason::Other => "other",
        }
    }
}

/// Every `reason` label value an advisory counter can carry.
pub(crate) const REASON_LABELS: [&str; 5] = [
    "max_deliveries",
    "client",
    "stream_limits",
    "unacked_deleted",
    "other",
];

/// What happened to a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AdvisoryKind {
    /// It exhausted `max_deliver`.
    MaxDeliveries,
    /// It was terminated.
    Terminated(TerminationReason),
    /// A delivery was negatively acknowledged.
    Nak,
}

impl AdvisoryKind {
    /// The dead-letter `reason` text: `max_deliveries` or the termination reason label.
    pub(crate) fn reason_label(self) -> &'static str {
        match self {
            AdvisoryKind::MaxDeliveries => "max_deliveries",
            AdvisoryKind::Terminated(r) => r.as_label(),
            AdvisoryKind::Nak => "nak",
        }
    }
}

/// One parsed delivery advisory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advisory {
    /// What happened.
    pub(crate) kind: AdvisoryKind,
    /// Stream name.
    pub(crate) stream: String,
    /// Consumer name.
    pub(crate) consumer: String,
    /// The message's stream sequence.
    pub(crate) stream_seq: u64,
    /// Delivery count, when the server sent it.
    pub(crate) deliveries: Option<u64>,
    /// The server's `timestamp` text, when present.
    pub(crate) timestamp: Option<String>,
}

/// Why a payload was not counted as a delivery advisory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or JSON without the fields every delivery advisory has.
    #[error("malformed advisory: {0}")]
    Malformed(String),
    /// Well-formed, but of a type the exporter does not count.
    #[error("advisory of unknown type {0:?}")]
    UnknownType(String),
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    stream: Option<String>,
    #[serde(default)]
    consumer: Option<String>,
    #[serde(default)]
    stream_seq: Option<u64>,
    #[serde(default)]
    deliveries: Option<u64>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    timestamp: Option<String>,
}

/// Longest stream or consumer name a server accepts; a longer one in an
/// advisory is forged.
pub(crate) const MAX_NAME_LEN: usize = 255;

/// Parses one advisory received on `subject` and checks that the subject
/// is the one the server would have used for it: its kind token matches the
/// payload's type and its last two tokens are the payload's stream and
/// consumer. The server always publishes on that subject, so anything else
/// was published by a client and is counted as malformed, never as a loss.
pub fn parse_on(subject: &str, payload: &[u8]) -> Result<Advisory, ParseError> {
    let a = parse(payload)?;
    let kind_token = match a.kind {
        AdvisoryKind::MaxDeliveries => "MAX_DELIVERIES",
        AdvisoryKind::Terminated(_) => "MSG_TERMINATED",
        AdvisoryKind::Nak => "MSG_NAKED",
    };
    if a.stream.len() > MAX_NAME_LEN || a.consumer.len() > MAX_NAME_LEN {
        return Err(ParseError::Malformed(format!(
            "stream or consumer name longer than {MAX_NAME_LEN} bytes"
        )));
    }
    let mut tokens = subject.split('.');
    let expected = ["$JS", "EVENT", "ADVISORY", "CONSUMER", kind_token];
    let matches = expected.iter().all(|e| tokens.next() == Some(*e))
        && tokens.next() == Some(a.stream.as_str())
        && tokens.next() == Some(a.consumer.as_str())
        && tokens.next().is_none();
    if !matches {
        return Err(ParseError::Malformed(format!(
            "subject does not match the payload ({} {}/{}): not sent by the server",
            a.kind.reason_label(),
            a.stream,
            a.consumer
        )));
    }
    Ok(a)
}

/// Parses one advisory payload.
pub fn parse(payload: &[u8]) -> Result<Advisory, ParseError> {
    let wire: Wire<'_> =
        serde_json::from_slice(payload).map_err(|e| ParseError::Malformed(e.to_string()))?;
    let kind = wire
        .kind
        .ok_or_else(|| ParseError::Malformed("no \"type\" field".into()))?;
    let kind = match kind.as_ref() {
        MAX_DELIVER_TYPE => AdvisoryKind::MaxDeliveries,
        TERMINATED_TYPE => {
            AdvisoryKind::Terminated(TerminationReason::from_text(wire.reason.as_deref()))
        }
        NAK_TYPE => AdvisoryKind::Nak,
        other => return Err(ParseError::UnknownType(other.to_string())),
    };
    let missing = |f: &str| ParseError::Malformed(format!("no {f:?} field"));
    let stream = wire
        .stream
        .filter(|s| !s.is_empty())
        .ok_or_else(|| missing("stream"))?;
    let consumer = wire
        .consumer
        .filter(|s| !s.is_empty())
        .ok_or_else(|| missing("consumer"))?;
    let stream_seq = wire.stream_seq.ok_or_else(|| missing("stream_seq"))?;
    Ok(Advisory {
        kind,
        stream,
        consumer,
        stream_seq,
        deliveries: wire.deliveries,
        timestamp: wire.timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_shapes() {
        let md = br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"x","timestamp":"2026-01-01T00:00:00Z","stream":"S","consumer":"C","stream_seq":7,"deliveries":4}"#;
        let a = parse(md).unwrap();
        assert_eq!(a.kind, AdvisoryKind::MaxDeliveries);
        assert_eq!((a.stream.as_str(), a.consumer.as_str()), ("S", "C"));
        assert_eq!((a.stream_seq, a.deliveries), (7, Some(4)));
        let t = br#"{"type":"io.nats.jetstream.advisory.v1.terminated","stream":"S","consumer":"C","consumer_seq":1,"stream_seq":2,"deliveries":1,"reason":"Message deleted by stream limits"}"#;
        assert_eq!(
            parse(t).unwrap().kind,
            AdvisoryKind::Terminated(TerminationReason::StreamLimits)
        );
        let t2 = br#"{"type":"io.nats.jetstream.advisory.v1.terminated","stream":"S","consumer":"C","stream_seq":2}"#;
        assert_eq!(
            parse(t2).unwrap().kind,
            AdvisoryKind::Terminated(TerminationReason::Client)
        );
    }

    #[test]
    fn subject_must_match_the_payload() {
        let nak = br#"{"type":"io.nats.jetstream.advisory.v1.nak","stream":"PAYMENTS","consumer":"billing","stream_seq":2,"deliveries":1}"#;
        let ok = "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.PAYMENTS.billing";
        assert_eq!(parse_on(ok, nak).unwrap().stream, "PAYMENTS");
        for forged in [
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.X.Y",
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.PAYMENTS.billing",
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.PAYMENTS.billing.extra",
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.PAYMENTS",
        ] {
            assert!(
                matches!(parse_on(forged, nak), Err(ParseError::Malformed(_))),
                "{forged}"
            );
        }
        let long = "x".repeat(MAX_NAME_LEN + 1);
        let payload = format!(
            r#"{{"type":"io.nats.jetstream.advisory.v1.nak","stream":"{long}","consumer":"c","stream_seq":2}}"#
        );
        let subject = format!("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.{long}.c");
        assert!(matches!(
            parse_on(&subject, payload.as_bytes()),
            Err(ParseError::Malformed(_))
        ));
    }

    #[test]
    fn sorts_garbage() {
        assert!(matches!(parse(b"not json"), Err(ParseError::Malformed(_))));
        assert!(matches!(parse(b"[1,2]"), Err(ParseError::Malformed(_))));
        assert!(matches!(
            parse(br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S"}"#),
            Err(ParseError::Malformed(_))
        ));
        assert!(matches!(
            parse(br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"C","stream_seq":-1}"#),
            Err(ParseError::Malformed(_))
        ));
        assert_eq!(
            parse(br#"{"type":"io.example.v1.other"}"#),
            Err(ParseError::UnknownType("io.example.v1.other".into()))
        );
    }
}
