//! What the exporter keeps of one application instance: counters that never
//! go backwards across the instance's restarts, the latest gauges, and a
//! bounded set of names.

use std::collections::BTreeMap;
use std::time::Instant;

use super::wire::{
    add_all, merge_subscription, Bounded, Folded, SubCounters, SubGauges, EVENTS, OVERFLOW,
};
use super::{ReportError, MAX_GROWTH_PER_SECOND};

/// Series an instance costs the total series cap by itself: its identity
/// series, connection events, restarts, and room for its `__overflow__`
/// names.
pub(super) const INSTANCE_SERIES: usize = 24;
/// Series of one subscription name (four counters, three levels).
pub(super) const SUBSCRIPTION_SERIES: usize = 7;
/// Series of one (stream, consumer) pair.
pub(super) const CONSUMER_SERIES: usize = 6;

/// A re-exported counter: the instance's reported total, turned into a
/// series that never decreases. A lower total than last time means the
/// counter started again from 0 (the instance restarted), so the whole new
/// total is added: `increase()` over the series then equals the true count.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Monotonic {
    last: u64,
    /// The value exported.
    pub(crate) exported: u64,
}

impl Monotonic {
    fn observe(&mut self, reported: u64) {
        self.exported = self.exported.saturating_add(if reported >= self.last {
            reported - self.last
        } else {
            reported
        });
        self.last = reported;
    }

    fn restart(&mut self) {
        self.last = 0;
    }

    /// Adds `n` to the exported value directly: for the `__overflow__`
    /// series, which sum increases rather than follow one reported total.
    pub(super) fn add(&mut self, n: u64) {
        self.exported = self.exported.saturating_add(n);
    }
}

/// One subscription of an instance.
#[derive(Debug, Default, Clone)]
pub(super) struct SubscriptionState {
    /// Counters in `wire::SUB_COUNTERS` order; `None` until first reported.
    pub(crate) counters: [Option<Monotonic>; 4],
    /// Latest pending messages, pending bytes, high water; all `None` when
    /// the latest report did not list the subscription.
    pub(crate) gauges: SubGauges,
}

/// One instance (client, instance) of an application.
#[derive(Debug)]
pub(super) struct Instance {
    pub(crate) received_at: Instant,
    pub(crate) received_unix_seconds: f64,
    last_sequence: Option<u64>,
    /// Restarts detected (sequence or a counter went back).
    pub(crate) restarts: u64,
    pub(crate) subscriptions: BTreeMap<String, SubscriptionState>,
    pub(crate) events: BTreeMap<&'static str, Monotonic>,
    /// (stream, consumer) -> received, redelivered, then one per ack kind.
    pub(crate) consumers: BTreeMap<(String, String), [Option<Monotonic>; 6]>,
}

fn observe_all<const N: usize>(into: &mut [Option<Monotonic>; N], values: &[Option<u64>; N]) {
    for (m, v) in into.iter_mut().zip(values) {
        if let Some(v) = v {
            m.get_or_insert_with(Monotonic::default).observe(*v);
        }
    }
}

/// Keeps at most `max` names plus `__overflow__`: a name not yet known
/// while `max` are taken is folded into `__overflow__` (and counted).
fn fold_names<K: Ord + Clone, V>(
    known: impl Fn(&K) -> bool,
    mut known_count: usize,
    max: usize,
    overflow: K,
    entries: BTreeMap<K, V>,
    mut merge: impl FnMut(&mut V, V),
    folded: &mut u64,
) -> BTreeMap<K, V> {
    let mut kept: BTreeMap<K, V> = BTreeMap::new();
    for (key, value) in entries {
        let key = if key == overflow || known(&key) {
            key
        } else if known_count < max {
            known_count += 1;
            key
        } else {
            *folded += 1;
            overflow.clone()
        };
        match kept.get_mut(&key) {
            Some(existing) => merge(existing, value),
            None => {
                kept.insert(key, value);
            }
        }
    }
    kept
}

