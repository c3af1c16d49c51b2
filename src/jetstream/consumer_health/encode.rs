//! Writes the consumer health families: one family per part, so that the
//! exporter encodes them in parallel like the other per-consumer families.

use prometheus_client::metrics::MetricType;

use super::{Age, ConsumerHealthRow, Status};
use crate::jetstream::cardinality::series::{ConsumerSeries, OptIn, StatusSeries};
use crate::text::consumer_labels::{push_label, write_family, BlockLabels};
use crate::text::families::Num;
use crate::text::Format;

/// Where a family writes: the text, its format, the consumers' labels
/// with their health (`health[i]` is consumer `i`'s, for the first
/// `health.len()` consumers), and how the status is written.
struct Target<'a> {
    out: &'a mut String,
    format: Format,
    labels: BlockLabels<'a>,
    health: &'a [ConsumerHealthRow],
    status: StatusSeries,
}

/// One health family: name, help, how it is written, and whether it is
/// written only when asked for.
struct HealthFamily {
    name: &'static str,
    help: &'static str,
    write: fn(Target, (&'static str, &'static str)),
    opt_in: Option<OptIn>,
}

fn age_family(
    t: Target,
    family: (&'static str, &'static str),
    value: fn(&ConsumerHealthRow) -> Option<Age>,
    exact: bool,
) {
    let series = t.health.iter().enumerate().filter_map(|(i, h)| {
        let age = value(h)?;
        let v = if exact {
            Num::U(u64::from(age.exact))
        } else {
            Num::F(age.seconds)
        };
        Some((t.labels.get(i), "", v))
    });
    write_family(t.out, t.format, MetricType::Gauge, family, series);
}

fn status_family(t: Target, family: (&'static str, &'static str)) {
    // `,status="…"` rendered once per status, not once per series.
    let more = Status::ALL.map(|s| {
        let mut more = ",".to_string();
        push_label(&mut more, "status", s.as_str());
        (s, more)
    });
    if t.status != StatusSeries::All {
        // One series per consumer: a count known ahead, for the text's room.
        let series = t.health.iter().enumerate().filter_map(|(i, h)| {
            let (_, more) = more.iter().find(|(s, _)| *s == h.status)?;
            Some((t.labels.get(i), more.as_str(), Num::U(1)))
        });
        return write_family(t.out, t.format, MetricType::Gauge, family, series);
    }
    let series = t.health.iter().enumerate().flat_map(|(i, h)| {
        more.iter().map(move |(s, more)| {
            (
                t.labels.get(i),
                more.as_str(),
                Num::U(u64::from(*s == h.status)),
            )
        })
    });
    write_family(t.out, t.format, MetricType::Gauge, family, series);
}

fn removed_family(t: Target, family: (&'static str, &'static str)) {
    let series = (t.health.iter().enumerate())
        .map(|(i, h)| (t.labels.get(i), "", Num::U(h.removed().messages)));
    write_family(t.out, t.format, MetricType::Counter, family, series);
}

fn removed_exact_family(t: Target, family: (&'static str, &'static str)) {
    let series = (t.health.iter().enumerate())
        .map(|(i, h)| (t.labels.get(i), "", Num::U(u64::from(h.removed().exact))));
    write_family(t.out, t.format, MetricType::Gauge, family, series);
}

fn removal_forecast_family(t: Target, family: (&'static str, &'static str)) {
    let series = (t.health.iter().enumerate())
        .filter_map(|(i, h)| Some((t.labels.get(i), "", Num::F(h.removal_forecast()?))));
    write_family(t.out, t.format, MetricType::Gauge, family, series);
}

