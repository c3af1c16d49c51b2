//! `/healthz?details=true`: the server's own health check, and the problems
//! it lists. A server whose JetStream cannot serve (not enabled, no meta
//! leader, streams or consumers not recovered or not current) answers 503
//! with one entry per problem; that reply is read, not counted as a failed
//! poll, since it is the answer asked for.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use super::{MonitoringSource, NatsOption, ServerLink, Source, TargetSnapshot};
use crate::poll_error::PollError;
use crate::text::families::gauge_family;

/// The HTTP statuses of an answered health check: 503 unhealthy, 500 not
/// ready for connections.
const ANSWERED: &[u16] = &[503, 500];

/// The kinds of problem the server reports (its `HealthZErrorType`), as
/// label values, and `unspecified` for the one problem a server before 2.10
/// reports without a kind; each is written for every server, 0 when none.
pub const PROBLEM_KINDS: [&str; 7] = [
    "connection",
    "bad_request",
    "jetstream",
    "account",
    "stream",
    "consumer",
    "unspecified",
];

/// The fields of a `/healthz` reply the exporter uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Healthz {
    /// `ok`, `error` or `unavailable`.
    pub(crate) status: String,
    /// The one problem of a reply without details (servers before details).
    pub(crate) error: String,
    /// Every problem found.
    pub(crate) errors: Vec<HealthProblem>,
}

/// One problem of a health check.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct HealthProblem {
    /// `JETSTREAM`, `ACCOUNT`, `STREAM`, `CONSUMER`, `CONNECTION` or `BAD_REQUEST`.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// What the server says.
    pub(crate) error: String,
}

impl Healthz {
    /// True when the server reports no problem.
    pub fn healthy(&self) -> bool {
        self.status == "ok" && self.error.is_empty() && self.errors.is_empty()
    }

    /// How many problems of `kind` (a label value) the server lists.
    pub fn problems(&self, kind: &str) -> u64 {
        if kind == "unspecified" {
            return u64::from(self.errors.is_empty() && !self.error.is_empty());
        }
        self.errors
            .iter()
            .filter(|p| p.kind.eq_ignore_ascii_case(kind))
            .count() as u64
    }
}

/// Polls `/healthz` with the list of problems.
#[derive(Debug)]
pub(crate) struct HealthzSource;

impl MonitoringSource for HealthzSource {
    type Reply = Healthz;
    const HELP: &'static str =
        "`/healthz`: the server's health check, with the JetStream problems it lists";
    const NATS_OPTIONS: &'static [NatsOption] = &[NatsOption::flag("details")];

    fn source(&self) -> Source {
        Source::Healthz
    }

    async fn poll(&self, link: &ServerLink<'_>) -> Result<Healthz, PollError> {
        let query = [("details", "true".to_string())];
        link.get_json_accepting(Source::Healthz, &query, ANSWERED)
            .await
    }

    fn absorb(&self, reply: Healthz, snap: &mut TargetSnapshot) {
        snap.healthz = Some(reply);
    }
}

/// Writes this source's families for the servers of one scrape.
pub(crate) fn encode_targets(
    enc: &mut DescriptorEncoder,
    targets: &[TargetSnapshot],
) -> fmt::Result {
    encode(enc, &super::answered(targets, |t| t.healthz.as_ref()))
}

/// Writes the health families for the servers polled successfully.
pub(crate) fn encode(enc: &mut DescriptorEncoder, servers: &[(&str, &Healthz)]) -> fmt::Result {
    gauge_family(
        enc,
        "nats_delivery_server_healthy",
        "1 if the server's /healthz reports no problem, 0 if it reports any (JetStream included).",
        servers
            .iter()
            .map(|(s, h)| ([("server", *s)], u64::from(h.healthy()))),
    )?;
    gauge_family(
        enc,
        "nats_delivery_server_health_problems",
        "Problems the server's /healthz lists, by kind (jetstream, account, stream, consumer, connection, bad_request; unspecified before 2.10).",
        servers.iter().flat_map(|(s, h)| {
            PROBLEM_KINDS
                .iter()
                .map(move |kind| ([("server", *s), ("kind", *kind)], h.problems(kind)))
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_with_problems_is_unhealthy_and_counted_by_kind() {
        let reply = r#"{"status":"error","errors":[
            {"type":"JETSTREAM","error":"JetStream has not established contact with a meta leader"},
            {"type":"STREAM","account":"A","stream":"S","error":"stream not current"},
            {"type":"STREAM","account":"A","stream":"T","error":"stream not current"}]}"#;
        let h: Healthz = serde_json::from_str(reply).unwrap();
        assert!(!h.healthy());
        assert_eq!(h.problems("jetstream"), 1);
        assert_eq!(h.problems("stream"), 2);
        assert_eq!(h.problems("consumer"), 0);
        let ok: Healthz = serde_json::from_str(r#"{"status":"ok"}"#).unwrap();
        assert!(ok.healthy());
        let old: Healthz =
            serde_json::from_str(r#"{"status":"unavailable","error":"JetStream is not enabled"}"#)
                .unwrap();
        assert!(!old.healthy());
        assert_eq!(old.problems("unspecified"), 1);
        assert_eq!(h.problems("unspecified"), 0);
    }
}
