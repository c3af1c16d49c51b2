//! Publishing the crate's absolute counter values over NATS, so that an
//! application without an HTTP server still reaches Prometheus through the
//! exporter. Every report carries totals, never increments: a lost report
//! costs nothing, the next one carries the same totals and more.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::state::Shared;

/// The default report subject prefix: reports go to
/// `nats_delivery.reports.<client>`.
pub const DEFAULT_REPORT_SUBJECT: &str = "nats_delivery.reports";

/// Settings for [`ClientMetrics::publish_reports`](crate::ClientMetrics::publish_reports).
#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub(crate) subject: String,
    pub(crate) interval: Duration,
    pub(crate) instance: String,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            subject: DEFAULT_REPORT_SUBJECT.to_string(),
            interval: Duration::from_secs(5),
            instance: default_instance(),
        }
    }
}

impl ReportOptions {
    /// Subject prefix [`DEFAULT_REPORT_SUBJECT`], every 5 seconds, instance
    /// `<hostname>:<pid>`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Publish on `<subject>.<client>`, the client name being the one given
    /// to `ClientMetrics::new`: the exporter takes a report only from the
    /// subject of the client it names, so that the server's permissions
    /// (one subject per application user) keep an application from
    /// reporting as another. Must match the exporter's
    /// `--client-reports-subject`.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = subject.into();
        self
    }
    /// Publish this often.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }
    /// The `instance` label value; must tell this process apart from other
    /// processes reporting with the same client name.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
    }
}

fn default_instance() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    format!("{host}:{}", std::process::id())
}

/// The report body (JSON), version 1. Field meanings: the repository's `docs/report-protocol.md`.
#[derive(Debug, Serialize)]
pub(crate) struct Report<'a> {
    version: u32,
    client: &'a str,
    instance: &'a str,
    sequence: u64,
    timestamp_ms: u64,
    subscriptions: Vec<SubscriptionReport<'a>>,
    connection_events: std::collections::BTreeMap<&'static str, u64>,
    jetstream_consumers: Vec<ConsumerReport>,
}

#[derive(Debug, Serialize)]
struct SubscriptionReport<'a> {
    subscription: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivered_messages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped_messages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped_bytes: Option<u64>,
    slow_consumer_events: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_messages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_messages_high_water: Option<u64>,
}

#[derive(Debug, Serialize)]
struct ConsumerReport {
    stream: String,
    consumer: String,
    received_messages: u64,
    redelivered_messages: u64,
    acknowledgements: std::collections::BTreeMap<&'static str, u64>,
}

/// Builds the JSON body of one report.
pub(crate) fn encode_report(shared: &Shared, instance: &str, sequence: u64) -> Vec<u8> {
    let subs = shared.snapshot();
    let consumers = shared.consumer_snapshot();
    let report = Report {
        version: 1,
        client: &shared.client,
        instance,
        sequence,
        timestamp_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        subscriptions: subs
            .iter()
            .map(|s| {
                let counted = |v| s.instrumented.then_some(v);
                SubscriptionReport {
                    subscription: &s.name,
                    delivered_messages: counted(s.delivered),
                    dropped_messages: counted(s.dropped),
                    dropped_bytes: counted(s.dropped_bytes),
                    slow_consumer_events: s.slow_consumer_events,
                    pending_messages: s.live.map(|l| l.pending_messages),
                    pending_bytes: s.live.map(|l| l.pending_bytes),
                    pending_messages_high_water: s.live.map(|l| l.high_water),
                }
            })
            .collect(),
        connection_events: shared.events.values().into_iter().collect(),
        jetstream_consumers: consumers
            .into_iter()
            .map(|c| ConsumerReport {
                stream: c.stream,
                consumer: c.consumer,
                received_messages: c.received,
                redelivered_messages: c.redelivered,
                acknowledgements: c.acknowledgements.into_iter().collect(),
            })
            .collect(),
    };
    serde_json::to_vec(&report).expect("a report always serializes")
}

/// The running report publisher; stops when dropped.
#[derive(Debug)]
#[must_use = "reports stop when the ReportPublisher is dropped"]
pub struct ReportPublisher {
    task: tokio::task::JoinHandle<()>,
}

impl ReportPublisher {
    pub(crate) fn start(
        shared: Arc<Shared>,
        client: async_nats::Client,
        options: ReportOptions,
    ) -> Self {
        let subject = format!("{}.{}", options.subject, shared.client);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(options.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sequence = 0u64;
            loop {
                tick.tick().await;
                sequence += 1;
                let body = encode_report(&shared, &options.instance, sequence);
                // A report that cannot be sent is harmless: the next one
                // carries the same totals.
                let _ = client.publish(subject.clone(), body.into()).await;
            }
        });
        ReportPublisher { task }
    }

    /// Stops publishing.
    pub fn stop(self) {}
}

impl Drop for ReportPublisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
