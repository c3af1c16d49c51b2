//! Small helpers that write one metric family from rows of (labels, value)
//! through prometheus-client's encoder. A family with no rows is not written
//! at all: a value the servers did not report is absent, not 0.

use std::fmt;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;

/// Writes a gauge family. `help` is written as given.
pub fn gauge_family<L, V, I>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: I,
) -> fmt::Result
where
    L: EncodeLabelSet,
    V: EncodeGaugeValue,
    I: IntoIterator<Item = (L, V)>,
{
    let mut rows = rows.into_iter().peekable();
    if rows.peek().is_none() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in rows {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// Writes a counter family; `name` is given without `_total`, which the encoder adds.
pub(crate) fn counter_family<L, V, I>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: I,
) -> fmt::Result
where
    L: EncodeLabelSet,
    V: EncodeCounterValue,
    I: IntoIterator<Item = (L, V)>,
{
    let mut rows = rows.into_iter().peekable();
    if rows.peek().is_none() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in rows {
        family
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
    }
    Ok(())
}

/// A gauge value that keeps integers integral, so they are written exactly
/// and without the cost of float formatting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    /// A count, a size or a sequence.
    U(u64),
    /// A signed integer.
    I(i64),
    /// A measured quantity (seconds, ratios).
    F(f64),
}

impl EncodeGaugeValue for Num {
    fn encode(&self, encoder: &mut prometheus_client::encoding::GaugeValueEncoder) -> fmt::Result {
        match *self {
            Num::U(v) => EncodeGaugeValue::encode(&v, encoder),
            Num::I(v) => EncodeGaugeValue::encode(&v, encoder),
            Num::F(v) => EncodeGaugeValue::encode(&v, encoder),
        }
    }
}
