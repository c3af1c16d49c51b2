//! Writes the streams and consumers chosen by [`crate::sources::jsz::select_leaders`] as gauge families.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use crate::jetstream::cardinality::fold::FoldedRow;
use crate::jetstream::cardinality::series::{ConsumerSeries, OptIn};
use crate::jetstream::{metadata_families, stream_origins};
use crate::sources::jsz::{ConsumerConfig, ConsumerInfo, ConsumerRow, StreamDetail, StreamRow};
use crate::text::consumer_labels::{push_label, write_family, BlockLabels};
use crate::text::families::{gauge_family, Num};
use crate::text::Format;

pub(crate) fn age(now: Option<f64>, then: Option<f64>) -> Option<f64> {
    let then = then?;
    Some((now? - then).max(0.0))
}

/// Writes the per-stream families.
pub(crate) fn encode_streams(enc: &mut DescriptorEncoder, streams: &[StreamRow]) -> fmt::Result {
    let g = |enc: &mut DescriptorEncoder,
             name: &str,
             help: &str,
             f: &dyn Fn(&StreamDetail) -> Option<Num>| {
        gauge_family(
            enc,
            name,
            help,
            streams.iter().filter_map(|(a, s)| {
                f(s).map(|v| ([("account", *a), ("stream", s.name.as_str())], v))
            }),
        )
    };
    let limit = |v: Option<i64>| v.filter(|x| *x > 0);
    g(
        enc,
        "nats_delivery_stream_messages",
        "Messages stored in the stream.",
        &|s| Some(Num::U(s.state.messages)),
    )?;
    g(
        enc,
        "nats_delivery_stream_bytes",
        "Bytes stored in the stream.",
        &|s| Some(Num::U(s.state.bytes)),
    )?;
    g(
        enc,
        "nats_delivery_stream_first_sequence",
        "First sequence stored in the stream.",
        &|s| Some(Num::U(s.state.first_seq)),
    )?;
    g(
        enc,
        "nats_delivery_stream_last_sequence",
        "Last sequence stored in the stream.",
        &|s| Some(Num::U(s.state.last_seq)),
    )?;
    g(
        enc,
        "nats_delivery_stream_consumers",
        "Consumers of the stream.",
        &|s| Some(Num::U(s.state.consumer_count)),
    )?;
    g(
        enc,
        "nats_delivery_stream_max_messages",
        "The stream's max_msgs limit; absent when unlimited.",
        &|s| limit(s.config.as_ref()?.max_msgs).map(Num::I),
    )?;
    g(
        enc,
        "nats_delivery_stream_max_bytes",
        "The stream's max_bytes limit; absent when unlimited.",
        &|s| limit(s.config.as_ref()?.max_bytes).map(Num::I),
    )?;
    g(
        enc,
        "nats_delivery_stream_max_age_seconds",
        "The stream's max_age limit; absent when unlimited.",
        &|s| limit(s.config.as_ref()?.max_age).map(|ns| Num::F(ns as f64 / 1e9)),
    )?;
    metadata_families::encode_streams(enc, streams)?;
    stream_origins::encode(enc, streams)
}

/// How many series [`encode_streams`] writes for `s`.
pub(crate) fn stream_series(s: &StreamDetail) -> u64 {
    let limited = |v: Option<i64>| u64::from(v.is_some_and(|x| x > 0));
    let limits = s.config.as_ref().map_or(0, |c| {
        limited(c.max_msgs) + limited(c.max_bytes) + limited(c.max_age)
    });
    5 + limits
        + u64::from(metadata_families::stream_metadata(s).is_some())
        + stream_origins::series(s)
}

/// How many series the per-consumer families in `series` write for consumer `c`.
pub(crate) fn consumer_series(c: &ConsumerInfo, now: Option<f64>, series: &ConsumerSeries) -> u64 {
    let gauges = CONSUMER_FAMILIES
        .iter()
        .filter(|f| series.writes(f.opt_in) && (f.value)(c, now).is_some())
        .count();
    let pinned = if series.writes(PINNED_OPT_IN) {
        c.pinned_groups().count()
    } else {
        0
    };
    let metadata = usize::from(metadata_families::consumer_metadata(c).is_some());
    (gauges + counters(series).count() + pinned + metadata) as u64
}

/// How many series the per-consumer families in `series` write for one folded row.
pub(crate) fn folded_series(series: &ConsumerSeries) -> u64 {
    let gauges = CONSUMER_FAMILIES
        .iter()
        .filter(|f| f.folded.is_some() && series.writes(f.opt_in))
        .count();
    (gauges + counters(series).count()) as u64
}

/// The per-consumer counters `series` writes.
fn counters(series: &ConsumerSeries) -> impl Iterator<Item = &'static ConsumerCounter> + '_ {
    CONSUMER_COUNTERS.iter().filter(|c| series.writes(c.opt_in))
}

