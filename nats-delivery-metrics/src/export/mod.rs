//! What every backend exports, read from the shared counters when the
//! backend collects: the families of `families.rs` with their samples.
//! The backends only translate these into their own types, so the counting
//! exists once (`state.rs`, `stats.rs`, ...) whatever library exports it.
//! Collecting only reads memory: no I/O happens during a scrape.
// With no backend at all (`--no-default-features`) nothing reads them.
#![cfg_attr(
    not(any(
        feature = "prometheus-client",
        feature = "prometheus",
        feature = "metrics",
        feature = "opentelemetry"
    )),
    allow(dead_code)
)]

pub(crate) mod families;
#[cfg(feature = "metrics")]
pub(crate) mod metrics_facade;
#[cfg(feature = "opentelemetry")]
pub(crate) mod opentelemetry;
#[cfg(feature = "prometheus")]
pub(crate) mod prometheus;
#[cfg(feature = "prometheus-client")]
pub(crate) mod prometheus_client;

use std::sync::atomic::Ordering;

use crate::state::{LiveSnapshot, Shared, SubscriptionSnapshot};
use crate::PublishFailure;
use families::{Family, Group, ALL};

/// A sample's value: counts are exact integers; the pull batch ratio is
/// the one fraction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    Count(u64),
    Ratio(f64),
}

impl Value {
    #[cfg_attr(
        not(any(feature = "prometheus", feature = "metrics", feature = "opentelemetry")),
        allow(dead_code)
    )]
    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Value::Count(n) => n as f64,
            Value::Ratio(r) => r,
        }
    }
}

/// One series: its label values, in the order of the family's label names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) labels: Vec<String>,
    pub(crate) value: Value,
}

impl Sample {
    /// `(name, value)` label pairs.
    pub(crate) fn label_pairs<'a>(
        &'a self,
        family: &'static Family,
    ) -> impl Iterator<Item = (&'static str, &'a str)> {
        family
            .labels
            .iter()
            .copied()
            .zip(self.labels.iter().map(String::as_str))
    }
}

/// A family with the samples one collection found (possibly none: a
/// backend then leaves the family out).
#[cfg_attr(
    not(any(
        feature = "prometheus-client",
        feature = "prometheus",
        feature = "metrics"
    )),
    allow(dead_code)
)]
#[derive(Debug)]
pub(crate) struct Collected {
    pub(crate) family: &'static Family,
    pub(crate) samples: Vec<Sample>,
}

/// Collects one group's families, handing each to `add`.
type Add<'a> = dyn FnMut(&'static Family, Vec<Sample>) + 'a;

/// Every family of `shared`, in the order of [`ALL`].
#[cfg_attr(
    not(any(
        feature = "prometheus-client",
        feature = "prometheus",
        feature = "metrics"
    )),
    allow(dead_code)
)]
pub(crate) fn collect(shared: &Shared) -> Vec<Collected> {
    let mut out = Vec::with_capacity(ALL.len());
    let mut add =
        |family: &'static Family, samples: Vec<Sample>| out.push(Collected { family, samples });
    for group in [
        Group::Subscriptions,
        Group::Connection,
        Group::Publishing,
        Group::Consumers,
    ] {
        collect_group(shared, group, &mut add);
    }
    out
}

/// The samples of `family` alone, read from its group's counters only (a
/// backend that collects family by family).
#[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
pub(crate) fn collect_family(shared: &Shared, family: &'static Family) -> Vec<Sample> {
    let mut found = Vec::new();
    collect_group(shared, family.group, &mut |f, samples| {
        if f.name == family.name {
            found = samples;
        }
    });
    found
}

fn collect_group(shared: &Shared, group: Group, add: &mut Add) {
    match group {
        Group::Subscriptions => subscriptions(shared, add),
        Group::Connection => connection(shared, add),
        Group::Publishing => publishes(shared, add),
        Group::Consumers => consumers(shared, add),
    }
}

fn count(labels: Vec<String>, n: u64) -> Sample {
    Sample {
        labels,
        value: Value::Count(n),
    }
}

