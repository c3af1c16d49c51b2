//! Application reports: totals that applications using the
//! `nats-delivery-metrics` crate publish over NATS, re-exported with `client`
//! and `instance` labels so that applications without an HTTP server appear
//! next to the server's own numbers.
//!
//! Reports carry absolute values, so a lost report is harmless. Anyone
//! allowed to publish on the report subject can send one, so all a report
//! can make the exporter hold is bounded ([`ReportLimits`]); what does not
//! fit is folded into `__overflow__` and counted. A lower total is a restart
//! of that instance, so `increase()` equals the true count. The prefix
//! `nats_delivery_app_` keeps these apart from the crate's own
//! `nats_delivery_client_` series when Prometheus scrapes both (wire format:
//! the crate's README; metrics: METRICS.md).

mod collector;
mod error;
mod instance;
mod listener;
mod overflow;
mod wire;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lock::LockOrRecover;
use crate::nats::retry::ErrorKind;
pub use error::ReportError;
use error::REASONS;
use instance::{Instance, INSTANCE_SERIES};
pub use listener::{connect, run_client_reports};
use overflow::Overflow;
use wire::Folded;

/// Bounds on what reports can make the exporter hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportLimits {
    /// Larger report bodies are rejected unread (default 64 KiB).
    pub max_report_bytes: usize,
    /// Subscription names, and (stream, consumer) pairs, kept per instance;
    /// more are summed under `__overflow__` (default 32).
    pub max_entries: usize,
    /// Longest label value in bytes; a longer subscription, stream or
    /// consumer name counts as `__overflow__`, a longer client or instance
    /// rejects the report (default 128).
    pub max_label_bytes: usize,
    /// Instances (client, instance) kept under their own labels (default
    /// 256). Reports of further instances are summed under client and
    /// instance `__overflow__` until they expire, up to
    /// [`Self::max_folded_instances`] of them; reports of instances past
    /// that are rejected until one expires.
    pub max_instances: usize,
    /// Instances of one client, kept and folded together (default 32):
    /// reports of its further instances are rejected until one expires, so
    /// that one application cannot take the slots of others.
    pub max_instances_per_client: usize,
    /// Series the kept instances may make a scrape carry, counted as 24 per
    /// instance, 7 per subscription name and 6 per consumer (default
    /// 25,000): past it new names are folded under `__overflow__`, new
    /// instances under client and instance `__overflow__`, and counted.
    pub max_series: usize,
}

/// Every number a report carries is below this (2^50, about 1.1e15: a
/// million messages a second for 35 years), or the report is rejected:
/// exported counters add totals across restarts and must stay exact as a
/// Prometheus float (2^53).
pub(crate) const MAX_PLAUSIBLE_VALUE: u64 = 1 << 50;

/// The most a total may grow per second between two reports of one
/// instance (2^32, about 4.3e9: bytes at 4 GiB/s); a faster jump rejects
/// the report.
pub(crate) const MAX_GROWTH_PER_SECOND: u64 = 1 << 32;

/// Entries of `map` whose key's client is `client`.
fn count_client<V>(map: &BTreeMap<(String, String), V>, client: &str) -> usize {
    map.range((client.to_string(), String::new())..)
        .take_while(|((c, _), _)| c == client)
        .count()
}

/// Folded instances tracked per kept instance: see
/// [`ReportLimits::max_folded_instances`].
const FOLDED_PER_KEPT: usize = 16;
/// Most folded instances tracked, whatever the instance limit.
const MAX_FOLDED: usize = 65_536;

impl ReportLimits {
    /// Instances past [`Self::max_instances`] whose reports are summed under
    /// `__overflow__`: 16 times `max_instances`, at most 65,536. Each costs
    /// the exporter its name and one total per counter, kept to add only what
    /// it counted since its previous report (`benches/client_reports.rs`
    /// measures the cost).
    pub fn max_folded_instances(&self) -> usize {
        self.max_instances
            .saturating_mul(FOLDED_PER_KEPT)
            .min(MAX_FOLDED)
    }
}

