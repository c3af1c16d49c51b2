//! The report body as it arrives, and the bounded form the exporter keeps:
//! every label value is length-limited, every list is capped, duplicates are
//! merged, and what does not fit is folded into `__overflow__` and counted.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ReportError, ReportLimits, MAX_PLAUSIBLE_VALUE};

/// Label value that collects subscriptions and consumers past a limit.
pub(crate) const OVERFLOW: &str = "__overflow__";

/// Connection event names re-exported; anything else in a report is ignored
/// so that a report cannot create unbounded label values.
pub(super) const EVENTS: [&str; 7] = [
    "connected",
    "disconnected",
    "lame_duck",
    "draining",
    "closed",
    "server_error",
    "client_error",
];
/// Acknowledgement kinds re-exported.
pub(super) const ACK_KINDS: [&str; 4] = ["ack", "nak", "term", "in_progress"];

#[derive(Debug, Deserialize)]
struct WireReport {
    version: Option<u32>,
    #[serde(default)]
    client: String,
    #[serde(default)]
    instance: String,
    sequence: Option<u64>,
    #[serde(default)]
    subscriptions: Vec<WireSubscription>,
    #[serde(default)]
    connection_events: BTreeMap<String, u64>,
    #[serde(default)]
    jetstream_consumers: Vec<WireConsumer>,
}

#[derive(Debug, Deserialize)]
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

#[derive(Debug, Deserialize)]
struct WireConsumer {
    stream: String,
    consumer: String,
    received_messages: Option<u64>,
    redelivered_messages: Option<u64>,
    #[serde(default)]
    acknowledgements: BTreeMap<String, u64>,
}

/// Counter values of one subscription, in [`SUB_COUNTERS`] order.
pub(super) type SubCounters = [Option<u64>; 4];
/// Names of the per-subscription counters, without `_total`.
pub(super) const SUB_COUNTERS: [&str; 4] = [
    "delivered_messages",
    "dropped_messages",
    "dropped_bytes",
    "slow_consumer_events",
];

/// Gauges of one subscription: pending messages, pending bytes, high water.
pub(super) type SubGauges = [Option<u64>; 3];

/// Counter values of one consumer: received, redelivered, then one per
/// [`ACK_KINDS`].
pub(super) type ConsumerCounters = [Option<u64>; 6];

/// What a report had to give up to fit the limits.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Folded {
    /// Subscriptions past the per-instance limit, counted under `__overflow__`.
    pub(crate) subscriptions: u64,
    /// Consumers past the per-instance limit, counted under `__overflow__`.
    pub(crate) consumers: u64,
    /// Label values longer than the limit, counted under `__overflow__`.
    pub(crate) labels: u64,
    /// Entries naming a subscription or consumer a second time, merged.
    pub(crate) duplicates: u64,
}

/// A report within the limits: names bounded, duplicates merged. Folding
/// past the per-instance entry limit happens later, against the names the
/// instance already has.
#[derive(Debug)]
pub(super) struct Bounded {
    pub(crate) client: String,
    pub(crate) instance: String,
    pub(crate) sequence: Option<u64>,
    pub(crate) subscriptions: BTreeMap<String, (SubCounters, SubGauges)>,
    pub(crate) events: BTreeMap<&'static str, u64>,
    pub(crate) consumers: BTreeMap<(String, String), ConsumerCounters>,
    pub(crate) folded: Folded,
}

/// Parses and bounds one report body that came on the subject of client
/// `sent_as` (see [`super::ClientReports::record`]).
pub(super) fn parse(
    payload: &[u8],
    limits: &ReportLimits,
    sent_as: Option<&str>,
) -> Result<Bounded, ReportError> {
    if payload.len() > limits.max_report_bytes {
        return Err(ReportError::TooLarge(payload.len()));
    }
    let report: WireReport =
        serde_json::from_slice(payload).map_err(|e| ReportError::Parse(e.to_string()))?;
    if report.version != Some(1) {
        return Err(ReportError::Version(report.version));
    }
    if report.client.is_empty() || report.instance.is_empty() {
        return Err(ReportError::Identity);
    }
    let too_long = |s: &str| s.len() > limits.max_label_bytes;
    if too_long(&report.client) || too_long(&report.instance) {
        return Err(ReportError::IdentityTooLong);
    }
    if sent_as != Some(report.client.as_str()) {
        return Err(ReportError::Subject);
    }
    if !plausible(&report) {
        return Err(ReportError::ImplausibleValue);
    }
    let mut folded = Folded::default();
    let mut label = |s: String| {
        if too_long(&s) {
            folded.labels += 1;
            OVERFLOW.to_string()
        } else {
            s
        }
    };
    let (subscriptions, sub_duplicates) = bound_subscriptions(report.subscriptions, &mut label);
    let (consumers, consumer_duplicates) = bound_consumers(report.jetstream_consumers, &mut label);
    folded.duplicates = sub_duplicates + consumer_duplicates;
    let events = report
        .connection_events
        .iter()
        .filter_map(|(e, n)| EVENTS.iter().find(|k| *k == e).map(|k| (*k, *n)))
        .collect();
    Ok(Bounded {
        client: report.client,
        instance: report.instance,
        sequence: report.sequence,
        subscriptions,
        events,
        consumers,
        folded,
    })
}

