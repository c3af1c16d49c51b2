//! Instances past [`ReportLimits::max_instances`](super::ReportLimits::max_instances):
//! their reports are summed into one set of series labelled client and
//! instance `__overflow__` (subscription, stream and consumer `__overflow__`
//! as well), instead of being rejected.
//!
//! Reports carry cumulative totals, so the sum adds, per folded instance,
//! what it counted since its previous report: each folded instance keeps
//! its previous totals as sums (no names), and their number is bounded by
//! [`ReportLimits::max_folded_instances`](super::ReportLimits::max_folded_instances).
//! A folded instance stays folded until it expires, so its count is never
//! split over two series. Gauges are the sums of the latest values of the
//! folded instances (the high-water mark their largest), at each scrape.
//! A total that goes down (a subscription no longer listed) is a restart,
//! and the whole new totals are added.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::instance::{Instance, Monotonic};
use super::wire::{
    add_all, merge_subscription, Bounded, ConsumerCounters, SubCounters, SubGauges, EVENTS,
    OVERFLOW,
};

/// Summed totals of one report (or of one instance's latest report).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Totals {
    subscriptions: SubCounters,
    events: [Option<u64>; EVENTS.len()],
    consumers: ConsumerCounters,
}

impl Totals {
    /// Sums a report's counters over its subscriptions and consumers; also
    /// returns its gauges merged as for a subscription named twice
    /// (pending values added, the larger high-water mark).
    fn of(report: &Bounded) -> (Totals, SubGauges) {
        let mut subscriptions = ([None; 4], [None; 3]);
        for entry in report.subscriptions.values() {
            merge_subscription(&mut subscriptions, *entry);
        }
        let mut totals = Totals {
            subscriptions: subscriptions.0,
            ..Totals::default()
        };
        for (i, event) in EVENTS.iter().enumerate() {
            totals.events[i] = report.events.get(event).copied();
        }
        for counters in report.consumers.values() {
            add_all(&mut totals.consumers, counters);
        }
        (totals, subscriptions.1)
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Option<u64>> {
        self.subscriptions
            .iter_mut()
            .chain(self.events.iter_mut())
            .chain(self.consumers.iter_mut())
    }

    fn values(&self) -> impl Iterator<Item = &Option<u64>> {
        self.subscriptions
            .iter()
            .chain(self.events.iter())
            .chain(self.consumers.iter())
    }
}

/// What is kept of one folded instance: its latest summed totals and gauges.
#[derive(Debug)]
struct Tracked {
    received_at: Instant,
    last_sequence: Option<u64>,
    totals: Totals,
    gauges: SubGauges,
}

/// The `__overflow__` series and the folded instances that feed them.
#[derive(Debug)]
pub(super) struct Overflow {
    key: (String, String),
    /// Counters only ever grow by what a folded instance counted since its
    /// previous report; `None` until the first report is folded.
    series: Option<Instance>,
    tracked: BTreeMap<(String, String), Tracked>,
}

impl Default for Overflow {
    fn default() -> Self {
        Overflow {
            key: (OVERFLOW.to_string(), OVERFLOW.to_string()),
            series: None,
            tracked: BTreeMap::new(),
        }
    }
}

fn is_live(received_at: Instant, now: Instant, expiry: Duration) -> bool {
    now.duration_since(received_at) < expiry
}

impl Overflow {
    /// Whether `key` names the overflow series itself: such reports are
    /// always folded, so no kept instance can share its labels.
    pub(super) fn is_overflow_key(key: &(String, String)) -> bool {
        key.0 == OVERFLOW && key.1 == OVERFLOW
    }

    /// Whether reports of `key` are being folded.
    pub(super) fn contains(&self, key: &(String, String)) -> bool {
        self.tracked.contains_key(key)
    }

    /// Folded instances of `client`.
    pub(super) fn of_client(&self, client: &str) -> usize {
        super::count_client(&self.tracked, client)
    }

    /// Folded instances held in memory (expired ones until [`Self::expire`]).
    pub(super) fn len(&self) -> usize {
        self.tracked.len()
    }

