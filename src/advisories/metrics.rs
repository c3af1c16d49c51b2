//! The advisory listener's metrics, registered once.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `{account}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccountLabels {
    /// Account name as configured.
    pub account: String,
}

/// `{account,stream,consumer}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsumerLabels {
    /// Account name as configured.
    pub account: String,
    /// Stream name.
    pub stream: String,
    /// Consumer name.
    pub consumer: String,
}

/// `{account,stream,consumer,reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Account name as configured.
    pub account: String,
    /// Stream name.
    pub stream: String,
    /// Consumer name.
    pub consumer: String,
    /// A value from a small fixed set.
    pub reason: String,
}

/// Every advisory metric; cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub struct AdvisoryMetrics {
    /// Messages that exhausted max_deliver (one per message).
    pub max_deliveries: Family<ConsumerLabels, Counter>,
    /// Messages terminated, by reason.
    pub terminated: Family<ReasonLabels, Counter>,
    /// Negative acknowledgements.
    pub naks: Family<ConsumerLabels, Counter>,
    /// 1 while the listener is connected and subscribed (durable mode: and
    /// its stream and consumer are set up).
    pub listener_up: Family<AccountLabels, Gauge>,
    /// Advisory messages received.
    pub received: Family<AccountLabels, Counter>,
    /// Advisory messages that could not be parsed.
    pub malformed: Family<AccountLabels, Counter>,
    /// Well-formed advisories of a type the exporter does not count.
    pub unknown: Family<AccountLabels, Counter>,
    /// Advisories already counted (re-sent by the server or redelivered).
    pub duplicates: Family<AccountLabels, Counter>,
    /// Advisory messages the exporter's own NATS client dropped.
    pub dropped: Family<AccountLabels, Counter>,
    /// Dead-letter copies stored (PubAck received).
    pub dead_letter_stored: Family<ConsumerLabels, Counter>,
    /// Dead messages whose original was gone before it could be copied.
    pub dead_letter_missing: Family<ReasonLabels, Counter>,
    /// Failed attempts to copy a dead message.
    pub dead_letter_errors: Family<AccountLabels, Counter>,
    /// Dead messages whose copy was given up after every attempt failed.
    pub dead_letter_failed: Family<ConsumerLabels, Counter>,
}

impl AdvisoryMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let m = AdvisoryMetrics::default();
        registry.register(
            "nats_delivery_jetstream_max_deliveries",
            "Messages that exhausted the consumer's max_deliver, one per message, from JetStream advisories",
            m.max_deliveries.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_terminated",
            "Messages terminated, by reason (client, stream_limits, unacked_deleted, other), from JetStream advisories",
            m.terminated.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_naks",
            "Negative acknowledgements of deliveries, from JetStream advisories",
            m.naks.clone(),
        );
        registry.register(
            "nats_delivery_advisory_listener_up",
            "1 while the advisory listener of the account is connected and subscribed, else 0",
            m.listener_up.clone(),
        );
        registry.register(
            "nats_delivery_advisories_received",
            "Advisory messages received by the exporter",
            m.received.clone(),
        );
        registry.register(
            "nats_delivery_advisories_malformed",
            "Advisory messages that were not a valid advisory (not JSON or missing fields)",
            m.malformed.clone(),
        );
        registry.register(
            "nats_delivery_advisories_unknown",
            "Well-formed advisories of a type the exporter does not count",
            m.unknown.clone(),
        );
        registry.register(
            "nats_delivery_advisories_duplicate",
            "Advisories not counted again because the same event was already counted",
            m.duplicates.clone(),
        );
        registry.register(
            "nats_delivery_exporter_dropped_messages",
            "Advisory messages dropped by the exporter's own NATS client because its subscription buffer was full",
            m.dropped.clone(),
        );
        registry.register(
            "nats_delivery_dead_letter_stored",
            "Copies of dead messages stored in the dead-letter stream (acknowledged by the server)",
            m.dead_letter_stored.clone(),
        );
        registry.register(
            "nats_delivery_dead_letter_missing",
            "Dead messages that could not be copied because the original was already gone, by reason",
            m.dead_letter_missing.clone(),
        );
        registry.register(
            "nats_delivery_dead_letter_errors",
            "Failed attempts to copy a dead message into the dead-letter stream",
            m.dead_letter_errors.clone(),
        );
        registry.register(
            "nats_delivery_dead_letter_failed",
            "Dead messages not copied because every attempt failed; the copy was given up",
            m.dead_letter_failed.clone(),
        );
        m
    }

    /// The per-account series that exist from the start (zeros, so alerts
    /// and `increase()` see a series before the first event).
    pub fn init_account(&self, account: &str) {
        let l = AccountLabels {
            account: account.to_string(),
        };
        let _ = self.listener_up.get_or_create(&l);
        let _ = self.received.get_or_create(&l);
        let _ = self.malformed.get_or_create(&l);
        let _ = self.unknown.get_or_create(&l);
        let _ = self.duplicates.get_or_create(&l);
        let _ = self.dropped.get_or_create(&l);
    }

    /// Sets the account's `listener_up` gauge.
    pub fn set_up(&self, account: &str, up: bool) {
        self.listener_up
            .get_or_create(&AccountLabels {
                account: account.to_string(),
            })
            .set(i64::from(up));
    }
}