impl Default for ReportLimits {
    fn default() -> Self {
        ReportLimits {
            max_report_bytes: 64 * 1024,
            max_entries: 32,
            max_label_bytes: 128,
            max_instances: 256,
            max_instances_per_client: 32,
            max_series: 25_000,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    instances: BTreeMap<(String, String), Instance>,
    received: u64,
    malformed: u64,
    rejected: BTreeMap<&'static str, u64>,
    folded: Folded,
    /// Instances past `max_instances` and their `__overflow__` sums.
    overflow: Overflow,
    /// Reports summed under `__overflow__`.
    folded_reports: u64,
    /// Last removal of expired instances.
    swept_at: Option<Instant>,
    listener_up: bool,
    /// Listener failures by kind label.
    listener_errors: BTreeMap<&'static str, u64>,
}

/// The latest state of every application instance, with expiry; a
/// `Collector` that re-exports them.
#[derive(Debug)]
pub struct ClientReports {
    expiry: Duration,
    limits: ReportLimits,
    state: Mutex<State>,
}

impl ClientReports {
    /// Keeps an instance's series until no report has arrived for `expiry`,
    /// with the default [`ReportLimits`].
    pub fn new(expiry: Duration) -> Self {
        Self::with_limits(expiry, ReportLimits::default())
    }

    /// Like [`Self::new`] with limits of your choice.
    pub fn with_limits(expiry: Duration, limits: ReportLimits) -> Self {
        ClientReports {
            expiry,
            limits,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent between statements: a
        // panic elsewhere cannot leave it half-written.
        self.state.lock_or_recover()
    }

    /// Records one report body that came on the subject `<prefix>.<sent_as>`
    /// (`None`: on the bare prefix). A body that is not a valid report, whose
    /// `client` is not `sent_as`, or over a limit, is counted and returned
    /// as an error; the stored state is untouched.
    pub fn record(&self, sent_as: Option<&str>, payload: &[u8]) -> Result<(), ReportError> {
        let parsed = wire::parse(payload, &self.limits, sent_as);
        let now = Instant::now();
        let mut state = self.state();
        state.received += 1;
        let result = parsed.and_then(|report| {
            let key = (report.client.clone(), report.instance.clone());
            // Recounted per report: at most `max_instances` small sums.
            let used: usize = state.instances.values().map(Instance::series).sum();
            let fold = self.admit(&mut state, &key, &report, now, used)?;
            let unix_seconds = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            let labels = report.folded;
            state.folded.labels += labels.labels;
            state.folded.duplicates += labels.duplicates;
            if fold {
                state.overflow.absorb(key, &report, now, unix_seconds);
                state.folded_reports += 1;
                return Ok(());
            }
            let new_cost = if state.instances.contains_key(&key) {
                0
            } else {
                INSTANCE_SERIES
            };
            let budget = self.limits.max_series.saturating_sub(used + new_cost);
            let instance = state
                .instances
                .entry(key)
                .or_insert_with(|| Instance::new(now, unix_seconds));
            instance.received_at = now;
            instance.received_unix_seconds = unix_seconds;
            let folded = instance.absorb(report, self.limits.max_entries, budget);
            let total = &mut state.folded;
            total.subscriptions += folded.subscriptions;
            total.consumers += folded.consumers;
            Ok(())
        });
        if let Err(e) = &result {
            state.malformed += u64::from(e.malformed());
            *state.rejected.entry(e.reason()).or_insert(0) += 1;
        }
        result
    }

    /// Whether a valid report may be taken in, and if so whether it is
    /// folded under `__overflow__`: the growth of a kept instance's totals,
    /// its client's instances and the instance limits are checked here.
    fn admit(
        &self,
        state: &mut State,
        key: &(String, String),
        report: &wire::Bounded,
        now: Instant,
        used_series: usize,
    ) -> Result<bool, ReportError> {
        let kept = state.instances.get(key);
        if let Some(instance) = kept {
            instance.check_growth(report, now)?;
        }
        let kept = kept.is_some();
        let new = !kept && !state.overflow.contains(key);
        let of_client = |state: &State| {
            count_client(&state.instances, &key.0) + state.overflow.of_client(&key.0)
        };
        let swept_lately = |state: &State| {
            state
                .swept_at
                .is_some_and(|t| now.duration_since(t) < SWEEP_ON_RECORD_GAP)
        };
        let per_client = self.limits.max_instances_per_client;
        if new && of_client(state) >= per_client {
            if !swept_lately(state) {
                self.expire_locked(state, now);
            }
            if of_client(state) >= per_client {
                return Err(ReportError::TooManyClientInstances);
            }
        }
        if new && state.instances.len() >= self.limits.max_instances && !swept_lately(state) {
            // Only a new instance at the limit needs the slots of
            // expired ones now; otherwise the timer frees them.
            self.expire_locked(state, now);
        }
        let fold = !kept
            && (!new
                || Overflow::is_overflow_key(key)
                || state.instances.len() >= self.limits.max_instances
                || used_series + INSTANCE_SERIES > self.limits.max_series);
        if fold && new && state.overflow.len() >= self.limits.max_folded_instances() {
            return Err(ReportError::TooManyInstances);
        }
        Ok(fold)
    }

    /// Removes the instances that have not reported for the expiry time;
    /// [`run_client_reports`] calls it on a timer of its own.
    pub(crate) fn expire(&self) {
        self.expire_locked(&mut self.state(), Instant::now());
    }

    fn expire_locked(&self, state: &mut State, now: Instant) {
        state.swept_at = Some(now);
        let expiry = self.expiry;
        state
            .instances
            .retain(|_, i| now.duration_since(i.received_at) < expiry);
        state.overflow.expire(now, expiry);
    }

    /// Number of (client, instance) pairs kept under their own labels
    /// (expired ones until the next `expire`).
    pub fn instances(&self) -> usize {
        self.state().instances.len()
    }

    /// Number of (client, instance) pairs summed under `__overflow__`
    /// (expired ones until the next `expire`).
    pub fn folded_instances(&self) -> usize {
        self.state().overflow.len()
    }

    pub(super) fn set_listener_up(&self, up: bool) {
        self.state().listener_up = up;
    }

    /// Counts one failure of the report listener (its connection included)
    /// in `nats_delivery_app_reports_listener_errors_total{kind}`.
    pub(crate) fn count_listener_error(&self, kind: ErrorKind) {
        *self
            .state()
            .listener_errors
            .entry(kind.as_label())
            .or_insert(0) += 1;
    }
}

/// A report of a new instance at the instance limit removes expired
/// instances first, at most this often: the sweep visits every kept and
/// folded instance, and a flood of new instances would otherwise pay for
/// it on every report.
const SWEEP_ON_RECORD_GAP: Duration = Duration::from_millis(100);