    /// Forgets folded instances that have not reported for `expiry`. The
    /// sums they added stay: the series never go back.
    pub(super) fn expire(&mut self, now: Instant, expiry: Duration) {
        self.tracked
            .retain(|_, t| is_live(t.received_at, now, expiry));
    }

    /// Adds one report of the folded instance `key` to the series: per
    /// counter, the increase since that instance's previous report, or the
    /// whole new total when the instance restarted (its sequence or a
    /// summed total went back), as [`Instance`] does for kept instances.
    pub(super) fn absorb(
        &mut self,
        key: (String, String),
        report: &Bounded,
        now: Instant,
        unix_seconds: f64,
    ) {
        let series = self
            .series
            .get_or_insert_with(|| Instance::new(now, unix_seconds));
        series.received_at = now;
        series.received_unix_seconds = unix_seconds;
        let (totals, gauges) = Totals::of(report);
        let tracked = self.tracked.entry(key).or_insert_with(|| Tracked {
            received_at: now,
            last_sequence: None,
            totals: Totals::default(),
            gauges: [None; 3],
        });
        let sequence_went_back = matches!(
            (tracked.last_sequence, report.sequence),
            (Some(last), Some(new)) if new < last
        );
        let total_went_back = totals
            .values()
            .zip(tracked.totals.values())
            .any(|(new, last)| matches!((new, last), (Some(n), Some(l)) if n < l));
        if sequence_went_back || total_went_back {
            series.restarts += 1;
            tracked.totals = Totals::default();
        }
        let mut increases = Totals::default();
        for ((increase, new), last) in increases
            .values_mut()
            .zip(totals.values())
            .zip(tracked.totals.values_mut())
        {
            if let Some(new) = *new {
                *increase = Some(new - last.unwrap_or(0));
                *last = Some(new);
            }
        }
        tracked.received_at = now;
        tracked.last_sequence = report.sequence.or(tracked.last_sequence);
        tracked.gauges = gauges;
        add_to(series, &increases, !report.subscriptions.is_empty());
    }

    /// Sets the series' gauges to the sum of the latest gauges of the
    /// folded instances not yet expired (pending values added, the largest
    /// high-water mark); called before each scrape.
    pub(super) fn refresh_gauges(&mut self, now: Instant, expiry: Duration) {
        let Some(series) = self.series.as_mut() else {
            return;
        };
        let mut sum = ([None; 4], [None; 3]);
        for t in self.tracked.values() {
            if is_live(t.received_at, now, expiry) {
                merge_subscription(&mut sum, ([None; 4], t.gauges));
            }
        }
        if let Some(state) = series.subscriptions.get_mut(OVERFLOW) {
            state.gauges = sum.1;
        }
    }

    /// The series to export, while at least one folded instance has
    /// reported within `expiry`.
    pub(super) fn live(
        &self,
        now: Instant,
        expiry: Duration,
    ) -> Option<(&(String, String), &Instance)> {
        self.series
            .as_ref()
            .filter(|s| is_live(s.received_at, now, expiry))
            .map(|s| (&self.key, s))
    }

