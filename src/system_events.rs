//! Slow-consumer cuts by name, from system-account events.
//!
//! With system-account credentials the exporter subscribes to
//! `$SYS.ACCOUNT.*.DISCONNECT` (`io.nats.server.advisory.v1.client_disconnect`)
//! and counts disconnects whose reason is a slow consumer, by server, account,
//! client name and reason. Client names are bounded: an empty name stays
//! empty, and after `max_client_names` distinct names further ones are counted
//! under [`OVERFLOW_CLIENT_NAME`]. Like all core NATS events these are lost
//! while the exporter is down; /varz `slow_consumers` stays the exact total.

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

use crate::listener::{or_stop, sleep_or_stop, stopped};
use crate::nats_connection::{self, Auth, NatsArgs};

/// The disconnect event subject for every account.
pub const DISCONNECT_SUBJECT: &str = "$SYS.ACCOUNT.*.DISCONNECT";
/// `type` of a disconnect event.
pub const DISCONNECT_TYPE: &str = "io.nats.server.advisory.v1.client_disconnect";
/// Client-name label value once the cap on distinct names is reached.
pub const OVERFLOW_CLIENT_NAME: &str = "__overflow__";

/// `{server,account,client_name,reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisconnectLabels {
    /// `server_name` of the server that cut the connection.
    pub server: String,
    /// The client's account.
    pub account: String,
    /// The client's connection name (bounded).
    pub client_name: String,
    /// `pending_bytes`, `write_deadline` or `other`.
    pub reason: String,
}

/// System-event metrics; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct SystemEventMetrics {
    /// Slow-consumer disconnects by name.
    pub slow_consumer_disconnects: Family<DisconnectLabels, Counter>,
    /// 1 while subscribed with the system account.
    pub listener_up: Gauge,
    /// Disconnect events received.
    pub received: Counter,
    /// Disconnect events that could not be parsed.
    pub malformed: Counter,
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
pub fn slow_consumer_reason(reason: &str) -> Option<&'static str> {
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

/// Listens with the system account until `shutdown` turns true; connection
/// errors are logged and retried.
pub async fn run(
    nats: NatsArgs,
    system_auth: Auth,
    max_client_names: usize,
    metrics: SystemEventMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut counter = DisconnectCounter::new(metrics.clone(), max_client_names);
    loop {
        let result: Result<(), String> = async {
            let client = nats_connection::connect(&nats, &system_auth, "system-events", 1 << 16)
                .await
                .map_err(|e| e.to_string())?;
            let mut sub = client
                .subscribe(DISCONNECT_SUBJECT)
                .await
                .map_err(|e| e.to_string())?;
            match or_stop(&mut shutdown, client.flush()).await {
                None => return Ok(()),
                Some(r) => r.map_err(|e| e.to_string())?,
            }
            metrics.listener_up.set(1);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = stopped(&mut shutdown) => return Ok(()),
                    _ = tick.tick() => {
                        metrics.listener_up.set(i64::from(nats_connection::is_connected(&client)));
                    }
                    msg = sub.next() => match msg {
                        Some(m) => { counter.record(&m.payload); }
                        None => return Err("system event subscription closed".to_string()),
                    },
                }
            }
        }
        .await;
        metrics.listener_up.set(0);
        match result {
            Ok(()) => return,
            Err(e) => {
                tracing::error!("system event listener: {e}; retrying");
                if sleep_or_stop(Duration::from_secs(5), &mut shutdown).await {
                    return;
                }
            }
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
