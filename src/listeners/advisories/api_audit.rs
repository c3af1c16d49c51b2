//! Messages removed from streams by purges and message deletes, from the
//! JetStream API audit advisories.
//!
//! `/jsz` cannot tell a purge from a limit: both move the stream's first
//! sequence. The server's only record of a purge or a message delete is the
//! audit advisory it publishes on [`API_AUDIT_SUBJECT`] in the account, for
//! every JetStream API response, with the request's `subject` and the
//! `response` as JSON text (nats-server `sendJetStreamAPIAuditAdvisory`).
//! One response means one audit: in a cluster only the server that answers
//! (the stream leader, once the purge is applied) sends it, and the `request`
//! text is then empty, so nothing here reads it.
//!
//! The audits are core NATS messages: the ones sent while the exporter is
//! down are lost, so these counters count while the exporter runs and start
//! from zero with it (a counter reset), in durable mode too (its advisory
//! stream does not capture this subject).

use serde::Deserialize;

use super::counting::{SeriesCap, OVERFLOW};
use super::metrics::{AccountLabels, ApiAuditMetrics, StreamLabels};
use super::parse::MAX_NAME_LEN;

/// Subject of the JetStream API audit advisories.
pub(crate) const API_AUDIT_SUBJECT: &str = "$JS.EVENT.ADVISORY.API";
/// `type` of an API audit advisory.
pub(crate) const API_AUDIT_TYPE: &str = "io.nats.jetstream.advisory.v1.api_audit";
/// API subject of a stream purge (`<stream>` follows).
const PURGE_PREFIX: &str = "$JS.API.STREAM.PURGE.";
/// API subject of a message delete (`<stream>` follows).
const MSG_DELETE_PREFIX: &str = "$JS.API.STREAM.MSG.DELETE.";
/// `type` of the answer to a purge.
const PURGE_RESPONSE_TYPE: &str = "io.nats.jetstream.api.v1.stream_purge_response";
/// `type` of the answer to a message delete.
const MSG_DELETE_RESPONSE_TYPE: &str = "io.nats.jetstream.api.v1.stream_msg_delete_response";

/// What one successful purge or delete removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Removal {
    /// A purge removed `messages` messages.
    Purged {
        /// Stream name.
        stream: String,
        /// The server's `purged` figure.
        messages: u64,
    },
    /// A message delete removed one message.
    Deleted {
        /// Stream name.
        stream: String,
    },
}

#[derive(Deserialize)]
struct Audit {
    #[serde(rename = "type")]
    kind: String,
    subject: String,
    response: String,
}

#[derive(Deserialize)]
struct Response {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    success: bool,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    purged: Option<u64>,
}

/// Reads one audit advisory: `Ok(Some)` for a successful purge or delete,
/// `Ok(None)` for any other API request and for a failed purge or delete,
/// `Err` (why) for what the server would not have sent.
pub(crate) fn parse_audit(payload: &[u8]) -> Result<Option<Removal>, String> {
    let audit: Audit = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    if audit.kind != API_AUDIT_TYPE {
        return Err(format!("type {:?} on the API audit subject", audit.kind));
    }
    let (stream, response_type) = if let Some(s) = audit.subject.strip_prefix(PURGE_PREFIX) {
        (s, PURGE_RESPONSE_TYPE)
    } else if let Some(s) = audit.subject.strip_prefix(MSG_DELETE_PREFIX) {
        (s, MSG_DELETE_RESPONSE_TYPE)
    } else {
        return Ok(None);
    };
    if stream.is_empty()
        || stream.len() > MAX_NAME_LEN
        || stream.contains(['.', '*', '>', ' ', '\t'])
    {
        return Err(format!("no stream name in {:?}", audit.subject));
    }
    let response: Response = serde_json::from_str(&audit.response)
        .map_err(|e| format!("response of {}: {e}", audit.subject))?;
    if response.kind != response_type {
        return Err(format!(
            "{} answered with {:?}",
            audit.subject, response.kind
        ));
    }
    if !response.success || response.error.is_some() {
        return Ok(None);
    }
    let stream = stream.to_string();
    if response_type == MSG_DELETE_RESPONSE_TYPE {
        return Ok(Some(Removal::Deleted { stream }));
    }
    let messages = response
        .purged
        .ok_or_else(|| format!("successful purge of {stream} without \"purged\""))?;
    Ok(Some(Removal::Purged { stream, messages }))
}

/// Counts one account's API audit advisories.
#[derive(Debug)]
pub(crate) struct ApiAuditCounter {
    account: String,
    metrics: ApiAuditMetrics,
    cap: SeriesCap,
}