impl Instance {
    pub(super) fn new(now: Instant, unix_seconds: f64) -> Self {
        Instance {
            received_at: now,
            received_unix_seconds: unix_seconds,
            last_sequence: None,
            restarts: 0,
            subscriptions: BTreeMap::new(),
            events: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// Series the exporter writes for this instance, as the total series
    /// cap counts them.
    pub(super) fn series(&self) -> usize {
        INSTANCE_SERIES
            + self.subscriptions.len() * SUBSCRIPTION_SERIES
            + self.consumers.len() * CONSUMER_SERIES
    }

    /// Takes in one bounded report; returns what it folded to stay within
    /// `max_entries` subscriptions and consumers, and within `budget` more
    /// series (new names past it are folded too).
    pub(super) fn absorb(&mut self, report: Bounded, max_entries: usize, budget: usize) -> Folded {
        let mut folded = Folded::default();
        let known_subs = self.subscriptions.keys().filter(|k| *k != OVERFLOW).count();
        let subscriptions = fold_names(
            |k: &String| self.subscriptions.contains_key(k),
            known_subs,
            max_entries.min(known_subs.saturating_add(budget / SUBSCRIPTION_SERIES)),
            OVERFLOW.to_string(),
            report.subscriptions,
            merge_subscription,
            &mut folded.subscriptions,
        );
        let overflow_consumer = (OVERFLOW.to_string(), OVERFLOW.to_string());
        let known_consumers = self
            .consumers
            .keys()
            .filter(|k| **k != overflow_consumer)
            .count();
        let new_subs = subscriptions
            .keys()
            .filter(|k| *k != OVERFLOW && !self.subscriptions.contains_key(*k))
            .count();
        let budget = budget.saturating_sub(new_subs * SUBSCRIPTION_SERIES);
        let consumers = fold_names(
            |k: &(String, String)| self.consumers.contains_key(k),
            known_consumers,
            max_entries.min(known_consumers.saturating_add(budget / CONSUMER_SERIES)),
            overflow_consumer,
            report.consumers,
            |a, b| add_all(a, &b),
            &mut folded.consumers,
        );

        let restarted = match (self.last_sequence, report.sequence) {
            (Some(last), Some(now)) => now < last,
            _ => false,
        } || self.any_counter_went_back(&subscriptions, &report.events, &consumers);
        if restarted {
            self.restarts += 1;
            self.for_each_counter(Monotonic::restart);
        }
        self.last_sequence = report.sequence.or(self.last_sequence);

        for state in self.subscriptions.values_mut() {
            state.gauges = [None; 3];
        }
        for (name, (counters, gauges)) in subscriptions {
            let state = self.subscriptions.entry(name).or_default();
            observe_all(&mut state.counters, &counters);
            state.gauges = gauges;
        }
        for (event, n) in report.events {
            self.events.entry(event).or_default().observe(n);
        }
        for (key, counters) in consumers {
            observe_all(self.consumers.entry(key).or_default(), &counters);
        }
        folded
    }

    /// Refuses a report in which a total of a name the instance knows grew
    /// by more than [`MAX_GROWTH_PER_SECOND`] per second (counted from at
    /// least one second) since the instance's previous report; after a
    /// restart its whole value is its growth. New names are bounded by
    /// [`MAX_PLAUSIBLE_VALUE`](super::MAX_PLAUSIBLE_VALUE) alone.
    pub(super) fn check_growth(&self, report: &Bounded, now: Instant) -> Result<(), ReportError> {
        let seconds = now.duration_since(self.received_at).as_secs().max(1);
        let allowed = MAX_GROWTH_PER_SECOND.saturating_mul(seconds);
        let restarted =
            matches!((self.last_sequence, report.sequence), (Some(l), Some(n)) if n < l);
        let grew = |old: &Monotonic, new: u64| {
            let growth = if restarted || new < old.last {
                new
            } else {
                new - old.last
            };
            growth > allowed
        };
        fn any<const N: usize>(
            old: &[Option<Monotonic>; N],
            new: &[Option<u64>; N],
            grew: &impl Fn(&Monotonic, u64) -> bool,
        ) -> bool {
            old.iter()
                .zip(new)
                .any(|(o, n)| matches!((o, n), (Some(o), Some(n)) if grew(o, *n)))
        }
        let too_fast = report.subscriptions.iter().any(|(name, (c, _))| {
            name != OVERFLOW
                && self
                    .subscriptions
                    .get(name)
                    .is_some_and(|s| any(&s.counters, c, &grew))
        }) || report
            .events
            .iter()
            .any(|(e, n)| self.events.get(e).is_some_and(|m| grew(m, *n)))
            || report.consumers.iter().any(|(k, c)| {
                k.0 != OVERFLOW && self.consumers.get(k).is_some_and(|s| any(s, c, &grew))
            });
        if too_fast {
            Err(ReportError::ImplausibleJump)
        } else {
            Ok(())
        }
    }

    /// Whether any counter of the report is lower than the instance's last
    /// report of it: the application process started again.
    fn any_counter_went_back(
        &self,
        subscriptions: &BTreeMap<String, (SubCounters, SubGauges)>,
        events: &BTreeMap<&'static str, u64>,
        consumers: &BTreeMap<(String, String), [Option<u64>; 6]>,
    ) -> bool {
        fn lower<const N: usize>(old: &[Option<Monotonic>; N], new: &[Option<u64>; N]) -> bool {
            old.iter()
                .zip(new)
                .any(|(o, n)| matches!((o, n), (Some(o), Some(n)) if *n < o.last))
        }
        // `__overflow__` sums a set of names that may change between
        // reports; its own decrease is handled by its series alone.
        subscriptions.iter().any(|(name, (c, _))| {
            name != OVERFLOW
                && self
                    .subscriptions
                    .get(name)
                    .is_some_and(|s| lower(&s.counters, c))
        }) || events.iter().any(|(e, n)| {
            debug_assert!(EVENTS.contains(e));
            self.events.get(e).is_some_and(|m| *n < m.last)
        }) || consumers
            .iter()
            .any(|(k, c)| k.0 != OVERFLOW && self.consumers.get(k).is_some_and(|s| lower(s, c)))
    }

    fn for_each_counter(&mut self, f: impl Fn(&mut Monotonic)) {
        let subs = self
            .subscriptions
            .values_mut()
            .flat_map(|s| s.counters.iter_mut());
        let consumers = self.consumers.values_mut().flat_map(|c| c.iter_mut());
        for m in subs.chain(consumers).flatten() {
            f(m);
        }
        self.events.values_mut().for_each(f);
    }
}

#[cfg(test)]
mod tests {
    use super::Monotonic;

    #[test]
    fn a_lower_total_adds_the_whole_new_total() {
        let mut m = Monotonic::default();
        for v in [100, 50, 100] {
            m.observe(v);
        }
        // 100, then a restart that has counted 50, then 50 more.
        assert_eq!(m.exported, 200);
    }
}
