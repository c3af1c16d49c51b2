//! A ceiling on the JetStream series of one scrape (`--max-jetstream-series`).
//!
//! The /jsz series are the ones that grow without bound (the others have
//! limits of their own). Past the ceiling, detail goes in this order, and
//! the `nats_delivery_jetstream_series_*` gauges say what went: first the
//! consumer health of the consumers of lowest priority, one at a time, then
//! whole consumers, lowest priority first. Priority: most `num_pending`,
//! then most `num_ack_pending`, then the names, so the same consumers are
//! kept from one scrape to the next. Streams and the folded ephemerals are
//! never dropped: should they alone pass the ceiling, filter them.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use crate::sources::jsz::ConsumerRow;
use crate::text::families::gauge_family;

/// What the ceiling did to one scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BudgetReport {
    /// The ceiling.
    pub(crate) limit: u64,
    /// JetStream series the scrape had before the ceiling.
    pub(crate) wanted: u64,
    /// Consumer health series left out.
    pub(crate) dropped_health: u64,
    /// Per-consumer /jsz series left out (of the consumers left out).
    pub(crate) dropped_consumer: u64,
    /// Consumers left out entirely.
    pub(crate) dropped_consumers: u64,
}

/// Which consumers keep what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BudgetPlan {
    /// The consumers' positions, highest priority first.
    pub(crate) order: Vec<usize>,
    /// The first this many of `order` keep their per-consumer series.
    pub(crate) keep: usize,
    /// The first this many of `order` keep their consumer health too.
    pub(crate) keep_health: usize,
    /// What was left out.
    pub(crate) report: BudgetReport,
}

/// The consumers in priority order (see the module documentation).
pub(crate) fn priority(consumers: &[ConsumerRow]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..consumers.len()).collect();
    order.sort_by(|&a, &b| {
        let (aa, as_, ac, _) = consumers[a];
        let (ba, bs, bc, _) = consumers[b];
        bc.num_pending
            .cmp(&ac.num_pending)
            .then(bc.num_ack_pending.cmp(&ac.num_ack_pending))
            .then((aa, as_, &*ac.name).cmp(&(ba, bs, &*bc.name)))
    });
    order
}

/// Plans a scrape under `limit`: `fixed` series are never dropped (streams,
/// folded ephemerals); `order` is the consumers by priority, `detail[i]`
/// and `health[i]` the series of consumer `i` (health is empty when off).
pub(crate) fn plan(
    limit: u64,
    fixed: u64,
    order: Vec<usize>,
    detail: &[u64],
    health: &[u64],
) -> BudgetPlan {
    let health_of = |i: usize| health.get(i).copied().unwrap_or(0);
    let wanted = fixed + detail.iter().sum::<u64>() + health.iter().sum::<u64>();
    let mut left = limit.saturating_sub(fixed);
    let mut keep = 0;
    for &i in &order {
        if detail[i] > left {
            break;
        }
        left -= detail[i];
        keep += 1;
    }
    let mut keep_health = 0;
    for &i in &order[..keep] {
        if health_of(i) > left {
            break;
        }
        left -= health_of(i);
        keep_health += 1;
    }
    let dropped = |range: &[usize], of: &dyn Fn(usize) -> u64| range.iter().map(|&i| of(i)).sum();
    let report = BudgetReport {
        limit,
        wanted,
        dropped_health: dropped(&order[keep_health..], &health_of),
        dropped_consumer: dropped(&order[keep..], &|i| detail[i]),
        dropped_consumers: (order.len() - keep) as u64,
    };
    BudgetPlan {
        order,
        keep,
        keep_health,
        report,
    }
}

/// Writes what the ceiling did to this scrape.
pub(crate) fn encode(enc: &mut DescriptorEncoder, r: &BudgetReport) -> fmt::Result {
    let none = || Vec::<(&str, &str)>::new();
    gauge_family(
        enc,
        "nats_delivery_jetstream_series_limit",
        "The ceiling on JetStream stream, consumer and consumer-health series per scrape (--max-jetstream-series).",
        [(none(), r.limit)],
    )?;
    gauge_family(
        enc,
        "nats_delivery_jetstream_series_wanted",
        "JetStream stream, consumer and consumer-health series this scrape had before the ceiling; above the limit, detail was dropped.",
        [(none(), r.wanted)],
    )?;
    gauge_family(
        enc,
        "nats_delivery_jetstream_series_dropped",
        "JetStream series left out of this scrape by the ceiling, by part (consumer_health first, then whole consumers).",
        [
            ([("part", "consumer_health")], r.dropped_health),
            ([("part", "consumer")], r.dropped_consumer),
        ],
    )?;
    gauge_family(
        enc,
        "nats_delivery_jetstream_consumers_dropped",
        "Consumers left out of this scrape entirely by the ceiling (lowest num_pending first).",
        [(none(), r.dropped_consumers)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::jsz::ConsumerInfo;

    fn consumer(name: &str, pending: u64, ack_pending: u64) -> ConsumerInfo {
        ConsumerInfo {
            name: name.into(),
            num_pending: pending,
            num_ack_pending: ack_pending,
            ..ConsumerInfo::default()
        }
    }

    #[test]
    fn priority_is_backlog_then_unacknowledged_then_name() {
        let c = [
            consumer("b", 0, 0),
            consumer("a", 0, 0),
            consumer("x", 5, 0),
            consumer("y", 0, 3),
        ];
        let rows: Vec<ConsumerRow> = c.iter().map(|c| ("A", "S", c, None)).collect();
        assert_eq!(priority(&rows), [2, 3, 1, 0]);
    }

    #[test]
    fn health_goes_first_then_whole_consumers() {
        let order = vec![2, 0, 1];
        let detail = [10, 10, 10];
        let health = [11, 11, 11];
        // Everything fits: nothing dropped.
        let p = plan(100, 5, order.clone(), &detail, &health);
        assert_eq!((p.keep, p.keep_health, p.report.wanted), (3, 3, 68));
        assert_eq!(p.report.dropped_health + p.report.dropped_consumer, 0);
        // 5 + 30 detail + 22 health of the first two = 57.
        let p = plan(60, 5, order.clone(), &detail, &health);
        assert_eq!((p.keep, p.keep_health), (3, 2));
        assert_eq!(
            (p.report.dropped_health, p.report.dropped_consumer),
            (11, 0)
        );
        // Not every consumer's detail fits: health is all gone first.
        let p = plan(30, 5, order.clone(), &detail, &health);
        assert_eq!((p.keep, p.keep_health), (2, 0));
        let r = p.report;
        assert_eq!(
            (r.dropped_health, r.dropped_consumer, r.dropped_consumers),
            (33, 10, 1)
        );
        // The fixed series alone pass the ceiling: every consumer goes.
        let p = plan(3, 5, order, &detail, &[]);
        assert_eq!(
            (p.keep, p.report.dropped_consumers, p.report.dropped_health),
            (0, 3, 0)
        );
    }
}
