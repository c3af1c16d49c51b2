//! The advisory listener's metrics, registered once.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::totals::Totals;

/// Raises a counter to `v` (never lowers it).
fn raise(c: &Counter, v: u64) {
    c.inner().fetch_max(v, std::sync::atomic::Ordering::Relaxed);
}

/// `{account}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccountLabels {
    /// Account name as configured.
    pub account: String,
}

/// `{account,stream,consumer}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ConsumerLabels {
    /// Account name as configured.
    pub(crate) account: String,
    /// Stream name.
    pub(crate) stream: String,
    /// Consumer name.
    pub(crate) consumer: String,
}

/// `{account,stream,consumer,reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    /// Account name as configured.
    pub(crate) account: String,
    /// Stream name.
    pub(crate) stream: String,
    /// Consumer name.
    pub(crate) consumer: String,
    /// A value from a small fixed set.
    pub(crate) reason: String,
}

/// `{account,kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    /// Account name as configured.
    pub(crate) account: String,
    /// What failed: a value from a small fixed set.
    pub(crate) kind: String,
}

/// `{account,stream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StreamLabels {
    /// Account name as configured.
    pub(crate) account: String,
    /// Stream name.
    pub(crate) stream: String,
}

/// The API audit families ([`super::api_audit`]); cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub(crate) struct ApiAuditMetrics {
    /// Messages removed by successful purges (the server's `purged`).
    pub(crate) purged: Family<StreamLabels, Counter>,
    /// Messages removed by successful message deletes.
    pub(crate) deleted: Family<StreamLabels, Counter>,
    /// Audit advisories that were not valid.
    pub(crate) malformed: Family<AccountLabels, Counter>,
    /// Purges and deletes counted under stream `__overflow__`.
    pub(crate) folded: Family<AccountLabels, Counter>,
}

impl ApiAuditMetrics {
    /// Registers the families.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "nats_delivery_jetstream_stream_purged_messages",
            "Messages removed from the stream by successful purges, the server's own purged figure, from JetStream API audit advisories while the exporter runs",
            self.purged.clone(),
        );
        registry.register(
            "nats_delivery_jetstream_stream_deleted_messages",
            "Messages removed from the stream by successful message deletes, from JetStream API audit advisories while the exporter runs",
            self.deleted.clone(),
        );
        registry.register(
            "nats_delivery_api_audits_malformed",
            "JetStream API audit advisories that were not valid (not JSON, missing fields, or a purge or delete answered with something else)",
            self.malformed.clone(),
        );
        registry.register(
            "nats_delivery_api_audits_folded",
            "Purges and message deletes counted under stream __overflow__ because the account reached --advisories-max-series distinct streams",
            self.folded.clone(),
        );
    }

    /// The account's series that exist from the start (zeros).
    pub(crate) fn init_account(&self, account: &str) {
        let l = AccountLabels {
            account: account.to_string(),
        };
        let _ = self.malformed.get_or_create(&l);
        let _ = self.folded.get_or_create(&l);
    }
}

