//! Slow-consumer cuts by name, from system-account events.
//!
//! With system-account credentials the exporter subscribes to
//! `$SYS.ACCOUNT.*.DISCONNECT` (`io.nats.server.advisory.v1.client_disconnect`)
//! and counts disconnects whose reason is a slow consumer, by server, account,
//! client name and reason. Client names are bounded: an empty name stays
//! empty, and after `max_client_names` distinct names further ones are counted
//! under [`OVERFLOW_CLIENT_NAME`]. Like all core NATS events these are lost
//! while the exporter is down; /varz `slow_consumers` stays the exact total.
//!
//! The same connection counts the JetStream API requests servers dropped
//! ([`super::api_limit`]), whose advisory the servers publish in the system
//! account.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use tokio::sync::watch;

use super::api_limit::{ApiLimitCounter, ApiLimitMetrics, API_LIMIT_SUBJECT};
use crate::nats::retry::{or_stop, retry_after, stopped, ErrorKind, ListenerError, ListenerHealth};
use crate::nats::{self, Auth, NatsArgs};

/// The disconnect event subject for every account.
pub(crate) const DISCONNECT_SUBJECT: &str = "$SYS.ACCOUNT.*.DISCONNECT";
/// `type` of a disconnect event.
pub(crate) const DISCONNECT_TYPE: &str = "io.nats.server.advisory.v1.client_disconnect";
/// Client-name label value once the cap on distinct names is reached.
pub(crate) const OVERFLOW_CLIENT_NAME: &str = "__overflow__";

/// `{server,account,client_name,reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DisconnectLabels {
    /// `server_name` of the server that cut the connection.
    pub(crate) server: String,
    /// The client's account.
    pub(crate) account: String,
    /// The client's connection name (bounded).
    pub(crate) client_name: String,
    /// `pending_bytes`, `write_deadline` or `other`.
    pub(crate) reason: String,
}

/// System-event metrics; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct SystemEventMetrics {
    /// Slow-consumer disconnects by name.
    pub(crate) slow_consumer_disconnects: Family<DisconnectLabels, Counter>,
    /// 1 while subscribed with the system account.
    pub listener_up: Gauge,
    /// Disconnect events received.
    pub received: Counter,
    /// Disconnect events that could not be parsed.
    pub(crate) malformed: Counter,
    /// Failures of the listener, by kind.
    pub(crate) listener_errors: Family<KindLabels, Counter>,
    /// JetStream API requests servers dropped.
    pub(crate) api_limit: ApiLimitMetrics,
}

/// `{kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    /// What failed: an `ErrorKind` label.
    pub(crate) kind: String,
}

impl ListenerHealth for SystemEventMetrics {
    fn set_up(&self, up: bool) {
        self.listener_up.set(i64::from(up));
    }

    fn count_error(&self, kind: ErrorKind) {
        self.listener_errors
            .get_or_create(&KindLabels {
                kind: kind.as_label().to_string(),
            })
            .inc();
    }
}

impl SystemEventMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let m = SystemEventMetrics::default();
        registry.register(
            "nats_delivery_server_slow_consumer_disconnects",
            "Client connections cut by a server as slow consumers, by client name, from system-account disconnect events",
            m.slow_consumer_disconnects.clone(),
        );
        registry.register(
            "nats_delivery_system_events_listener_up",
            "1 while the system-account event listener is connected and subscribed, else 0",
            m.listener_up.clone(),
        );
        registry.register(
            "nats_delivery_system_events_received",
            "Client disconnect events received from the system account",
            m.received.clone(),
        );
        registry.register(
            "nats_delivery_system_events_malformed",
            "Client disconnect events that could not be parsed",
            m.malformed.clone(),
        );
        registry.register(
            "nats_delivery_system_events_listener_errors",
            "Failures of the system-account event listener, by kind",
            m.listener_errors.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_api_requests_dropped",
            "JetStream API requests a server dropped when its API request queue reached its limit (their clients got no answer), from the system account's API limit advisories (servers 2.10.25+)",
            m.api_limit.dropped.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_api_limit_reached",
            "Times a server's JetStream API request queue reached its limit and was dropped, from the system account's API limit advisories (servers 2.10.25+)",
            m.api_limit.events.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_api_limit_advisories_malformed",
            "API limit advisories that could not be parsed (not counted as drops)",
            m.api_limit.malformed.clone(),
        );
        m
    }
}

#[derive(Deserialize, Default)]
struct ServerPart {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize, Default)]
struct ClientPart {
    #[serde(default)]
    acc: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct DisconnectEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    server: ServerPart,
    #[serde(default)]
    client: ClientPart,
    #[serde(default)]
    reason: String,
}

/// Maps a disconnect reason to a label value; `None` when it is not a slow consumer.
pub(crate) fn slow_consumer_reason(reason: &str) -> Option<&'static str> {
    if !reason.starts_with("Slow Consumer") {
        return None;
    }
    Some(if reason.contains("Pending Bytes") {
        "pending_bytes"
    } else if reason.contains("Write Deadline") {
        "write_deadline"
    } else {
        "other"
    })
}

/// Counts disconnect events into the metrics, bounding client names.
#[derive(Debug)]
pub struct DisconnectCounter {
    metrics: SystemEventMetrics,
    max_names: usize,
    names: HashSet<String>,
}