fn subscriptions(shared: &Shared, add: &mut Add) {
    use families::*;
    let subs = shared.snapshot();
    let per_subscription = |value: &dyn Fn(&SubscriptionSnapshot) -> Option<u64>| {
        subs.iter()
            .filter_map(|s| {
                let labels = vec![shared.client.clone(), s.name.to_string()];
                value(s).map(|n| count(labels, n))
            })
            .collect()
    };
    let counter = |f: fn(&SubscriptionSnapshot) -> u64| {
        per_subscription(&|s: &SubscriptionSnapshot| s.instrumented.then(|| f(s)))
    };
    add(&DROPPED_MESSAGES, counter(|s| s.dropped));
    add(&DROPPED_BYTES, counter(|s| s.dropped_bytes));
    add(&DELIVERED_MESSAGES, counter(|s| s.delivered));
    let gauge = |f: fn(&LiveSnapshot) -> u64| per_subscription(&|s| s.live.map(|l| f(&l)));
    add(&PENDING_MESSAGES, gauge(|l| l.pending_messages));
    add(&PENDING_BYTES, gauge(|l| l.pending_bytes));
    add(&PENDING_HIGH_WATER, gauge(|l| l.high_water));
    // An unlimited side (u64::MAX, also when summed) has no limit gauge.
    let limit = |f: fn(&LiveSnapshot) -> u64| {
        per_subscription(&|s| {
            s.live
                .map(|l| f(&l))
                .filter(|v| *v != crate::PendingLimits::UNLIMITED)
        })
    };
    add(&PENDING_MESSAGES_LIMIT, limit(|l| l.limit_messages));
    add(&PENDING_BYTES_LIMIT, limit(|l| l.limit_bytes));
    add(
        &SLOW_CONSUMER_EVENTS,
        per_subscription(&|s| Some(s.slow_consumer_events)),
    );
}

fn connection(shared: &Shared, add: &mut Add) {
    let client = || shared.client.clone();
    let unforwarded = shared.unforwarded().map(|n| count(vec![client()], n));
    add(
        &families::UNFORWARDED_MESSAGES,
        unforwarded.into_iter().collect(),
    );
    let events = shared.events.values();
    add(
        &families::CONNECTION_EVENTS,
        events
            .iter()
            .map(|(e, n)| count(vec![client(), e.to_string()], *n))
            .collect(),
    );
}

fn publishes(shared: &Shared, add: &mut Add) {
    use families::*;
    let client = || shared.client.clone();
    let stats = &shared.publishes;
    let requesting = stats.requesting.load(Ordering::Acquire);
    let no_responders = requesting.then(|| count(vec![client()], stats.no_responders()));
    add(&REQUEST_NO_RESPONDERS, no_responders.into_iter().collect());
    // The publish families appear (at 0) once a JetStream publisher exists.
    let publishing = stats.publishing.load(Ordering::Acquire);
    let one = |n: u64| -> Vec<Sample> {
        publishing
            .then(|| count(vec![client()], n))
            .into_iter()
            .collect()
    };
    add(&PUBLISHED_MESSAGES, one(stats.stored()));
    add(&PUBLISH_DUPLICATES, one(stats.duplicates()));
    let failures = PublishFailure::ALL
        .iter()
        .filter(|_| publishing)
        .map(|r| count(vec![client(), r.label().to_string()], stats.failures(*r)))
        .collect();
    add(&PUBLISH_FAILURES, failures);
}

fn consumers(shared: &Shared, add: &mut Add) {
    use families::*;
    let consumers = shared.consumer_snapshot();
    let labels = |c: &crate::jetstream::ConsumerSnapshot| {
        vec![shared.client.clone(), c.stream.clone(), c.consumer.clone()]
    };
    let per_consumer = |f: fn(&crate::jetstream::ConsumerSnapshot) -> u64| {
        consumers.iter().map(|c| count(labels(c), f(c))).collect()
    };
    add(&RECEIVED_MESSAGES, per_consumer(|c| c.received));
    add(&REDELIVERED_MESSAGES, per_consumer(|c| c.redelivered));
    let mut acks = Vec::new();
    for c in &consumers {
        for (kind, n) in c.acknowledgements {
            let mut l = labels(c);
            l.push(kind.to_string());
            acks.push(count(l, n));
        }
    }
    add(&ACKNOWLEDGEMENTS, acks);
    add(&ACKNOWLEDGEMENT_ERRORS, per_consumer(|c| c.ack_errors));
    let ratios = consumers
        .iter()
        .filter_map(|c| {
            c.batch_ratio.map(|r| Sample {
                labels: labels(c),
                value: Value::Ratio(r),
            })
        })
        .collect();
    add(&PULL_BATCH_RATIO, ratios);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `collect` gives every family once, in the order of `ALL`, and every
    /// sample as many label values as its family has label names.
    #[test]
    fn collect_follows_the_family_table() {
        let shared = Shared::new("c".to_string());
        shared.publishes.enable_publishing();
        shared.publishes.enable_requests();
        crate::ConsumerMetrics::new(&shared, "S", "C").check_pull_batch(1, 3);
        let collected = collect(&shared);
        let order: Vec<_> = collected.iter().map(|c| c.family.name).collect();
        let table: Vec<_> = ALL.iter().map(|f| f.name).collect();
        assert_eq!(order, table);
        for c in &collected {
            for s in &c.samples {
                assert_eq!(s.labels.len(), c.family.labels.len(), "{}", c.family.name);
            }
            assert_eq!(
                collect_family(&shared, c.family),
                c.samples,
                "{}",
                c.family.name
            );
        }
    }
}
