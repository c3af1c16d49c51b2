//! Writes the consumer health families: one family per part, so that the
//! exporter encodes them in parallel like the other per-consumer families.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::{Age, ConsumerHealthRow, Status};
use crate::encode::{gauge_family, Num};
use crate::sources::jsz::ConsumerRow;

/// Consumers with their health, in export order.
type Rows<'a> = [(&'a ConsumerRow<'a>, &'a ConsumerHealthRow)];

/// One health family: name, help, and its series for one consumer.
struct HealthFamily {
    name: &'static str,
    help: &'static str,
    /// Writes the family over `rows`.
    write: fn(&mut DescriptorEncoder, &str, &str, &Rows) -> fmt::Result,
}

fn labels<'a>(row: &'a ConsumerRow) -> [(&'static str, &'a str); 3] {
    [
        ("account", row.0),
        ("stream", row.1),
        ("consumer", row.2.name.as_str()),
    ]
}

fn age_family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &Rows,
    value: fn(&ConsumerHealthRow) -> Option<Age>,
    exact: bool,
) -> fmt::Result {
    gauge_family(
        enc,
        name,
        help,
        rows.iter().filter_map(|(c, h)| {
            let age = value(h)?;
            let v = if exact {
                Num::U(u64::from(age.exact))
            } else {
                Num::F(age.seconds)
            };
            Some((labels(c), v))
        }),
    )
}

const HEALTH_FAMILIES: [HealthFamily; 5] = [
    HealthFamily {
        name: "nats_delivery_consumer_status",
        help: "1 for the consumer's current status (unknown, ok, lagging, stalled, stopped, rewound, paused), 0 for the others; see METRICS.md for the rules.",
        write: |enc, name, help, rows| {
            gauge_family(
                enc,
                name,
                help,
                rows.iter().flat_map(|(c, h)| {
                    Status::ALL.map(|s| {
                        let [a, st, co] = labels(c);
                        ([a, st, co, ("status", s.as_str())], u64::from(s == h.status))
                    })
                }),
            )
        },
    },
    HealthFamily {
        name: "nats_delivery_consumer_delivery_lag_seconds",
        help: "Seconds since the first message the consumer has not delivered was stored (by the server's clock); 0 when nothing is pending.",
        write: |enc, name, help, rows| age_family(enc, name, help, rows, |h| h.delivery_lag, false),
    },
    HealthFamily {
        name: "nats_delivery_consumer_delivery_lag_exact",
        help: "1 when the delivery lag is exact (a read timestamp, or nothing pending), 0 when estimated from stream history.",
        write: |enc, name, help, rows| age_family(enc, name, help, rows, |h| h.delivery_lag, true),
    },
    HealthFamily {
        name: "nats_delivery_consumer_oldest_unacked_age_seconds",
        help: "Seconds since the first message above the ack floor (unacknowledged or undelivered) was stored (by the server's clock); 0 when none.",
        write: |enc, name, help, rows| {
            age_family(enc, name, help, rows, |h| h.oldest_unacked_age, false)
        },
    },
    HealthFamily {
        name: "nats_delivery_consumer_oldest_unacked_age_exact",
        help: "1 when the oldest unacknowledged age is exact (a read timestamp, or none waiting), 0 when estimated from stream history.",
        write: |enc, name, help, rows| {
            age_family(enc, name, help, rows, |h| h.oldest_unacked_age, true)
        },
    },
];

/// How many health families there are (parts of the exposition).
pub const HEALTH_FAMILY_COUNT: usize = HEALTH_FAMILIES.len();

/// Writes health family `index` (below [`HEALTH_FAMILY_COUNT`]) for the
/// consumers of `consumers` whose health is known (`health` is in the same
/// order; empty when consumer health is off).
pub fn encode_health_family(
    enc: &mut DescriptorEncoder,
    consumers: &[ConsumerRow],
    health: &[ConsumerHealthRow],
    index: usize,
) -> fmt::Result {
    let rows: Vec<_> = consumers.iter().zip(health).collect();
    let family = &HEALTH_FAMILIES[index];
    (family.write)(enc, family.name, family.help, &rows)
}
