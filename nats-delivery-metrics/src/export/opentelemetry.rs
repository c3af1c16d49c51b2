//! The OpenTelemetry backend (feature `opentelemetry`): one observable
//! instrument per family, whose callback reads the counters when the meter
//! provider's reader collects. Names are the Prometheus names without
//! `_total` (OpenTelemetry's Prometheus translation adds it to counters).

use std::sync::Arc;

use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::KeyValue;

use super::families::{Family, Kind, ALL};
use super::{Sample, Value};
use crate::state::Shared;

/// Creates the instruments of every family on `meter`. The SDK keeps their
/// callbacks (and so these metrics) as long as its meter provider lives.
pub(crate) fn register(shared: &Arc<Shared>, meter: &Meter) {
    for &family in ALL.iter() {
        let shared = shared.clone();
        let samples = move || super::collect_family(&shared, family);
        match family.kind {
            Kind::Counter => {
                meter
                    .u64_observable_counter(family.name)
                    .with_description(family.help)
                    .with_callback(move |o| observe(family, &samples(), o, count))
                    .build();
            }
            Kind::Gauge => {
                meter
                    .u64_observable_gauge(family.name)
                    .with_description(family.help)
                    .with_callback(move |o| observe(family, &samples(), o, count))
                    .build();
            }
            Kind::Ratio => {
                meter
                    .f64_observable_gauge(family.name)
                    .with_description(family.help)
                    .with_callback(move |o| observe(family, &samples(), o, Value::as_f64))
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
    family: &'static Family,
    samples: &[Sample],
    observer: &dyn AsyncInstrument<T>,
    value: fn(Value) -> T,
) {
    for sample in samples {
        let attributes: Vec<KeyValue> = sample
            .label_pairs(family)
            .map(|(name, v)| KeyValue::new(name, v.to_string()))
            .collect();
        observer.observe(value(sample.value), &attributes);
    }
}