    /// Folded instances that have reported within `expiry`.
    pub(super) fn live_instances(&self, now: Instant, expiry: Duration) -> usize {
        self.tracked
            .values()
            .filter(|t| is_live(t.received_at, now, expiry))
            .count()
    }
}

/// Adds increases to the `__overflow__` subscription, event and consumer
/// counters; a counter first appears when some folded report carries it.
fn add_to(series: &mut Instance, increases: &Totals, has_subscriptions: bool) {
    fn add_present<const N: usize>(into: &mut [Option<Monotonic>; N], from: &[Option<u64>; N]) {
        for (m, n) in into.iter_mut().zip(from) {
            if let Some(n) = n {
                m.get_or_insert_with(Monotonic::default).add(*n);
            }
        }
    }
    if has_subscriptions {
        let state = series
            .subscriptions
            .entry(OVERFLOW.to_string())
            .or_default();
        add_present(&mut state.counters, &increases.subscriptions);
    }
    for (event, n) in EVENTS.iter().zip(&increases.events) {
        if let Some(n) = n {
            series.events.entry(event).or_default().add(*n);
        }
    }
    if increases.consumers.iter().any(Option::is_some) {
        let key = (OVERFLOW.to_string(), OVERFLOW.to_string());
        add_present(
            series.consumers.entry(key).or_default(),
            &increases.consumers,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    #[test]
    fn folded_instances_are_16_per_kept_one_and_never_past_65536() {
        use super::super::ReportLimits;
        let limits = |max_instances| ReportLimits {
            max_instances,
            ..ReportLimits::default()
        };
        assert_eq!(ReportLimits::default().max_folded_instances(), 4_096);
        assert_eq!(limits(4_096).max_folded_instances(), 65_536);
        assert_eq!(limits(1_000_000).max_folded_instances(), 65_536);
    }
    use std::time::{Duration, Instant};

    use super::super::wire::{Bounded, Folded, OVERFLOW};
    use super::Overflow;

    fn report(instance: &str, sequence: u64, dropped: u64, pending: u64) -> Bounded {
        let counters = [None, Some(dropped), None, None];
        let gauges = [Some(pending), None, Some(pending)];
        Bounded {
            client: "app".into(),
            instance: instance.into(),
            sequence: Some(sequence),
            subscriptions: BTreeMap::from([("orders".to_string(), (counters, gauges))]),
            events: BTreeMap::new(),
            consumers: BTreeMap::new(),
            folded: Folded::default(),
        }
    }

    fn fold(o: &mut Overflow, r: &Bounded, at: Instant) {
        o.absorb((r.client.clone(), r.instance.clone()), r, at, 0.0);
    }

    fn dropped(o: &Overflow, now: Instant, expiry: Duration) -> Option<u64> {
        let (_, series) = o.live(now, expiry)?;
        series.subscriptions[OVERFLOW].counters[1].map(|m| m.exported)
    }

    #[test]
    fn the_sums_outlive_the_folded_instances_and_never_go_back() {
        let expiry = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut o = Overflow::default();
        fold(&mut o, &report("a", 1, 10, 0), t0);
        fold(&mut o, &report("a", 2, 12, 0), t0);
        assert_eq!(dropped(&o, t0, expiry), Some(12));
        let later = t0 + expiry;
        o.expire(later, expiry);
        assert_eq!(o.len(), 0);
        // No folded instance left: the series end.
        assert_eq!(dropped(&o, later, expiry), None);
        // Another instance is folded: the series go on from 12.
        fold(&mut o, &report("b", 1, 5, 0), later);
        assert_eq!(dropped(&o, later, expiry), Some(17));
    }

    #[test]
    fn a_report_naming_the_overflow_series_is_folded_even_with_slots_free() {
        let reports = super::super::ClientReports::new(Duration::from_secs(60));
        let body = br#"{"version": 1, "client": "__overflow__", "instance": "__overflow__"}"#;
        reports.record(Some("__overflow__"), body).unwrap();
        assert_eq!((reports.instances(), reports.folded_instances()), (0, 1));
    }

    #[test]
    fn gauges_sum_the_folded_instances_not_yet_expired() {
        let expiry = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut o = Overflow::default();
        fold(&mut o, &report("a", 1, 0, 3), t0);
        fold(&mut o, &report("b", 1, 0, 4), t0 + Duration::from_secs(10));
        fold(&mut o, &report("c", 1, 0, 9), t0 + Duration::from_secs(10));
        fold(&mut o, &report("c", 2, 0, 2), t0 + Duration::from_secs(20));
        let gauges = |o: &mut Overflow, now| {
            o.refresh_gauges(now, expiry);
            o.live(now, expiry).unwrap().1.subscriptions[OVERFLOW].gauges
        };
        // Latest of each: 3 + 4 + 2 pending; the largest high water of those.
        let t20 = t0 + Duration::from_secs(20);
        assert_eq!(gauges(&mut o, t20), [Some(9), None, Some(4)]);
        // "a" expired (not yet swept): left out.
        assert_eq!(gauges(&mut o, t0 + expiry), [Some(6), None, Some(4)]);
        assert_eq!(o.live_instances(t0 + expiry, expiry), 2);
    }
}