impl ApiAuditCounter {
    /// A counter for `account` keeping at most `max_series` distinct streams.
    pub(crate) fn new(account: &str, metrics: ApiAuditMetrics, max_series: usize) -> Self {
        metrics.init_account(account);
        ApiAuditCounter {
            account: account.to_string(),
            metrics,
            cap: SeriesCap::new(max_series),
        }
    }

    /// Counts one audit payload; returns what it removed, if anything.
    pub(crate) fn record(&mut self, payload: &[u8]) -> Option<Removal> {
        let removal = match parse_audit(payload) {
            Ok(r) => r?,
            Err(why) => {
                self.metrics.malformed.get_or_create(&self.account()).inc();
                tracing::warn!(account = %self.account, "malformed API audit advisory: {why}");
                return None;
            }
        };
        let (stream, family, n) = match &removal {
            Removal::Purged { stream, messages } => (stream, &self.metrics.purged, *messages),
            Removal::Deleted { stream } => (stream, &self.metrics.deleted, 1),
        };
        let stream = if self.cap.admit(stream, "") {
            stream.clone()
        } else {
            self.metrics.folded.get_or_create(&self.account()).inc();
            OVERFLOW.to_string()
        };
        family
            .get_or_create(&StreamLabels {
                account: self.account.clone(),
                stream,
            })
            .inc_by(n);
        Some(removal)
    }

    fn account(&self) -> AccountLabels {
        AccountLabels {
            account: self.account.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit(subject: &str, response: &str) -> Vec<u8> {
        serde_json::json!({
            "type": API_AUDIT_TYPE, "id": "x", "timestamp": "2026-01-01T00:00:00Z",
            "server": "n1", "subject": subject, "response": response,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn reads_what_the_server_sends() {
        let purge = audit(
            "$JS.API.STREAM.PURGE.ORDERS",
            r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":3}"#,
        );
        assert_eq!(
            parse_audit(&purge),
            Ok(Some(Removal::Purged {
                stream: "ORDERS".into(),
                messages: 3
            }))
        );
        let delete = audit(
            "$JS.API.STREAM.MSG.DELETE.ORDERS",
            r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","success":true}"#,
        );
        assert_eq!(
            parse_audit(&delete),
            Ok(Some(Removal::Deleted {
                stream: "ORDERS".into()
            }))
        );
        let failed = audit(
            "$JS.API.STREAM.MSG.DELETE.ORDERS",
            r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","error":{"code":400,"err_code":10057,"description":"no message found"}}"#,
        );
        assert_eq!(parse_audit(&failed), Ok(None));
        let info = audit(
            "$JS.API.STREAM.INFO.ORDERS",
            r#"{"type":"io.nats.jetstream.api.v1.stream_info_response"}"#,
        );
        assert_eq!(parse_audit(&info), Ok(None));
    }

    #[test]
    fn garbage_is_malformed_never_a_purge() {
        let purge_ok = r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":3}"#;
        for bad in [
            b"not json".to_vec(),
            br#"{"type":"io.nats.jetstream.advisory.v1.nak"}"#.to_vec(),
            audit("$JS.API.STREAM.PURGE.", purge_ok),
            audit("$JS.API.STREAM.PURGE.A.B", purge_ok),
            audit("$JS.API.STREAM.PURGE.S", "not json"),
            audit(
                "$JS.API.STREAM.PURGE.S",
                r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","success":true}"#,
            ),
            audit(
                "$JS.API.STREAM.PURGE.S",
                r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true}"#,
            ),
        ] {
            assert!(
                parse_audit(&bad).is_err(),
                "{}",
                String::from_utf8_lossy(&bad)
            );
        }
    }

    #[test]
    fn streams_beyond_the_cap_are_folded() {
        let metrics = ApiAuditMetrics::default();
        let mut c = ApiAuditCounter::new("A", metrics.clone(), 1);
        let ok = r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","success":true}"#;
        for s in ["S1", "S2", "S1", "S3"] {
            c.record(&audit(&format!("$JS.API.STREAM.MSG.DELETE.{s}"), ok));
        }
        c.record(b"{}");
        let get = |stream: &str| {
            metrics
                .deleted
                .get_or_create(&StreamLabels {
                    account: "A".into(),
                    stream: stream.into(),
                })
                .get()
        };
        assert_eq!((get("S1"), get(OVERFLOW)), (2, 2));
        let a = AccountLabels {
            account: "A".into(),
        };
        assert_eq!(metrics.folded.get_or_create(&a).get(), 2);
        assert_eq!(metrics.malformed.get_or_create(&a).get(), 1);
    }
}