fn config_value(c: &ConsumerInfo, field: fn(&ConsumerConfig) -> Option<i64>) -> Option<i64> {
    c.config.as_deref().and_then(field).filter(|v| *v >= 0)
}

/// One per-consumer family: its name, help, how to read its value, how
/// to read it from a stream's folded ephemerals (`None`: a sum would mean
/// nothing, the folded series has no sample), and whether it is written
/// only when asked for.
struct ConsumerFamily {
    name: &'static str,
    help: &'static str,
    value: fn(&ConsumerInfo, Option<f64>) -> Option<Num>,
    folded: Option<fn(&FoldedRow) -> u64>,
    opt_in: Option<OptIn>,
}

/// One per-consumer counter (name without `_total`): how to read it, and
/// the same from a folded row.
struct ConsumerCounter {
    name: &'static str,
    help: &'static str,
    value: fn(&ConsumerInfo) -> u64,
    folded: fn(&FoldedRow) -> u64,
    opt_in: Option<OptIn>,
}

/// The per-consumer counters, written after the gauges.
const CONSUMER_COUNTERS: [ConsumerCounter; 1] = [ConsumerCounter {
    name: "nats_delivery_consumer_deliveries",
    help: "Deliveries by this consumer, first or again (delivered.consumer_seq).",
    value: |c| c.delivered.consumer_seq,
    folded: |f| f.deliveries,
    opt_in: Some(OptIn::Deliveries),
}];

/// The per-consumer families, in the order they are written.
const CONSUMER_FAMILIES: [ConsumerFamily; 15] = [
    ConsumerFamily {
        name: "nats_delivery_consumer_pending_messages",
        help: "Messages in the stream this consumer has not yet delivered (backlog).",
        value: |c, _| Some(Num::U(c.num_pending)),
        folded: Some(|f| f.pending),
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_ack_pending_messages",
        help: "Messages delivered and not yet acknowledged.",
        value: |c, _| Some(Num::U(c.num_ack_pending)),
        folded: Some(|f| f.ack_pending),
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_max_ack_pending",
        help: "Unacknowledged messages at which the server stops delivering; absent when unlimited.",
        value: |c, _| config_value(c, |k| k.max_ack_pending).map(Num::I),
        folded: None,
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_lag_threshold_seconds",
        help: "The delivery lag this consumer may have, from its metadata (nats-delivery-exporter.lag_threshold_seconds); absent when unset.",
        value: |c, _| {
            let threshold = c.config.as_deref()?.metadata.as_ref()?.lag_threshold?;
            Some(Num::U(u64::from(threshold.get())))
        },
        folded: None,
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_redelivered_messages",
        help: "Unacknowledged messages that were delivered more than once (a level, not a count).",
        value: |c, _| Some(Num::U(c.num_redelivered)),
        folded: Some(|f| f.redelivered),
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_waiting_pulls",
        help: "Pull requests waiting for messages.",
        value: |c, _| Some(Num::U(c.num_waiting)),
        folded: Some(|f| f.waiting),
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_delivered_stream_sequence",
        help: "Stream sequence of the last message delivered.",
        value: |c, _| Some(Num::U(c.delivered.stream_seq)),
        folded: None,
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_ack_floor_stream_sequence",
        help: "Stream sequence below which every message is acknowledged.",
        value: |c, _| Some(Num::U(c.ack_floor.stream_seq)),
        folded: None,
        opt_in: Some(OptIn::AckFloorSequence),
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_max_deliver",
        help: "Deliveries after which a message is given up; absent when unlimited.",
        value: |c, _| config_value(c, |k| k.max_deliver).map(Num::I),
        folded: None,
        opt_in: Some(OptIn::MaxDeliver),
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_ack_wait_seconds",
        help: "Time before an unacknowledged message is delivered again.",
        value: |c, _| config_value(c, |k| k.ack_wait.get()).map(|ns| Num::F(ns as f64 / 1e9)),
        folded: None,
        opt_in: Some(OptIn::AckWait),
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_last_delivery_age_seconds",
        help: "Seconds since the consumer last delivered a message, by the server's clock; absent when never.",
        value: |c, now| age(now, c.delivered.last_active()).map(Num::F),
        folded: None,
        opt_in: Some(OptIn::LastDeliveryAge),
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_last_ack_age_seconds",
        help: "Seconds since a message of this consumer was last acknowledged, by the server's clock; absent when never.",
        value: |c, now| age(now, c.ack_floor.last_active()).map(Num::F),
        folded: None,
        opt_in: Some(OptIn::LastAckAge),
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_paused",
        help: "1 when the consumer is paused, 0 when not; absent on servers that do not report pausing (before 2.11).",
        value: |c, _| c.paused.map(|p| Num::U(u64::from(p))),
        folded: None,
        opt_in: None,
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_pause_remaining_seconds",
        help: "Seconds until a paused consumer resumes; absent when not paused.",
        value: |c, _| {
            let ns = c.pause_remaining.get().filter(|_| c.paused == Some(true))?;
            Some(Num::F(ns as f64 / 1e9))
        },
        folded: None,
        opt_in: Some(OptIn::PauseRemaining),
    },
    ConsumerFamily {
        name: "nats_delivery_consumer_folded_consumers",
        help: "Ephemeral consumers summed into this series (consumer=\"__ephemeral__\" only).",
        value: |_, _| None,
        folded: Some(|f| f.consumers),
        opt_in: None,
    },
];