impl DisconnectCounter {
    /// A counter keeping at most `max_names` distinct client names.
    pub fn new(metrics: SystemEventMetrics, max_names: usize) -> Self {
        DisconnectCounter {
            metrics,
            max_names,
            names: HashSet::new(),
        }
    }

    /// Counts one event payload; returns whether it was a slow-consumer cut.
    pub fn record(&mut self, payload: &[u8]) -> bool {
        self.metrics.received.inc();
        let event: DisconnectEvent = match serde_json::from_slice(payload) {
            Ok(e) => e,
            Err(e) => {
                self.metrics.malformed.inc();
                tracing::warn!("malformed disconnect event: {e}");
                return false;
            }
        };
        if event.kind != DISCONNECT_TYPE {
            self.metrics.malformed.inc();
            tracing::warn!(
                kind = event.kind,
                "unexpected event type on {DISCONNECT_SUBJECT}"
            );
            return false;
        }
        let Some(reason) = slow_consumer_reason(&event.reason) else {
            return false;
        };
        let name = event.client.name;
        let client_name = if name.is_empty() || self.names.contains(&name) {
            name
        } else if self.names.len() < self.max_names {
            self.names.insert(name.clone());
            name
        } else {
            OVERFLOW_CLIENT_NAME.to_string()
        };
        self.metrics
            .slow_consumer_disconnects
            .get_or_create(&DisconnectLabels {
                server: event.server.name,
                account: event.client.acc,
                client_name,
                reason: reason.to_string(),
            })
            .inc();
        true
    }
}

/// Listens with the system account until `shutdown` turns true; failures
/// are counted by kind in `nats_delivery_system_events_listener_errors_total`
/// (a refused login as `connect`, once per outage), logged and retried.
pub async fn run(
    nats: NatsArgs,
    system_auth: Auth,
    max_client_names: usize,
    metrics: SystemEventMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut counter = Counters {
        disconnects: DisconnectCounter::new(metrics.clone(), max_client_names),
        api_limit: ApiLimitCounter::new(metrics.api_limit.clone()),
    };
    while let Err(e) = session(&nats, &system_auth, &metrics, &mut counter, &mut shutdown).await {
        if retry_after(&metrics, "system event listener", e, &mut shutdown).await {
            break;
        }
    }
    metrics.set_up(false);
}

/// The counters a session writes to; kept across sessions.
struct Counters {
    disconnects: DisconnectCounter,
    api_limit: ApiLimitCounter,
}

/// One connection's subscriptions, until shutdown (`Ok`) or a failure.
async fn session(
    nats: &NatsArgs,
    system_auth: &Auth,
    metrics: &SystemEventMetrics,
    counter: &mut Counters,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ListenerError> {
    let watched = metrics.clone();
    let on_failure: nats::OnFailure = Box::new(move |kind| watched.count_error(kind));
    let client = nats::connect_watched(
        nats,
        system_auth,
        "system-events",
        1 << 16,
        Some(on_failure),
    )
    .await
    .map_err(|e| ListenerError::new(ErrorKind::Connect, e.to_string()))?;
    let mut subs = Vec::new();
    for subject in [DISCONNECT_SUBJECT, API_LIMIT_SUBJECT] {
        subs.push(
            client
                .subscribe(subject)
                .await
                .map_err(|e| ListenerError::request("subscribe", &e))?,
        );
    }
    let mut sub = futures::stream::select_all(subs);
    // While the server refuses us this waits, so shutdown must be able to cut in.
    match or_stop(shutdown, client.flush()).await {
        None => return Ok(()),
        Some(r) => r.map_err(|e| ListenerError::request("subscribe", &e))?,
    }
    metrics.set_up(true);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stopped(shutdown) => return Ok(()),
            _ = tick.tick() => metrics.set_up(nats::is_connected(&client)),
            msg = sub.next() => match msg {
                Some(m) if m.subject.as_str() == API_LIMIT_SUBJECT => {
                    counter.api_limit.record(&m.payload);
                }
                Some(m) => { counter.disconnects.record(&m.payload); }
                None => return Err(ListenerError::new(ErrorKind::Other, "system event subscription closed")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_names_and_keeps_empty_ones() {
        let m = SystemEventMetrics::default();
        let mut c = DisconnectCounter::new(m.clone(), 1);
        let ev = |name: &str, reason: &str| {
            format!(
                r#"{{"type":"{DISCONNECT_TYPE}","server":{{"name":"s1"}},"client":{{"acc":"A","name":"{name}"}},"reason":"{reason}"}}"#
            )
        };
        assert!(c.record(ev("a", "Slow Consumer (Pending Bytes)").as_bytes()));
        assert!(c.record(ev("b", "Slow Consumer (Write Deadline)").as_bytes()));
        assert!(c.record(ev("", "Slow Consumer (Pending Bytes)").as_bytes()));
        assert!(!c.record(ev("a", "Client Closed").as_bytes()));
        assert!(!c.record(b"garbage"));
        let get = |name: &str, reason: &str| {
            m.slow_consumer_disconnects
                .get_or_create(&DisconnectLabels {
                    server: "s1".into(),
                    account: "A".into(),
                    client_name: name.into(),
                    reason: reason.into(),
                })
                .get()
        };
        assert_eq!(get("a", "pending_bytes"), 1);
        assert_eq!(get(OVERFLOW_CLIENT_NAME, "write_deadline"), 1);
        assert_eq!(get("", "pending_bytes"), 1);
        assert_eq!((m.received.get(), m.malformed.get()), (5, 1));
    }
}
