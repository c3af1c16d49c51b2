//! JetStream API requests a server dropped, from the
//! `$JS.EVENT.ADVISORY.API.LIMIT_REACHED` advisory.
//!
//! When a server's queue of pending JetStream API requests reaches
//! `jetstream { request_queue_limit }` (default 10000), it drains the whole
//! queue and publishes this advisory in the system account (nats-server
//! `jetstream_api.go`, `publishAdvisory(nil, ...)`), with `dropped`, the
//! requests it threw away. Their clients get no answer and time out: these
//! requests are lost. No poll shows them; `/jsz` `api.inflight` only falls.
//!
//! Servers send it from 2.10.25 on (older ones never do, so the families
//! stay absent there). Each event has a unique `id`: an event seen twice
//! (a reconnect replaying nothing, but a second route path could) is counted
//! once. Like every core NATS event it is lost while the exporter is down.

use std::collections::{HashSet, VecDeque};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::Deserialize;

/// Subject of the API-limit advisory (system account).
pub(crate) const API_LIMIT_SUBJECT: &str = "$JS.EVENT.ADVISORY.API.LIMIT_REACHED";
/// `type` of the API-limit advisory.
pub(crate) const API_LIMIT_TYPE: &str = "io.nats.jetstream.advisory.v1.api_limit_reached";
/// Event ids remembered to count each event once.
const ID_WINDOW: usize = 4096;
/// Longest server name kept as a label value; a longer one is forged.
const MAX_SERVER_LEN: usize = 255;

/// `{server}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ServerLabels {
    /// The name of the server that dropped the requests.
    pub(crate) server: String,
}

/// The API-limit counters; cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct ApiLimitMetrics {
    /// Requests dropped, the sum of `dropped`.
    pub(crate) dropped: Family<ServerLabels, Counter>,
    /// Advisories counted (times the limit was reached).
    pub(crate) events: Family<ServerLabels, Counter>,
    /// Advisories that could not be parsed.
    pub(crate) malformed: Counter,
}

#[derive(Deserialize)]
struct Advisory {
    #[serde(rename = "type")]
    kind: String,
    id: String,
    server: String,
    dropped: u64,
}

/// One parsed advisory: (id, server, dropped).
pub(crate) fn parse(payload: &[u8]) -> Result<(String, String, u64), String> {
    let a: Advisory = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    if a.kind != API_LIMIT_TYPE {
        return Err(format!("type {:?} on {API_LIMIT_SUBJECT}", a.kind));
    }
    if a.id.is_empty() || a.server.is_empty() || a.server.len() > MAX_SERVER_LEN {
        return Err("no id or no valid server name".into());
    }
    Ok((a.id, a.server, a.dropped))
}

/// Counts API-limit advisories once each.
#[derive(Debug)]
pub(crate) struct ApiLimitCounter {
    metrics: ApiLimitMetrics,
    seen: HashSet<String>,
    order: VecDeque<String>,
}

impl ApiLimitCounter {
    /// A counter writing to `metrics`.
    pub(crate) fn new(metrics: ApiLimitMetrics) -> Self {
        ApiLimitCounter {
            metrics,
            seen: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Counts one payload; returns the requests it newly counted as dropped.
    pub(crate) fn record(&mut self, payload: &[u8]) -> u64 {
        let (id, server, dropped) = match parse(payload) {
            Ok(a) => a,
            Err(why) => {
                self.metrics.malformed.inc();
                tracing::warn!("malformed API limit advisory: {why}");
                return 0;
            }
        };
        if !self.seen.insert(id.clone()) {
            return 0;
        }
        self.order.push_back(id);
        if self.order.len() > ID_WINDOW {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        let labels = ServerLabels { server };
        tracing::error!(
            server = %labels.server,
            dropped,
            "a server dropped JetStream API requests (request queue limit reached)"
        );
        self.metrics.events.get_or_create(&labels).inc();
        self.metrics.dropped.get_or_create(&labels).inc_by(dropped);
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, dropped: i64) -> Vec<u8> {
        format!(
            r#"{{"type":"{API_LIMIT_TYPE}","id":"{id}","timestamp":"2026-01-01T00:00:00Z","server":"n1","dropped":{dropped}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn sums_dropped_once_per_event_and_counts_garbage() {
        let m = ApiLimitMetrics::default();
        let mut c = ApiLimitCounter::new(m.clone());
        assert_eq!(c.record(&event("a", 120)), 120);
        assert_eq!(c.record(&event("a", 120)), 0);
        assert_eq!(c.record(&event("b", 7)), 7);
        for garbage in [
            b"not json".to_vec(),
            event("c", -1),
            br#"{"type":"io.example.v1.other","id":"d","server":"n1","dropped":1}"#.to_vec(),
            br#"{"type":"io.nats.jetstream.advisory.v1.api_limit_reached","id":"e","dropped":1}"#
                .to_vec(),
        ] {
            assert_eq!(c.record(&garbage), 0);
        }
        let n1 = ServerLabels {
            server: "n1".into(),
        };
        assert_eq!(m.dropped.get_or_create(&n1).get(), 127);
        assert_eq!(m.events.get_or_create(&n1).get(), 2);
        assert_eq!(m.malformed.get(), 4);
    }
}
