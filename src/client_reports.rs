//! Application reports: totals that applications using the
//! `nats-delivery-metrics` crate publish over NATS, re-exported with `client`
//! and `instance` labels so that applications without an HTTP server appear
//! next to the server's own numbers.
//!
//! Reports carry absolute values, so a lost report is harmless: the next one
//! carries the totals. The latest report per (client, instance) is kept until
//! no new one has arrived for the expiry time; then its series disappear. The
//! wire format is described in the crate's README; names in METRICS.md under
//! "Application reports re-exported by the exporter". They use the prefix
//! `nats_delivery_app_` so that they never collide with the crate's own
//! `nats_delivery_client_` series when Prometheus scrapes both.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use crate::encode::{counter_family, gauge_family};

/// Connection event names re-exported; anything else in a report is ignored
/// so that a report cannot create unbounded label values.
const EVENTS: [&str; 7] = [
    "connected",
    "disconnected",
    "lame_duck",
    "draining",
    "closed",
    "server_error",
    "client_error",
];
/// Acknowledgement kinds re-exported.
const ACK_KINDS: [&str; 4] = ["ack", "nak", "term", "in_progress"];

#[derive(Debug, Clone, Deserialize)]
struct WireReport {
    version: Option<u32>,
    #[serde(default)]
    client: String,
    #[serde(default)]
    instance: String,
    #[serde(default)]
    subscriptions: Vec<WireSubscription>,
    #[serde(default)]
    connection_events: BTreeMap<String, u64>,
    #[serde(default)]
    jetstream_consumers: Vec<WireConsumer>,
}

#[derive(Debug, Clone, Deserialize)]
struct WireSubscription {
    subscription: String,
    delivered_messages: Option<u64>,
    dropped_messages: Option<u64>,
    dropped_bytes: Option<u64>,
    slow_consumer_events: Option<u64>,
    pending_messages: Option<u64>,
    pending_bytes: Option<u64>,
    pending_messages_high_water: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
struct WireConsumer {
    stream: String,
    consumer: String,
    received_messages: Option<u64>,
    redelivered_messages: Option<u64>,
    #[serde(default)]
    acknowledgements: BTreeMap<String, u64>,
}

/// Why a report was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportError {
    /// Not JSON of the expected shape.
    Parse(String),
    /// A `version` this exporter does not understand (it reads version 1).
    Version(Option<u32>),
    /// `client` or `instance` missing or empty.
    Identity,
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Parse(e) => write!(f, "malformed application report: {e}"),
            ReportError::Version(v) => write!(f, "unsupported application report version {v:?}"),
            ReportError::Identity => write!(f, "application report without client or instance"),
        }
    }
}

impl std::error::Error for ReportError {}

#[derive(Debug)]
struct Stored {
    report: WireReport,
    received_at: Instant,
    received_unix_seconds: f64,
}

#[derive(Debug, Default)]
struct State {
    latest: BTreeMap<(String, String), Stored>,
    received: u64,
    malformed: u64,
}

/// The latest report of every application instance, with expiry; a
/// [`Collector`] that re-exports them.
#[derive(Debug)]
pub struct ClientReports {
    expiry: Duration,
    state: Mutex<State>,
}

impl ClientReports {
    /// Keeps an instance's series until no report has arrived for `expiry`.
    pub fn new(expiry: Duration) -> Self {
        ClientReports {
            expiry,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a single insert or counter add: a panic elsewhere
        // cannot leave the state half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one report body. A body that is not a valid report is counted
    /// as malformed and returned as an error; the stored reports are untouched.
    pub fn record(&self, payload: &[u8]) -> Result<(), ReportError> {
        let parsed = serde_json::from_slice::<WireReport>(payload)
            .map_err(|e| ReportError::Parse(e.to_string()))
            .and_then(|r| match r.version {
                Some(1) if r.client.is_empty() || r.instance.is_empty() => {
                    Err(ReportError::Identity)
                }
                Some(1) => Ok(r),
                other => Err(ReportError::Version(other)),
            });
        let mut state = self.state();
        state.received += 1;
        let report = match parsed {
            Ok(r) => r,
            Err(e) => {
                state.malformed += 1;
                return Err(e);
            }
        };
        let now = Instant::now();
        let expiry = self.expiry;
        state
            .latest
            .retain(|_, s| now.duration_since(s.received_at) < expiry);
        let key = (report.client.clone(), report.instance.clone());
        let received_unix_seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        state.latest.insert(
            key,
            Stored {
                report,
                received_at: now,
                received_unix_seconds,
            },
        );
        Ok(())
    }

    /// Number of (client, instance) pairs whose series are currently exported.
    pub fn instances(&self) -> usize {
        let now = Instant::now();
        self.state()
            .latest
            .values()
            .filter(|s| now.duration_since(s.received_at) < self.expiry)
            .count()
    }
}

/// Subscribes to `subject` on `client` and records every report into
/// `reports` until the subscription ends. Malformed reports are counted and
/// logged, never fatal.
pub async fn run_client_reports(
    client: async_nats::Client,
    subject: String,
    reports: Arc<ClientReports>,
) {
    let mut subscriber = match client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(%subject, error = %e, "cannot subscribe to application reports");
            return;
        }
    };
    while let Some(message) = subscriber.next().await {
        if let Err(e) = reports.record(&message.payload) {
            tracing::warn!(%subject, error = %e, "ignored an application report");
        }
    }
    tracing::warn!(%subject, "application report subscription ended");
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn identity(s: &Stored) -> Labels<'_> {
    vec![
        ("client", s.report.client.as_str()),
        ("instance", s.report.instance.as_str()),
    ]
}

