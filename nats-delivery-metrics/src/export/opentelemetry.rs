//! The OpenTelemetry backend (feature `opentelemetry`): one observable
//! instrument per family, whose callback reads the counters when the meter
//! provider's reader collects. Names and attributes follow the NATS .NET
//! client 3.0's meter, the one NATS client that exports these already
//! (`messaging.system="nats"`, drops as `nats.client.messages.dropped`);
//! METRICS.md ("OpenTelemetry names") maps each to its Prometheus family.

use std::sync::Arc;

use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::KeyValue;

use super::families::{self as f, Family, Kind};
use super::{Sample, Value};
use crate::state::Shared;

/// How one family appears as an OpenTelemetry instrument.
struct Instrument {
    family: &'static Family,
    name: &'static str,
    unit: &'static str,
    /// `messaging.operation`, as the .NET client sets it on the same path.
    operation: Option<&'static str>,
}

const fn instrument(
    family: &'static Family,
    name: &'static str,
    unit: &'static str,
    operation: Option<&'static str>,
) -> Instrument {
    Instrument {
        family,
        name,
        unit,
        operation,
    }
}

const RECEIVE: Option<&str> = Some("receive");
const PUBLISH: Option<&str> = Some("publish");
const ACK: Option<&str> = Some("ack");
const MESSAGE: &str = "{message}";

/// Every family's instrument, in the order of [`f::ALL`].
// One row per family: a table reads better than one argument per line.
#[rustfmt::skip]
static INSTRUMENTS: [Instrument; 20] = [
    instrument(&f::DROPPED_MESSAGES, "nats.client.messages.dropped", MESSAGE, RECEIVE),
    instrument(&f::DROPPED_BYTES, "nats.client.dropped.bytes", "By", RECEIVE),
    instrument(&f::DELIVERED_MESSAGES, "messaging.client.consumed.messages", MESSAGE, RECEIVE),
    instrument(&f::PENDING_MESSAGES, "nats.client.pending.messages", MESSAGE, None),
    instrument(&f::PENDING_BYTES, "nats.client.pending.bytes", "By", None),
    instrument(&f::PENDING_HIGH_WATER, "nats.client.pending.messages.high_water", MESSAGE, None),
    instrument(&f::PENDING_MESSAGES_LIMIT, "nats.client.pending.messages.limit", MESSAGE, None),
    instrument(&f::PENDING_BYTES_LIMIT, "nats.client.pending.bytes.limit", "By", None),
    instrument(&f::SLOW_CONSUMER_EVENTS, "nats.client.slow_consumer.events", "{event}", None),
    instrument(&f::UNFORWARDED_MESSAGES, "nats.client.unforwarded.messages", MESSAGE, None),
    instrument(&f::CONNECTION_EVENTS, "nats.client.connection.events", "{event}", None),
    instrument(&f::REQUEST_NO_RESPONDERS, "nats.client.requests.no_responders", "{request}", Some("request")),
    instrument(&f::PUBLISHED_MESSAGES, "nats.client.jetstream.published.messages", MESSAGE, PUBLISH),
    instrument(&f::PUBLISH_DUPLICATES, "nats.client.jetstream.publish.duplicates", MESSAGE, PUBLISH),
    instrument(&f::PUBLISH_FAILURES, "nats.client.jetstream.publish.failures", MESSAGE, PUBLISH),
    instrument(&f::RECEIVED_MESSAGES, "nats.client.jetstream.received.messages", MESSAGE, RECEIVE),
    instrument(&f::REDELIVERED_MESSAGES, "nats.client.jetstream.redelivered.messages", MESSAGE, RECEIVE),
    instrument(&f::ACKNOWLEDGEMENTS, "nats.client.jetstream.acknowledgements", "{acknowledgement}", ACK),
    instrument(&f::ACKNOWLEDGEMENT_ERRORS, "nats.client.jetstream.acknowledgement.errors", "{acknowledgement}", ACK),
    instrument(&f::PULL_BATCH_RATIO, "nats.client.jetstream.pull.batch_ratio", "1", None),
];

/// Creates the instruments of every family on `meter`. The SDK keeps their
/// callbacks (and so these metrics) as long as its meter provider lives.
pub(crate) fn register(shared: &Arc<Shared>, meter: &Meter) {
    for instrument in INSTRUMENTS.iter() {
        let family = instrument.family;
        let shared = shared.clone();
        let samples = move || super::collect_family(&shared, family);
        let (name, help, unit) = (instrument.name, family.help, instrument.unit);
        match family.kind {
            Kind::Counter => {
                meter
                    .u64_observable_counter(name)
                    .with_description(help)
                    .with_unit(unit)
                    .with_callback(move |o| observe(instrument, &samples(), o, count))
                    .build();
            }
            Kind::Gauge => {
                meter
                    .u64_observable_gauge(name)
                    .with_description(help)
                    .with_unit(unit)
                    .with_callback(move |o| observe(instrument, &samples(), o, count))
                    .build();
            }
            Kind::Ratio => {
                meter
                    .f64_observable_gauge(name)
                    .with_description(help)
                    .with_unit(unit)
                    .with_callback(move |o| observe(instrument, &samples(), o, Value::as_f64))
                    .build();
            }
        }
    }
}

fn count(value: Value) -> u64 {
    match value {
        Value::Count(n) => n,
        Value::Ratio(r) => r as u64,
    }
}

fn observe<T>(
    instrument: &'static Instrument,
    samples: &[Sample],
    observer: &dyn AsyncInstrument<T>,
    value: fn(Value) -> T,
) {
    for sample in samples {
        let mut attributes = vec![KeyValue::new("messaging.system", "nats")];
        if let Some(operation) = instrument.operation {
            attributes.push(KeyValue::new("messaging.operation", operation));
        }
        attributes.extend(
            sample
                .label_pairs(instrument.family)
                .map(|(name, v)| KeyValue::new(name, v.to_string())),
        );
        observer.observe(value(sample.value), &attributes);
    }
}

#[cfg(test)]
mod tests {
    use super::f::ALL;
    use super::*;

    /// One instrument per family, in the order of `ALL`, each name once.
    #[test]
    fn every_family_has_one_instrument() {
        assert_eq!(INSTRUMENTS.len(), ALL.len());
        for (instrument, family) in INSTRUMENTS.iter().zip(ALL.iter()) {
            assert!(std::ptr::eq(instrument.family, *family), "{}", family.name);
        }
        let mut names: Vec<&str> = INSTRUMENTS.iter().map(|i| i.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), INSTRUMENTS.len());
    }
}
