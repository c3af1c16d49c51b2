//! The `_info` families of the metadata keys `--jsz-metadata-labels` names:
//! one series per stream and per consumer whose metadata holds one of them,
//! each such key's value under its `metadata_` label.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use crate::sources::jsz::{ConsumerInfo, ConsumerRow, Metadata, StreamDetail, StreamRow};
use crate::text::consumer_labels::{push_label, write_family, BlockLabels};
use crate::text::families::{gauge_family, Num};
use crate::text::Format;

/// Writes the streams' family.
pub(crate) fn encode_streams(enc: &mut DescriptorEncoder, streams: &[StreamRow]) -> fmt::Result {
    let metadata = streams.iter().filter_map(|(a, s)| {
        let m = stream_metadata(s)?;
        let mut labels = vec![("account", *a), ("stream", s.name.as_str())];
        labels.extend(m.labels());
        Some((labels, Num::U(1)))
    });
    gauge_family(
        enc,
        STREAM_METADATA_FAMILY.0,
        STREAM_METADATA_FAMILY.1,
        metadata,
    )
}

/// The stream's metadata when it holds a value of a named key.
pub(crate) fn stream_metadata(s: &StreamDetail) -> Option<&Metadata> {
    let m = s.config.as_ref()?.metadata.as_deref()?;
    m.has_labels().then_some(m)
}

/// The consumer's metadata when it holds a value of a named key.
pub(crate) fn consumer_metadata(c: &ConsumerInfo) -> Option<&Metadata> {
    let m = c.config.as_deref()?.metadata.as_deref()?;
    m.has_labels().then_some(m)
}

const STREAM_METADATA_FAMILY: (&str, &str) = (
    "nats_delivery_stream_metadata_info",
    "1 per stream whose metadata holds a key --jsz-metadata-labels names, each such key a metadata_ label.",
);

const CONSUMER_METADATA_FAMILY: (&str, &str) = (
    "nats_delivery_consumer_metadata_info",
    "1 per consumer whose metadata holds a key --jsz-metadata-labels names, each such key a metadata_ label.",
);

/// Writes 1 per consumer whose metadata holds a named key, each such key's
/// value under its `metadata_` label.
pub(crate) fn write_consumers(
    out: &mut String,
    format: Format,
    consumers: &[ConsumerRow],
    labels: BlockLabels,
) {
    let rows: Vec<(usize, String)> = consumers
        .iter()
        .enumerate()
        .filter_map(|(i, (_, _, c, _))| {
            let mut more = String::new();
            for (name, value) in consumer_metadata(c)?.labels() {
                more.push(',');
                push_label(&mut more, name, value);
            }
            Some((i, more))
        })
        .collect();
    let series = (rows.iter()).map(|(i, more)| (labels.get(*i), more.as_str(), Num::U(1)));
    write_family(
        out,
        format,
        MetricType::Gauge,
        CONSUMER_METADATA_FAMILY,
        series,
    );
}
