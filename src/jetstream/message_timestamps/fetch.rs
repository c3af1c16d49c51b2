//! One read of one subject filter: the first stored message at or after a
//! sequence whose subject matches, through the JetStream API of the
//! connection's account.
//!
//! Two requests answer `{"seq": from, "next_by_subj": filter}`: the direct
//! get `$JS.API.DIRECT.GET.<stream>` (streams with `allow_direct`, any
//! replica, the raw message with `Nats-Sequence` / `Nats-Time-Stamp`
//! headers) and `$JS.API.STREAM.MSG.GET.<stream>` (every stream, its leader,
//! JSON with the payload in base64, a third larger). Neither can leave the
//! payload out. Without `allow_direct` a direct get gets "no responders"
//! from 2.10 on; 2.9 never answers it, so there only the stream message get
//! is used ([`is_2_10_or_later`]).

use std::time::Duration;

use async_nats::{Client, RequestErrorKind, StatusCode};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// JetStream API error code for "no message found".
const NO_MESSAGE_FOUND: u64 = 10037;
/// JetStream API error code for "stream not found".
const STREAM_NOT_FOUND: u64 = 10059;

/// Which request reads a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// `$JS.API.DIRECT.GET.<stream>`: streams with `allow_direct` only.
    Direct,
    /// `$JS.API.STREAM.MSG.GET.<stream>`: every stream.
    Api,
}

/// A stored message's position and time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stored {
    /// Its stream sequence.
    pub(crate) seq: u64,
    /// When the stream stored it, Unix seconds.
    pub(crate) unix_seconds: f64,
}

/// Why a read gave no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    /// No reply before the deadline.
    #[error("no reply before the deadline")]
    Timeout,
    /// Nothing answers the subject: no direct get (the stream lacks
    /// `allow_direct`, or does not exist), or no JetStream in the account.
    #[error("no responders")]
    NoResponders,
    /// The stream does not exist in the connection's account.
    #[error("stream not found")]
    StreamNotFound,
    /// The JetStream API refused the request.
    #[error("JetStream API error {code}: {description}")]
    Api {
        /// The API's `err_code` (or the status code of a direct get).
        code: u64,
        /// Its text.
        description: String,
    },
    /// A reply that is not what the API sends.
    #[error("unreadable reply: {0}")]
    BadReply(String),
    /// The request could not be sent (not connected, say).
    #[error("request failed: {0}")]
    Request(String),
}