/// Every advisory metric; cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub struct AdvisoryMetrics {
    /// Messages that exhausted max_deliver (one per message).
    pub(crate) max_deliveries: Family<ConsumerLabels, Counter>,
    /// Messages terminated, by reason.
    pub(crate) terminated: Family<ReasonLabels, Counter>,
    /// Negative acknowledgements.
    pub(crate) naks: Family<ConsumerLabels, Counter>,
    /// 1 while the listener is connected and subscribed (durable mode: and
    /// its stream and consumer are set up).
    pub listener_up: Family<AccountLabels, Gauge>,
    /// Advisory messages received.
    pub received: Family<AccountLabels, Counter>,
    /// Advisory messages that could not be parsed.
    pub(crate) malformed: Family<AccountLabels, Counter>,
    /// Well-formed advisories of a type the exporter does not count.
    pub(crate) unknown: Family<AccountLabels, Counter>,
    /// Advisories already counted (re-sent by the server or redelivered).
    pub(crate) duplicates: Family<AccountLabels, Counter>,
    /// Advisory messages the exporter's own NATS client dropped.
    pub dropped: Family<AccountLabels, Counter>,
    /// Dead-letter copies stored (PubAck received).
    pub(crate) dead_letter_stored: Family<ConsumerLabels, Counter>,
    /// Dead messages whose original was gone before it could be copied.
    pub(crate) dead_letter_missing: Family<ReasonLabels, Counter>,
    /// Advisories counted in the `__overflow__` series because the account
    /// reached its cap of distinct (stream, consumer) series.
    pub(crate) folded: Family<AccountLabels, Counter>,
    /// Listener failures (each ends a session, which is set up again), by kind.
    pub(crate) listener_errors: Family<ErrorLabels, Counter>,
    /// Failed attempts to copy a dead message.
    pub(crate) dead_letter_errors: Family<AccountLabels, Counter>,
    /// Dead messages whose copy was given up after every attempt failed.
    pub(crate) dead_letter_failed: Family<ConsumerLabels, Counter>,
    /// Messages removed by purges and message deletes (API audits).
    pub(crate) api_audit: ApiAuditMetrics,
    /// Abandoned batches and priority-group pins ([`super::since_2_11`]).
    pub(crate) since_2_11: super::since_2_11::Since211Metrics,
    /// Drop audits of the live listener that completed (a round trip to
    /// the server, then the buffers drained), not exported: an audit leaves
    /// no other trace, and a test checking that no late audit over-counts
    /// waits on this instead of on a clock.
    pub drop_audits: Counter,
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
            "nats_delivery_advisories_folded",
            "Advisories counted in the __overflow__ stream and consumer because the account reached --advisories-max-series distinct series",
            m.folded.clone(),
        );
        registry.register(
            "nats_delivery_advisory_listener_errors",
            "Failures that stopped the advisory listener of the account until it set up again, by kind",
            m.listener_errors.clone(),
        );
        registry.register(
            "nats_delivery_exporter_dropped_messages",
            "Advisory messages dropped by the exporter because its NATS client's subscription buffer or its listener's queue (messages or bytes) was full",
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
        m.api_audit.register(registry);
        m.since_2_11.register(registry);
        m
    }

    /// The per-account series that exist from the start (zeros, so alerts
    /// and `increase()` see a series before the first event). In durable
    /// mode the account's counters appear only once the stored totals are
    /// loaded ([`Self::show_account`]): a zero followed by the stored value
    /// would look like an increase to Prometheus.
    pub(crate) fn init_account(&self, account: &str, durable: bool) {
        let l = AccountLabels {
            account: account.to_string(),
        };
        let _ = self.listener_up.get_or_create(&l);
        let _ = self.dropped.get_or_create(&l);
        if !durable {
            self.show_account(account, &Totals::default());
        }
    }

    /// Shows the stored account totals: each counter rises to the stored
    /// value and never falls (replicas' totals arrive in any order).
    pub(crate) fn show_account(&self, account: &str, t: &Totals) {
        let l = AccountLabels {
            account: account.to_string(),
        };
        for (family, v) in [
            (&self.received, t.received),
            (&self.malformed, t.malformed),
            (&self.unknown, t.unknown),
            (&self.duplicates, t.duplicates),
            (&self.folded, t.folded),
            (&self.dead_letter_errors, t.dead_letter_errors),
        ] {
            raise(&family.get_or_create(&l), v);
        }
    }

    /// Shows the stored totals of one (stream, consumer) series, or of one
    /// stream's advisories of [`super::since_2_11`] (no consumer).
    pub(crate) fn show_series(&self, account: &str, t: &Totals) {
        if t.consumer.is_empty() {
            self.since_2_11.show(account, t);
            return;
        }
        let l = ConsumerLabels {
            account: account.to_string(),
            stream: t.stream.clone(),
            consumer: t.consumer.clone(),
        };
        let reason = |reason: &str| ReasonLabels {
            account: l.account.clone(),
            stream: l.stream.clone(),
            consumer: l.consumer.clone(),
            reason: reason.to_string(),
        };
        for (family, v) in [
            (&self.max_deliveries, t.max_deliveries),
            (&self.naks, t.naks),
            (&self.dead_letter_stored, t.dead_letter_stored),
            (&self.dead_letter_failed, t.dead_letter_failed),
        ] {
            if v > 0 {
                raise(&family.get_or_create(&l), v);
            }
        }
        for (r, v) in &t.terminated {
            raise(&self.terminated.get_or_create(&reason(r)), *v);
        }
        for (r, v) in &t.dead_letter_missing {
            raise(&self.dead_letter_missing.get_or_create(&reason(r)), *v);
        }
    }

    /// Removes every counter of `account` that mirrors stored totals: the
    /// store was emptied (a server restarted without its data), so the
    /// counters start again from what the new store holds, a reset
    /// Prometheus understands.
    pub(crate) fn forget_account(&self, account: &str, series: &[(String, String)]) {
        let l = AccountLabels {
            account: account.to_string(),
        };
        for family in [
            &self.received,
            &self.malformed,
            &self.unknown,
            &self.duplicates,
            &self.folded,
            &self.dead_letter_errors,
        ] {
            family.remove(&l);
        }
        for (stream, consumer) in series {
            if consumer.is_empty() {
                self.since_2_11.forget(account, stream);
                continue;
            }
            let c = ConsumerLabels {
                account: account.to_string(),
                stream: stream.clone(),
                consumer: consumer.clone(),
            };
            for family in [
                &self.max_deliveries,
                &self.naks,
                &self.dead_letter_stored,
                &self.dead_letter_failed,
            ] {
                family.remove(&c);
            }
            for r in super::parse::REASON_LABELS {
                let rl = ReasonLabels {
                    account: c.account.clone(),
                    stream: c.stream.clone(),
                    consumer: c.consumer.clone(),
                    reason: r.to_string(),
                };
                self.terminated.remove(&rl);
                self.dead_letter_missing.remove(&rl);
            }
        }
    }

    /// Counts one listener failure of `kind`.
    pub(crate) fn listener_error(&self, account: &str, kind: &str) {
        self.listener_errors
            .get_or_create(&ErrorLabels {
                account: account.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Sets the account's `listener_up` gauge.
    pub(crate) fn set_up(&self, account: &str, up: bool) {
        self.listener_up
            .get_or_create(&AccountLabels {
                account: account.to_string(),
            })
            .set(i64::from(up));
    }
}