impl Collector for ClientReports {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let state = self.state();
        let now = Instant::now();
        let live: Vec<&Stored> = state
            .latest
            .values()
            .filter(|s| now.duration_since(s.received_at) < self.expiry)
            .collect();
        let per_sub = |f: fn(&WireSubscription) -> Option<u64>| {
            let mut rows = Vec::new();
            for s in &live {
                for sub in &s.report.subscriptions {
                    if let Some(v) = f(sub) {
                        let mut l = identity(s);
                        l.push(("subscription", sub.subscription.as_str()));
                        rows.push((l, v));
                    }
                }
            }
            rows
        };
        let e = &mut encoder;
        counter_family(e, "nats_delivery_app_dropped_messages",
            "Messages an application's instrumented subscription dropped, as last reported (exact).",
            per_sub(|s| s.dropped_messages))?;
        counter_family(e, "nats_delivery_app_dropped_bytes",
            "Payload bytes of the messages an application's instrumented subscription dropped, as last reported.",
            per_sub(|s| s.dropped_bytes))?;
        counter_family(e, "nats_delivery_app_delivered_messages",
            "Messages an application's instrumented subscription handed to the application, as last reported.",
            per_sub(|s| s.delivered_messages))?;
        gauge_family(
            e,
            "nats_delivery_app_pending_messages",
            "Messages pending in an application's instrumented subscription, as last reported.",
            per_sub(|s| s.pending_messages),
        )?;
        gauge_family(e, "nats_delivery_app_pending_bytes",
            "Payload bytes pending in an application's instrumented subscription, as last reported.",
            per_sub(|s| s.pending_bytes))?;
        gauge_family(e, "nats_delivery_app_pending_messages_high_water",
            "Highest number of pending messages an application's instrumented subscription has held, as last reported.",
            per_sub(|s| s.pending_messages_high_water))?;
        counter_family(e, "nats_delivery_app_slow_consumer_events",
            "Slow-consumer events an application's client library reported, as last reported; a lower bound.",
            per_sub(|s| s.slow_consumer_events))?;
        let mut events = Vec::new();
        for s in &live {
            for (event, n) in &s.report.connection_events {
                if let Some(known) = EVENTS.iter().find(|k| **k == event.as_str()) {
                    let mut l = identity(s);
                    l.push(("event", known));
                    events.push((l, *n));
                }
            }
        }
        counter_family(e, "nats_delivery_app_connection_events",
            "Connection events an application's client library reported, by event, as last reported; a lower bound.",
            events)?;
        encode_consumers(e, &live)?;
        gauge_family(
            e,
            "nats_delivery_app_last_report_timestamp_seconds",
            "Unix time the exporter received the latest report of this application instance.",
            live.iter().map(|s| (identity(s), s.received_unix_seconds)),
        )?;
        let none: Vec<(&'static str, &'static str)> = Vec::new();
        counter_family(
            e,
            "nats_delivery_app_reports_received",
            "Application reports the exporter received, valid or not.",
            [(none.clone(), state.received)],
        )?;
        counter_family(e, "nats_delivery_app_reports_malformed",
            "Application reports the exporter ignored because they were not valid version 1 reports.",
            [(none, state.malformed)])
    }
}

fn encode_consumers(e: &mut DescriptorEncoder, live: &[&Stored]) -> fmt::Result {
    let mut received = Vec::new();
    let mut redelivered = Vec::new();
    let mut acks = Vec::new();
    for s in live {
        for c in &s.report.jetstream_consumers {
            let mut l = identity(s);
            l.push(("stream", c.stream.as_str()));
            l.push(("consumer", c.consumer.as_str()));
            if let Some(v) = c.received_messages {
                received.push((l.clone(), v));
            }
            if let Some(v) = c.redelivered_messages {
                redelivered.push((l.clone(), v));
            }
            for (kind, n) in &c.acknowledgements {
                if let Some(known) = ACK_KINDS.iter().find(|k| **k == kind.as_str()) {
                    let mut l = l.clone();
                    l.push(("kind", known));
                    acks.push((l, *n));
                }
            }
        }
    }
    counter_family(
        e,
        "nats_delivery_app_jetstream_received_messages",
        "JetStream messages an application received from a consumer, as last reported.",
        received,
    )?;
    counter_family(e, "nats_delivery_app_jetstream_redelivered_messages",
        "JetStream messages an application received that the server had delivered before, as last reported.",
        redelivered)?;
    counter_family(
        e,
        "nats_delivery_app_jetstream_acknowledgements",
        "Acknowledgements an application sent for JetStream messages, by kind, as last reported.",
        acks,
    )
}