/// Whether a server of `version` is 2.10 or later: it answers a direct get
/// of a stream without `allow_direct` with "no responders" rather than
/// silence, and names a connection's account (`$SYS.REQ.USER.INFO`).
pub fn is_2_10_or_later(version: &str) -> bool {
    let mut parts = version
        .split(['.', '-'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (2, 10)
}

/// Reads the first message at or after `from_seq` matching `filter` in
/// `stream`; `Ok(None)` when there is none.
pub(crate) async fn read_next(
    client: &Client,
    via: Via,
    stream: &str,
    from_seq: u64,
    filter: &str,
    timeout: Duration,
) -> Result<Option<Stored>, ReadError> {
    let subject = match via {
        Via::Direct => format!("$JS.API.DIRECT.GET.{stream}"),
        Via::Api => format!("$JS.API.STREAM.MSG.GET.{stream}"),
    };
    let body = serde_json::json!({ "seq": from_seq, "next_by_subj": filter });
    let request = async_nats::Request::new()
        .payload(body.to_string().into())
        .timeout(Some(timeout));
    let reply = client
        .send_request(subject, request)
        .await
        .map_err(|e| match e.kind() {
            RequestErrorKind::TimedOut => ReadError::Timeout,
            RequestErrorKind::NoResponders => ReadError::NoResponders,
            _ => ReadError::Request(e.to_string()),
        })?;
    let found = match via {
        Via::Direct => direct_reply(&reply)?,
        Via::Api => api_reply(&reply.payload)?,
    };
    at_or_after(found, from_seq)
}

/// The server answers with the first message at or after the sequence
/// asked; an earlier one is a broken reply, and must not be cached.
fn at_or_after(found: Option<Stored>, from_seq: u64) -> Result<Option<Stored>, ReadError> {
    match found {
        Some(s) if s.seq < from_seq => Err(ReadError::BadReply(format!(
            "message {} answers a read from {from_seq}",
            s.seq
        ))),
        found => Ok(found),
    }
}

/// A direct get answers with the message and its position in headers, or
/// with a status and no body.
fn direct_reply(reply: &async_nats::Message) -> Result<Option<Stored>, ReadError> {
    match reply.status {
        None | Some(StatusCode::OK) => {}
        Some(StatusCode::NOT_FOUND) => return Ok(None),
        Some(status) => {
            return Err(ReadError::Api {
                code: u64::from(status.as_u16()),
                description: reply
                    .description
                    .clone()
                    .unwrap_or_else(|| "direct get refused".into()),
            })
        }
    }
    let header = |name: &str| {
        reply
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_string())
            .ok_or_else(|| ReadError::BadReply(format!("direct get reply without {name}")))
    };
    let seq = header("Nats-Sequence")?;
    let seq = seq
        .parse()
        .map_err(|_| ReadError::BadReply(format!("Nats-Sequence {seq:?}")))?;
    let unix_seconds = unix_seconds(&header("Nats-Time-Stamp")?)?;
    Ok(Some(Stored { seq, unix_seconds }))
}

/// `$JS.API.STREAM.MSG.GET` answers with JSON: the message, or an error.
/// Only the fields used are parsed; the base64 payload is skipped.
fn api_reply(payload: &[u8]) -> Result<Option<Stored>, ReadError> {
    #[derive(serde::Deserialize)]
    struct Reply {
        message: Option<Message>,
        error: Option<ApiError>,
    }
    #[derive(serde::Deserialize)]
    struct Message {
        seq: u64,
        time: String,
    }
    #[derive(serde::Deserialize)]
    struct ApiError {
        #[serde(default)]
        err_code: u64,
        #[serde(default)]
        description: String,
    }
    let reply: Reply = serde_json::from_slice(payload)
        .map_err(|e| ReadError::BadReply(format!("message get reply: {e}")))?;
    match (reply.message, reply.error) {
        (_, Some(e)) if e.err_code == NO_MESSAGE_FOUND => Ok(None),
        (_, Some(e)) if e.err_code == STREAM_NOT_FOUND => Err(ReadError::StreamNotFound),
        (_, Some(e)) => Err(ReadError::Api {
            code: e.err_code,
            description: e.description,
        }),
        (Some(m), None) => Ok(Some(Stored {
            seq: m.seq,
            unix_seconds: unix_seconds(&m.time)?,
        })),
        (None, None) => Err(ReadError::BadReply(
            "message get reply with neither message nor error".into(),
        )),
    }
}

/// The server writes its stored time as RFC 3339 with nanoseconds.
pub(crate) fn unix_seconds(text: &str) -> Result<f64, ReadError> {
    OffsetDateTime::parse(text, &Rfc3339)
        .map(|t| t.unix_timestamp_nanos() as f64 / 1e9)
        .map_err(|_| ReadError::BadReply(format!("time stamp {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_gets_from_2_10_on() {
        assert!(!is_2_10_or_later("2.9.10"));
        assert!(!is_2_10_or_later(""));
        assert!(is_2_10_or_later("2.10.0-beta.1"));
        assert!(is_2_10_or_later("2.15.1"));
        assert!(is_2_10_or_later("3.0.0"));
    }

    #[test]
    fn an_earlier_message_is_a_broken_reply() {
        let at = |seq| {
            Some(Stored {
                seq,
                unix_seconds: 1.0,
            })
        };
        assert_eq!(at_or_after(at(5), 5), Ok(at(5)));
        assert_eq!(at_or_after(None, 5), Ok(None));
        assert!(matches!(at_or_after(at(4), 5), Err(ReadError::BadReply(_))));
    }

    fn direct(status: Option<u16>, headers: &[(&str, &str)]) -> async_nats::Message {
        let mut map = async_nats::HeaderMap::new();
        for (k, v) in headers {
            map.insert(*k, *v);
        }
        async_nats::Message {
            subject: "_INBOX.x".into(),
            reply: None,
            payload: "x".into(),
            headers: Some(map),
            status: status.map(|s| StatusCode::from_u16(s).unwrap()),
            description: None,
            length: 1,
        }
    }

    #[test]
    fn direct_replies() {
        let stamp = ("Nats-Time-Stamp", "2026-11-30T20:15:01.5Z");
        let found = direct(None, &[("Nats-Sequence", "9"), stamp]);
        assert_eq!(
            direct_reply(&found),
            Ok(Some(Stored {
                seq: 9,
                unix_seconds: 1_796_069_701.5
            }))
        );
        assert_eq!(direct_reply(&direct(Some(404), &[])), Ok(None));
        assert!(matches!(
            direct_reply(&direct(Some(408), &[])),
            Err(ReadError::Api { code: 408, .. })
        ));
        for broken in [
            direct(None, &[stamp]),
            direct(None, &[("Nats-Sequence", "nine"), stamp]),
            direct(None, &[("Nats-Sequence", "9"), ("Nats-Time-Stamp", "now")]),
        ] {
            assert!(matches!(direct_reply(&broken), Err(ReadError::BadReply(_))));
        }
    }

    #[test]
    fn api_replies() {
        let found = br#"{"type":"x","message":{"subject":"a","seq":7,"data":"AAAA","time":"2026-11-30T20:15:01.123456789Z"}}"#;
        assert_eq!(
            api_reply(found),
            Ok(Some(Stored {
                seq: 7,
                unix_seconds: 1_796_069_701_123_456_789_i128 as f64 / 1e9
            }))
        );
        let none = br#"{"error":{"code":404,"err_code":10037,"description":"no message found"}}"#;
        assert_eq!(api_reply(none), Ok(None));
        let gone = br#"{"error":{"code":404,"err_code":10059,"description":"stream not found"}}"#;
        assert_eq!(api_reply(gone), Err(ReadError::StreamNotFound));
        let other =
            br#"{"error":{"code":503,"err_code":10039,"description":"jetstream not enabled"}}"#;
        assert!(matches!(
            api_reply(other),
            Err(ReadError::Api { code: 10039, .. })
        ));
        for bad in [
            &b"{}"[..],
            b"not json",
            br#"{"message":{"seq":1,"time":"yesterday"}}"#,
        ] {
            assert!(
                matches!(api_reply(bad), Err(ReadError::BadReply(_))),
                "{bad:?}"
            );
        }
    }
}
