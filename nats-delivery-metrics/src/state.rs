//! Counters shared by the subscriptions' intakes, the application's
//! streams, the event callback, the collector and the report publisher.
//!
//! Every per-subscription number has exactly one writer at a time (the
//! holder of the subscription's intake lock, or the application's stream),
//! so the hot path does plain loads and stores on atomics, no
//! read-modify-write.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::intake::Watchdog;
use crate::stats::{ConsumerStats, SubscriptionStats};

/// Label value for slow-consumer events whose sid belongs to no subscription
/// this crate knows.
pub(crate) const UNATTRIBUTED: &str = "unattributed";

/// Counters of subscriptions that have ended, kept so counters never go back.
#[derive(Debug, Default, Clone, Copy)]
struct RetiredTotals {
    taken: u64,
    delivered: u64,
    dropped: u64,
    dropped_bytes: u64,
}

/// Connection events counted by the event callback.
#[derive(Debug, Default)]
pub(crate) struct ConnectionEvents {
    pub(crate) connected: AtomicU64,
    pub(crate) disconnected: AtomicU64,
    pub(crate) lame_duck: AtomicU64,
    pub(crate) draining: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) server_error: AtomicU64,
    pub(crate) client_error: AtomicU64,
}

impl ConnectionEvents {
    /// `(label value, count)` for every event kind, in a fixed order.
    pub(crate) fn values(&self) -> [(&'static str, u64); 7] {
        let v = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("connected", v(&self.connected)),
            ("disconnected", v(&self.disconnected)),
            ("lame_duck", v(&self.lame_duck)),
            ("draining", v(&self.draining)),
            ("closed", v(&self.closed)),
            ("server_error", v(&self.server_error)),
            ("client_error", v(&self.client_error)),
        ]
    }
}

#[derive(Debug, Default)]
pub(crate) struct Table {
    live: Vec<Arc<SubscriptionStats>>,
    retired: BTreeMap<Arc<str>, RetiredTotals>,
    /// sid -> subscription name, for attributing `SlowConsumer(sid)` events.
    sid_names: HashMap<u64, Arc<str>>,
    slow_consumer_events: BTreeMap<Arc<str>, u64>,
    unattributed: Option<Arc<str>>,
}

impl Table {
    /// Folds subscriptions nobody but the table holds any more into the
    /// retired totals. With a strong count of one no task can still write to
    /// them, so their values are final.
    fn compact(&mut self) {
        let retired = &mut self.retired;
        self.live.retain(|s| {
            if Arc::strong_count(s) > 1 {
                return true;
            }
            let t = retired.entry(s.name.clone()).or_default();
            t.taken += s.taken();
            t.delivered += s.delivered.load(Ordering::Acquire);
            t.dropped += s.dropped.load(Ordering::Acquire);
            t.dropped_bytes += s.dropped_bytes.load(Ordering::Acquire);
            false
        });
    }
}

/// Everything one `ClientMetrics` holds.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) client: String,
    pub(crate) events: ConnectionEvents,
    table: Mutex<Table>,
    pub(crate) consumers: Mutex<Vec<Arc<ConsumerStats>>>,
    /// The statistics of the one connection these metrics belong to, set by
    /// the first subscription: sids are only unique per connection.
    connection: OnceLock<Arc<async_nats::Statistics>>,
    /// Messages of that connection handed to the application outside
    /// instrumented subscriptions (replies to `InstrumentedClient::request`).
    pub(crate) taken_elsewhere: AtomicU64,
    /// JetStream publish outcomes and unanswered requests.
    pub(crate) publishes: crate::publish_stats::PublishStats,
    /// Takes messages for subscriptions whose application does not poll.
    pub(crate) watchdog: Watchdog,
}

/// Aggregated numbers of all subscriptions sharing one name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SubscriptionSnapshot {
    pub(crate) name: Arc<str>,
    pub(crate) delivered: u64,
    pub(crate) dropped: u64,
    pub(crate) dropped_bytes: u64,
    pub(crate) slow_consumer_events: u64,
    /// False for names known only from events (plain async-nats subscribers).
    pub(crate) instrumented: bool,
    /// Present while at least one subscription with this name is live.
    pub(crate) live: Option<LiveSnapshot>,
}

/// Gauges of the live subscriptions sharing one name (summed, high water: max).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LiveSnapshot {
    pub(crate) pending_messages: u64,
    pub(crate) pending_bytes: u64,
    pub(crate) high_water: u64,
    pub(crate) limit_messages: u64,
    pub(crate) limit_bytes: u64,
}

