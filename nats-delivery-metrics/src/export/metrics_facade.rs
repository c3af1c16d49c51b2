//! The `metrics` facade backend (feature `metrics`). The facade has no
//! collection callback, so the counters are copied into the recorder on
//! request: counters with `absolute` (never backwards), gauges with `set`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::Label;

use super::families::Kind;
use crate::state::Shared;

/// Copies one [`ClientMetrics`](crate::ClientMetrics)' counters into the
/// `metrics` recorder in use (a local one set with
/// `metrics::with_local_recorder`, else the global one). Cheap to clone.
///
/// Exact as of the last copy: call [`Self::update`] right before your
/// exporter renders (metrics-exporter-prometheus' `PrometheusHandle::render`),
/// or let [`Self::spawn_updates`] copy every period. The facade cannot
/// remove a series: a gauge whose subscription has ended (pending messages
/// and bytes, high water, limits) is set to 0 and stays until the recorder
/// forgets it (metrics-exporter-prometheus' `idle_timeout`).
#[derive(Debug, Clone)]
pub struct MetricsFacade {
    shared: Arc<Shared>,
    /// Gauge series written by the last copy: `[name, label values...]`.
    gauges: Arc<Mutex<BTreeSet<Vec<String>>>>,
}

impl MetricsFacade {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        MetricsFacade {
            shared,
            gauges: Arc::default(),
        }
    }

    /// Copies every counter and gauge into the current recorder now.
    pub fn update(&self) {
        // One copy at a time, so that a slower one cannot set again a gauge
        // that a newer one has set to 0.
        let mut gauges = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        let mut written = BTreeSet::new();
        for collected in super::collect(&self.shared) {
            let family = collected.family;
            let name = family.exposed_name();
            match family.kind {
                Kind::Counter => metrics::describe_counter!(name.clone(), family.help),
                Kind::Gauge | Kind::Ratio => metrics::describe_gauge!(name.clone(), family.help),
            }
            for sample in &collected.samples {
                let labels: Vec<Label> = sample
                    .label_pairs(family)
                    .map(|(k, v)| Label::new(k, v.to_string()))
                    .collect();
                match (family.kind, sample.value) {
                    (Kind::Counter, super::Value::Count(n)) => {
                        metrics::counter!(name.clone(), labels).absolute(n)
                    }
                    (_, value) => {
                        metrics::gauge!(name.clone(), labels).set(value.as_f64());
                        let mut series = vec![name.clone()];
                        series.extend(sample.labels.iter().cloned());
                        written.insert(series);
                    }
                }
            }
        }
        for gone in gauges.difference(&written) {
            let family = super::families::ALL
                .iter()
                .find(|f| f.name == gone[0])
                .expect("a gauge written before");
            let labels: Vec<Label> = family
                .labels
                .iter()
                .zip(&gone[1..])
                .map(|(k, v)| Label::new(*k, v.clone()))
                .collect();
            metrics::gauge!(gone[0].clone(), labels).set(0.0);
        }
        *gauges = written;
    }

    /// Copies every `period` from a Tokio task into the global recorder,
    /// until the returned [`UpdateTask`] is dropped.
    pub fn spawn_updates(&self, period: Duration) -> UpdateTask {
        let facade = self.clone();
        UpdateTask(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            loop {
                ticks.tick().await;
                facade.update();
            }
        }))
    }
}

/// The task of [`MetricsFacade::spawn_updates`]; dropping it stops the copies.
#[derive(Debug)]
pub struct UpdateTask(tokio::task::JoinHandle<()>);

impl Drop for UpdateTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
