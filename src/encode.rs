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
pub fn counter_family<L, V, I>(
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