/// Whether every total and level of the report is below
/// [`MAX_PLAUSIBLE_VALUE`].
fn plausible(report: &WireReport) -> bool {
    let ok = |v: &Option<u64>| v.is_none_or(|v| v < MAX_PLAUSIBLE_VALUE);
    report.subscriptions.iter().all(|s| {
        [
            s.delivered_messages,
            s.dropped_messages,
            s.dropped_bytes,
            s.slow_consumer_events,
            s.pending_messages,
            s.pending_bytes,
            s.pending_messages_high_water,
        ]
        .iter()
        .all(ok)
    }) && report
        .connection_events
        .values()
        .all(|v| *v < MAX_PLAUSIBLE_VALUE)
        && report.jetstream_consumers.iter().all(|c| {
            ok(&c.received_messages)
                && ok(&c.redelivered_messages)
                && c.acknowledgements
                    .values()
                    .all(|v| *v < MAX_PLAUSIBLE_VALUE)
        })
}

/// The report's subscriptions by bounded name, entries naming one a second
/// time merged; returns them and how many were merged.
fn bound_subscriptions(
    wire: Vec<WireSubscription>,
    label: &mut impl FnMut(String) -> String,
) -> (BTreeMap<String, (SubCounters, SubGauges)>, u64) {
    let mut subscriptions: BTreeMap<String, (SubCounters, SubGauges)> = BTreeMap::new();
    let mut duplicates = 0;
    for s in wire {
        let counters = [
            s.delivered_messages,
            s.dropped_messages,
            s.dropped_bytes,
            s.slow_consumer_events,
        ];
        let gauges = [
            s.pending_messages,
            s.pending_bytes,
            s.pending_messages_high_water,
        ];
        let name = label(s.subscription);
        match subscriptions.get_mut(&name) {
            Some(existing) => {
                duplicates += u64::from(name != OVERFLOW);
                merge_subscription(existing, (counters, gauges));
            }
            None => {
                subscriptions.insert(name, (counters, gauges));
            }
        }
    }
    (subscriptions, duplicates)
}

/// The report's consumers by bounded stream and name, entries naming one a
/// second time added up; returns them and how many were merged.
fn bound_consumers(
    wire: Vec<WireConsumer>,
    label: &mut impl FnMut(String) -> String,
) -> (BTreeMap<(String, String), ConsumerCounters>, u64) {
    let mut consumers: BTreeMap<(String, String), ConsumerCounters> = BTreeMap::new();
    let mut duplicates = 0;
    for c in wire {
        let mut counters = [
            c.received_messages,
            c.redelivered_messages,
            None,
            None,
            None,
            None,
        ];
        for (kind, n) in &c.acknowledgements {
            if let Some(i) = ACK_KINDS.iter().position(|k| k == kind) {
                counters[2 + i] = Some(*n);
            }
        }
        let key = (label(c.stream), label(c.consumer));
        match consumers.get_mut(&key) {
            Some(existing) => {
                duplicates += u64::from(key.0 != OVERFLOW && key.1 != OVERFLOW);
                add_all(existing, &counters);
            }
            None => {
                consumers.insert(key, counters);
            }
        }
    }
    (consumers, duplicates)
}

/// Adds counters that are present; a value present on either side stays present.
pub(super) fn add_all<const N: usize>(into: &mut [Option<u64>; N], from: &[Option<u64>; N]) {
    for (a, b) in into.iter_mut().zip(from) {
        if let Some(b) = b {
            *a = Some(a.unwrap_or(0).saturating_add(*b));
        }
    }
}

/// Merges two entries of one subscription: counters and pending values add
/// up, the high-water mark is the larger one.
pub(super) fn merge_subscription(
    into: &mut (SubCounters, SubGauges),
    from: (SubCounters, SubGauges),
) {
    add_all(&mut into.0, &from.0);
    let [pm, pb, hw] = &mut into.1;
    let [fpm, fpb, fhw] = from.1;
    let mut pending = [*pm, *pb];
    add_all(&mut pending, &[fpm, fpb]);
    (*pm, *pb) = (pending[0], pending[1]);
    if let Some(f) = fhw {
        *hw = Some(hw.unwrap_or(0).max(f));
    }
}