impl Shared {
    pub(crate) fn new(client: String) -> Self {
        Shared {
            client,
            events: ConnectionEvents::default(),
            table: Mutex::new(Table::default()),
            consumers: Mutex::new(Vec::new()),
            connection: OnceLock::new(),
            taken_elsewhere: AtomicU64::new(0),
            publishes: Default::default(),
            watchdog: Watchdog::default(),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding this lock cannot leave the table inconsistent
        // (every change is a single insert or remove), so poisoning is ignored.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ties these metrics to `client`'s connection; false if they already
    /// belong to another connection.
    pub(crate) fn bind(&self, client: &async_nats::Client) -> bool {
        let statistics = client.statistics();
        Arc::ptr_eq(
            self.connection.get_or_init(|| statistics.clone()),
            &statistics,
        )
    }

    /// Messages the connection read that no instrumented subscription (and
    /// no instrumented request) has taken: waiting in async-nats' channels,
    /// dropped by async-nats, or for consumers this crate does not see.
    /// `None` before the first subscription ties the metrics to a connection.
    pub(crate) fn unforwarded(&self) -> Option<u64> {
        let connection = self.connection.get()?;
        // Taken first, read second: both only grow and a message is counted
        // as read before it can be taken, so the difference never underflows.
        let taken = {
            let mut table = self.table();
            table.compact();
            let live: u64 = table.live.iter().map(|s| s.taken()).sum();
            let retired: u64 = table.retired.values().map(|t| t.taken).sum();
            live + retired + self.taken_elsewhere.load(Ordering::Acquire)
        };
        let read = connection.in_messages.load(Ordering::Acquire);
        Some(read.saturating_sub(taken))
    }

    pub(crate) fn add_subscription(&self, stats: Arc<SubscriptionStats>, sid: Option<u64>) {
        let mut table = self.table();
        table.compact();
        if let Some(sid) = sid {
            table.sid_names.insert(sid, stats.name.clone());
        }
        table
            .slow_consumer_events
            .entry(stats.name.clone())
            .or_insert(0);
        table.live.push(stats);
    }

    pub(crate) fn name_sid(&self, sid: u64, name: Arc<str>) {
        let mut table = self.table();
        table.slow_consumer_events.entry(name.clone()).or_insert(0);
        table.sid_names.insert(sid, name);
    }

    pub(crate) fn forget_sid(&self, sid: u64) {
        self.table().sid_names.remove(&sid);
    }

    /// Called from the event callback: one hash lookup and one map update,
    /// no allocation once a name has been seen.
    pub(crate) fn slow_consumer_event(&self, sid: u64) {
        let mut table = self.table();
        let name = match table.sid_names.get(&sid) {
            Some(name) => name.clone(),
            None => table
                .unattributed
                .get_or_insert_with(|| Arc::from(UNATTRIBUTED))
                .clone(),
        };
        *table.slow_consumer_events.entry(name).or_insert(0) += 1;
    }

    /// Per-name numbers, sorted by name.
    pub(crate) fn snapshot(&self) -> Vec<SubscriptionSnapshot> {
        let mut table = self.table();
        table.compact();
        let mut by_name: BTreeMap<Arc<str>, SubscriptionSnapshot> = BTreeMap::new();
        for (name, t) in &table.retired {
            let s = slot(&mut by_name, name);
            s.instrumented = true;
            s.delivered += t.delivered;
            s.dropped += t.dropped;
            s.dropped_bytes += t.dropped_bytes;
        }
        for (name, n) in &table.slow_consumer_events {
            slot(&mut by_name, name).slow_consumer_events = *n;
        }
        for stats in &table.live {
            let s = slot(&mut by_name, &stats.name);
            let (pending_messages, pending_bytes) = stats.pending();
            s.instrumented = true;
            s.delivered += stats.delivered.load(Ordering::Acquire);
            s.dropped += stats.dropped.load(Ordering::Acquire);
            s.dropped_bytes += stats.dropped_bytes.load(Ordering::Acquire);
            if stats.closed.load(Ordering::Acquire) {
                continue;
            }
            let live = s.live.get_or_insert_with(LiveSnapshot::default);
            live.pending_messages += pending_messages;
            live.pending_bytes += pending_bytes;
            live.high_water = live
                .high_water
                .max(stats.high_water.load(Ordering::Acquire));
            live.limit_messages = live.limit_messages.saturating_add(stats.limits.messages);
            live.limit_bytes = live.limit_bytes.saturating_add(stats.limits.bytes);
        }
        by_name.into_values().collect()
    }
}

fn slot<'a>(
    map: &'a mut BTreeMap<Arc<str>, SubscriptionSnapshot>,
    name: &Arc<str>,
) -> &'a mut SubscriptionSnapshot {
    map.entry(name.clone())
        .or_insert_with(|| SubscriptionSnapshot {
            name: name.clone(),
            ..Default::default()
        })
}
