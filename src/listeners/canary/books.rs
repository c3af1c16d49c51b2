//! What one account's canary has counted, and its `Collector`: the counts
//! of a scrape are read under one lock, so `produced == received + lost +
//! pending` holds in every exposition, not only over time.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::ledger::Ledger;
use super::StreamBounds;
use crate::lock::LockOrRecover;
use crate::text::families::{counter_family, gauge_family};
use prometheus_client::encoding::EncodeLabelSet;

/// `{account}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AccountLabels {
    /// Account name as configured.
    pub(crate) account: String,
}

/// The `kind` values of `nats_delivery_canary_errors_total`, all written
/// from the start (at 0).
pub(crate) const ERROR_KINDS: [&str; 6] = [
    "connect",
    "setup",
    "read",
    "publish",
    "unanswered",
    "unexpected",
];

/// Upper bounds of the latency histogram, in seconds: from half a
/// millisecond on one machine to the longest deadline worth waiting.
const LATENCY_BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// One account's counts.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Where every message is.
    pub(crate) ledger: Ledger,
    /// Subject and payload bytes handed to the client for publishing.
    pub(crate) sent_bytes: u64,
    /// Whether the read-back consumer is set up and reading.
    pub(crate) up: bool,
    /// Failures by kind (one of [`ERROR_KINDS`]).
    pub(crate) errors: BTreeMap<&'static str, u64>,
}

/// One account's canary books: cheap to clone (shared handles).
#[derive(Clone, Debug)]
pub(crate) struct Books {
    /// The `account` label.
    pub(crate) account: String,
    counts: Arc<Mutex<Counts>>,
    /// Publish-to-receive times of the messages back in time.
    latency: Family<AccountLabels, Histogram, fn() -> Histogram>,
}

impl Books {
    /// The counts, locked.
    pub(crate) fn counts(&self) -> MutexGuard<'_, Counts> {
        // Every update leaves the counts consistent between statements.
        self.counts.lock_or_recover()
    }

    /// Counts one failure of `kind`.
    pub(crate) fn error(&self, kind: &'static str) {
        *self.counts().errors.entry(kind).or_insert(0) += 1;
    }

    /// Records one message back in time, `seconds` after it was sent.
    pub(crate) fn observe_latency(&self, seconds: f64) {
        self.latency
            .get_or_create(&AccountLabels {
                account: self.account.clone(),
            })
            .observe(seconds);
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Every account's canary: registered once, a `Collector` of the counts.
#[derive(Debug)]
pub(crate) struct CanaryCollector {
    accounts: Vec<Books>,
    deadline_seconds: f64,
    bounds: StreamBounds,
}

/// Registers the canary's families for `accounts`; returns each account's
/// books, in the same order.
pub(crate) fn register(
    registry: &mut Registry,
    accounts: &[String],
    deadline_seconds: f64,
    bounds: StreamBounds,
) -> Vec<Books> {
    let latency: Family<AccountLabels, Histogram, fn() -> Histogram> =
        Family::new_with_constructor(latency_histogram);
    registry.register(
        "nats_delivery_canary_latency_seconds",
        "Time from handing a canary message to the client to reading it back through the canary's consumer, for the messages back before the deadline",
        latency.clone(),
    );
    let books: Vec<Books> = accounts
        .iter()
        .map(|account| {
            let counts = Counts {
                errors: ERROR_KINDS.iter().map(|k| (*k, 0)).collect(),
                ..Counts::default()
            };
            Books {
                account: account.clone(),
                counts: Arc::new(Mutex::new(counts)),
                latency: latency.clone(),
            }
        })
        .collect();
    for b in &books {
        let _ = latency.get_or_create(&AccountLabels {
            account: b.account.clone(),
        });
    }
    registry.register_collector(Box::new(CanaryCollector {
        accounts: books.clone(),
        deadline_seconds,
        bounds,
    }));
    books
}

type Row<'a> = (Vec<(&'static str, &'a str)>, u64);

/// Reads one count.
type Read = dyn Fn(&Counts) -> u64;

impl Collector for CanaryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let guards: Vec<_> = self.accounts.iter().map(|b| (b, b.counts())).collect();
        let per = |f: &dyn Fn(&Counts) -> u64| -> Vec<Row<'_>> {
            guards
                .iter()
                .map(|(b, c)| (vec![("account", b.account.as_str())], f(c)))
                .collect()
        };
        let e = &mut encoder;
        let counters: [(&str, &str, &Read); 6] = [
            ("produced_messages", "Canary messages handed to the client for publishing to the canary stream.", &|c| c.ledger.produced),
            ("acknowledged_messages", "Canary messages the canary stream acknowledged (JetStream publish acknowledgements).", &|c| c.ledger.acknowledged),
            ("received_messages", "Canary messages read back through the canary's consumer before the deadline.", &|c| c.ledger.received),
            ("lost_messages", "Canary messages not read back before the deadline (--canary-deadline), whatever became of them; produced = received + lost + pending.", &|c| c.ledger.lost),
            ("late_messages", "Canary messages read back after the deadline had counted them lost, or read back a second time.", &|c| c.ledger.late),
            ("sent_bytes", "Subject and payload bytes of the canary messages handed to the client for publishing.", &|c| c.sent_bytes),
        ];
        for (name, help, f) in counters {
            counter_family(e, &format!("nats_delivery_canary_{name}"), help, per(f))?;
        }
        gauge_family(
            e,
            "nats_delivery_canary_pending_messages",
            "Canary messages out: handed to the client, not read back, the deadline not passed.",
            per(&|c| c.ledger.pending()),
        )?;
        gauge_family(
            e,
            "nats_delivery_canary_up",
            "Whether the canary's consumer is set up and reading (1) or not (0).",
            per(&|c| u64::from(c.up)),
        )?;
        let mut errors = Vec::new();
        for (b, c) in &guards {
            for (kind, n) in &c.errors {
                errors.push((vec![("account", b.account.as_str()), ("kind", *kind)], *n));
            }
        }
        counter_family(
            e,
            "nats_delivery_canary_errors",
            "Failures of the canary by kind: connect, setup (the stream or consumer could not be made), read (the consumer's reading ended), publish (refused), unanswered (no acknowledgement before the deadline), unexpected (a message on the canary's subject it did not send).",
            errors,
        )?;
        let fixed = |v: f64| -> Vec<(Vec<(&'static str, &str)>, f64)> {
            guards
                .iter()
                .map(|(b, _)| (vec![("account", b.account.as_str())], v))
                .collect()
        };
        gauge_family(
            e,
            "nats_delivery_canary_deadline_seconds",
            "How long a canary message may take to come back before it counts as lost.",
            fixed(self.deadline_seconds),
        )?;
        gauge_family(
            e,
            "nats_delivery_canary_stream_max_messages",
            "The most messages the canary stream the exporter creates may hold.",
            fixed(self.bounds.max_messages as f64),
        )?;
        gauge_family(
            e,
            "nats_delivery_canary_stream_max_bytes",
            "The most bytes the canary stream the exporter creates may hold.",
            fixed(self.bounds.max_bytes as f64),
        )?;
        gauge_family(
            e,
            "nats_delivery_canary_stream_max_age_seconds",
            "How long the canary stream the exporter creates keeps a message.",
            fixed(self.bounds.max_age.as_secs_f64()),
        )
    }
}