const HEALTH_FAMILIES: [HealthFamily; 8] = [
    HealthFamily {
        name: "nats_delivery_consumer_status",
        help: "The consumer's current status (unknown, ok, lagging, stalled, stopped, rewound, paused) at 1; with --consumer-status-series all, each other status at 0 too. See METRICS.md for the rules.",
        write: status_family,
        opt_in: None,
    },
    HealthFamily {
        name: "nats_delivery_consumer_delivery_lag_seconds",
        help: "Seconds since the first message the consumer has not delivered was stored (by the server's clock); 0 when nothing is pending.",
        write: |t, family| age_family(t, family, |h| h.delivery_lag(), false),
        opt_in: None,
    },
    HealthFamily {
        name: "nats_delivery_consumer_delivery_lag_exact",
        help: "1 when the delivery lag is exact (a read timestamp, or nothing pending), 0 when estimated from stream history.",
        write: |t, family| age_family(t, family, |h| h.delivery_lag(), true),
        opt_in: Some(OptIn::DeliveryLagExact),
    },
    HealthFamily {
        name: "nats_delivery_consumer_oldest_unacked_age_seconds",
        help: "Seconds since the first message above the ack floor (unacknowledged or undelivered) was stored (by the server's clock); 0 when none.",
        write: |t, family| age_family(t, family, |h| h.oldest_unacked_age(), false),
        opt_in: None,
    },
    HealthFamily {
        name: "nats_delivery_consumer_oldest_unacked_age_exact",
        help: "1 when the oldest unacknowledged age is exact (a read timestamp, or none waiting), 0 when estimated from stream history.",
        write: |t, family| age_family(t, family, |h| h.oldest_unacked_age(), true),
        opt_in: Some(OptIn::OldestUnackedAgeExact),
    },
    HealthFamily {
        name: "nats_delivery_consumer_removed_before_delivery_messages",
        help: "Messages that matched the consumer and that the stream removed (limits, a purge, a delete) before the consumer delivered them, since the exporter began tracking it; a lower bound or an estimate where _exact is 0 (see METRICS.md).",
        write: removed_family,
        opt_in: None,
    },
    HealthFamily {
        name: "nats_delivery_consumer_removed_before_delivery_exact",
        help: "1 while every increase of removed_before_delivery_messages_total was exact, 0 once one was a lower bound or an estimate.",
        write: removed_exact_family,
        opt_in: Some(OptIn::RemovedBeforeDeliveryExact),
    },
    HealthFamily {
        name: "nats_delivery_consumer_removal_forecast_seconds",
        help: "Seconds until the stream's limits (the soonest of max_msgs and max_bytes with discard old, and max_age) remove a message the consumer has not delivered, at the current rates; 0 while they remove; absent when the stream has no such limit, nothing is pending or the consumer keeps up (see METRICS.md).",
        write: removal_forecast_family,
        opt_in: None,
    },
];

/// How many health families there are (parts of the exposition).
pub(crate) const HEALTH_FAMILY_COUNT: usize = HEALTH_FAMILIES.len();

/// How many series the health families in `series` write for one consumer.
pub(crate) fn health_series(h: &ConsumerHealthRow, series: &ConsumerSeries) -> u64 {
    let ages = [
        (h.delivery_lag(), OptIn::DeliveryLagExact),
        (h.oldest_unacked_age(), OptIn::OldestUnackedAgeExact),
    ];
    // Each age, and the removed count, has an `_exact` beside it when
    // asked for.
    let per_age = |exact: OptIn| 1 + u64::from(series.writes(Some(exact)));
    let ages = ages.iter().filter(|(age, _)| age.is_some());
    let removed = per_age(OptIn::RemovedBeforeDeliveryExact);
    let forecast = u64::from(h.removal_forecast().is_some());
    series.status_series()
        + ages.map(|(_, exact)| per_age(*exact)).sum::<u64>()
        + removed
        + forecast
}

/// Appends health family `index` (below [`HEALTH_FAMILY_COUNT`]) for a
/// block of consumers whose health is known: `health` is in the order of
/// the consumers `labels` were rendered from, and empty when consumer
/// health is off. A family `series` does not write is left out.
pub(crate) fn write_health_family(
    out: &mut String,
    format: Format,
    labels: BlockLabels,
    health: &[ConsumerHealthRow],
    (index, series): (usize, &ConsumerSeries),
) {
    let family = &HEALTH_FAMILIES[index];
    if !series.writes(family.opt_in) {
        return;
    }
    let target = Target {
        out,
        format,
        labels,
        health,
        status: series.status,
    };
    (family.write)(target, (family.name, family.help));
}