/// The per-consumer family with a label of its own (`group`), written last.
const PINNED_OPT_IN: Option<OptIn> = Some(OptIn::PriorityGroupPinned);
const PINNED_FAMILY: (&str, &str) = (
    "nats_delivery_consumer_priority_group_pinned",
    "1 when the server has pinned a client to this priority group of a pinned_client consumer, 0 when none is pinned (2.11+).",
);

/// How many per-consumer families there are; the exporter writes them on
/// several threads, one family at a time, because at 10,000 consumers they
/// are most of a scrape's encoding work.
pub(crate) const CONSUMER_FAMILY_COUNT: usize =
    CONSUMER_FAMILIES.len() + CONSUMER_COUNTERS.len() + 2;

/// Appends per-consumer family number `index` (below [`CONSUMER_FAMILY_COUNT`])
/// for a block of `consumers`, then of the `folded` ephemerals (given with
/// the last block only); `labels` are the labels of both, in that order.
/// A family `series` does not write is left out.
pub(crate) fn write_consumer_family(
    out: &mut String,
    format: Format,
    (consumers, folded): (&[ConsumerRow], &[FoldedRow]),
    labels: BlockLabels,
    (index, series): (usize, &ConsumerSeries),
) {
    // Folded ephemerals have no metadata of their own.
    if index == CONSUMER_FAMILY_COUNT - 1 {
        return metadata_families::write_consumers(out, format, consumers, labels);
    }
    if index == CONSUMER_FAMILY_COUNT - 2 {
        // Folded ephemerals have no priority groups of their own.
        if series.writes(PINNED_OPT_IN) {
            write_pinned_groups(out, format, consumers, labels);
        }
        return;
    }
    let n = consumers.len();
    // A family without a folded value writes no folded series (a filter,
    // not an empty chain, so that the series' count stays bounded).
    let folded_series = |value: Option<fn(&FoldedRow) -> u64>| {
        let rows = folded.iter().enumerate();
        rows.filter_map(move |(i, f)| Some((labels.get(n + i), "", Num::U(value?(f)))))
    };
    if let Some(counter) = index
        .checked_sub(CONSUMER_FAMILIES.len())
        .and_then(|i| CONSUMER_COUNTERS.get(i))
    {
        if !series.writes(counter.opt_in) {
            return;
        }
        let rows = consumers.iter().enumerate();
        let value = counter.value;
        let written = rows
            .map(|(i, (_, _, c, _))| (labels.get(i), "", Num::U(value(c))))
            .chain(folded_series(Some(counter.folded)));
        let family = (counter.name, counter.help);
        return write_family(out, format, MetricType::Counter, family, written);
    }
    let family = &CONSUMER_FAMILIES[index];
    if !series.writes(family.opt_in) {
        return;
    }
    let series = consumers
        .iter()
        .enumerate()
        .filter_map(|(i, (_, _, c, now))| Some((labels.get(i), "", (family.value)(c, *now)?)))
        .chain(folded_series(family.folded));
    write_family(
        out,
        format,
        MetricType::Gauge,
        (family.name, family.help),
        series,
    );
}

/// Writes whether a client is pinned, per consumer and priority group. The
/// pinned client's id is left out: it changes at every pin.
fn write_pinned_groups(
    out: &mut String,
    format: Format,
    consumers: &[ConsumerRow],
    labels: BlockLabels,
) {
    let rows: Vec<(usize, String, bool)> = consumers
        .iter()
        .enumerate()
        .flat_map(|(i, (_, _, c, _))| {
            c.pinned_groups().map(move |(group, pinned)| {
                let mut more = ",".to_string();
                push_label(&mut more, "group", group);
                (i, more, pinned)
            })
        })
        .collect();
    let series = rows
        .iter()
        .map(|(i, more, pinned)| (labels.get(*i), more.as_str(), Num::U(u64::from(*pinned))));
    write_family(out, format, MetricType::Gauge, PINNED_FAMILY, series);
}
