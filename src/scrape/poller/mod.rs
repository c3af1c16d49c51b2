//! The Poller: polls every source of every configured server, all at once,
//! and hands back one [`Snapshot`] of what it saw.
//!
//! Polling happens when Prometheus scrapes (as the Prometheus guidelines for
//! exporters recommend): the numbers are as fresh as the scrape, and a source
//! that fails or hangs is reported down within the per-request timeout while
//! every other source is still served.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use url::Url;

use crate::jetstream::account_tiers::TierRates;
use crate::jetstream::cardinality::fold::EphemeralFolds;
use crate::jetstream::consumer_health::{ConsumerHealth, Replies};
use crate::jetstream::leaderless::LastLed;
use crate::jetstream::message_timestamps::MessageTimestamps;
use crate::jetstream::stream_lost::StreamLostReader;
use crate::lock::LockOrRecover;
use crate::poll_error::PollError;
use crate::redact::redacted;
use crate::scrape::settings::ScrapeSettings;
use crate::scrape::snapshot::Snapshot;
use crate::sources::kept::KeptBudget;
use crate::sources::server_cost::counting_reply_bytes;
use crate::sources::{self, AnySource, Fetcher, ServerLink, Source, SourceHealth, TargetSnapshot};
use crate::system::poll::{SurveyReport, SystemPolling};

mod nats_reads;
mod origins;
mod system;
use origins::OriginWatch;
use system::SystemSide;

/// One server and what the exporter remembers about it between scrapes.
#[derive(Debug)]
struct Target {
    /// The monitoring URL; `None` for a server found by the system-account survey.
    url: Option<Url>,
    /// The `server` label until the server's name is known, and whenever two
    /// targets would otherwise share one: `host:port`, plus the base path when
    /// another target has the same `host:port`.
    identity: String,
    /// The enabled sources, each with its own memory of this server.
    sources: Vec<Box<dyn AnySource>>,
    state: Mutex<TargetState>,
}

#[derive(Debug, Default)]
struct TargetState {
    server_name: Option<String>,
    server_version: Option<String>,
    max_pending: Option<i64>,
    last_success: BTreeMap<Source, f64>,
    errors: BTreeMap<Source, BTreeMap<&'static str, u64>>,
}

/// Every configured server, polled together.
#[derive(Debug)]
pub(crate) struct Poller {
    settings: ScrapeSettings,
    fetch: Fetcher,
    targets: Vec<Target>,
    /// Consumer history across polls; `None` when the status window is 0.
    health: Option<Mutex<ConsumerHealth>>,
    /// Reads the stored time of the messages consumer lag and age are
    /// measured from; `None` without a NATS connection.
    timestamps: Option<MessageTimestamps>,
    /// Ephemeral consumers folded across polls; `None` when they are kept.
    folds: Option<Mutex<EphemeralFolds>>,
    /// Reads streams' lost data; `None` unless `--stream-lost-reads`.
    stream_lost: Option<StreamLostReader>,
    /// Polling through the system account instead of the monitoring URLs.
    system: Option<SystemSide>,
    /// The figures each replicated group's leader last gave.
    last_led: Mutex<LastLed>,
    /// What each mirror and source skipped, and its removal forecast.
    origins: OriginWatch,
    /// The growth of the reader's account's tiers, across polls.
    tier_rates: TierRates,
}

impl Poller {
    /// A poller for every monitoring URL of `settings`, fetching with `fetch`.
    pub(crate) fn new(mut settings: ScrapeSettings, fetch: Fetcher) -> Poller {
        let check = &mut settings.sources.jsz_removal_check;
        check.get_or_insert(crate::jetstream::removed_before_delivery::could_count);
        let timeout = settings.timeout;
        settings.sources.jsz_poll_timeout.get_or_insert(timeout);
        let targets = settings
            .monitor_urls
            .iter()
            .map(|url| Target {
                identity: identity(url, &settings.monitor_urls),
                url: Some(url.clone()),
                sources: sources::per_target(&settings.sources),
                state: Mutex::default(),
            })
            .collect();
        let tier_rates = TierRates::new(settings.sources.jsz_fill_span);
        let window = settings.consumer_status_window;
        let health = (!window.is_zero()).then(|| Mutex::new(ConsumerHealth::new(window)));
        let folds =
            (!settings.keep_ephemeral_consumers).then(|| Mutex::new(EphemeralFolds::default()));
        Poller {
            settings,
            fetch,
            targets,
            health,
            timestamps: None,
            folds,
            stream_lost: None,
            system: None,
            last_led: Mutex::default(),
            origins: OriginWatch::default(),
            tier_rates,
        }
    }

    /// Reads the lost data of the streams of the timestamp reader's account
    /// through `reader` on every poll (with a timestamp reader only).
    pub(crate) fn read_stream_lost(&mut self, reader: StreamLostReader) {
        self.stream_lost = Some(reader);
    }

    /// Polls the servers `polling` finds through the system account instead
    /// of the monitoring URLs.
    pub(crate) fn poll_through_system_account(&mut self, polling: SystemPolling) {
        self.targets.clear();
        self.system = Some(SystemSide {
            polling,
            targets: Mutex::default(),
            totals: Mutex::default(),
        });
    }

    /// Reads message timestamps through `timestamps` on every poll, at most
    /// `consumer_timestamp_reads` new ones each time.
    pub(crate) fn read_timestamps(&mut self, timestamps: MessageTimestamps) {
        self.timestamps = Some(timestamps);
    }

    /// Polls every source of every server once; each is bounded by the timeout.
    pub(crate) async fn poll(&self) -> Snapshot {
        let started = Instant::now();
        let (targets, survey) = self.poll_servers().await;
        let mut snapshot = Snapshot::finished(targets);
        snapshot.hold_leaderless(&mut self.last_led.lock_or_recover(), unix_now());
        snapshot.survey = survey;
        snapshot.series = self.settings.consumer_series;
        if let Some(folds) = &self.folds {
            snapshot.fold_ephemerals(&mut folds.lock_or_recover());
        }
        self.judge_consumer_health(&mut snapshot, started).await;
        let window = self.settings.consumer_status_window;
        self.origins.watch(&mut snapshot, window, unix_now());
        self.find_stream_lost(&mut snapshot, started).await;
        self.read_account_counts(&mut snapshot, started).await;
        if let Some(limit) = self.settings.max_jetstream_series {
            snapshot.apply_budget(limit);
        }
        snapshot
    }

    /// Every server, each source at once: through the monitoring URLs, or
    /// the servers a survey of the system account finds.
    async fn poll_servers(&self) -> (Vec<TargetSnapshot>, Option<SurveyReport>) {
        match &self.system {
            None => {
                let polls = self.targets.iter().map(|t| async move {
                    let url = t.url.as_ref().expect("monitoring targets have a URL");
                    let kept = KeptBudget::new(self.settings.max_kept_size);
                    let link = ServerLink::Http {
                        fetch: &self.fetch,
                        base: url,
                        kept: &kept,
                    };
                    self.poll_target(t, link, self.settings.timeout).await
                });
                let mut targets = join_all(polls).await;
                distinct_server_labels(&mut targets, &self.targets);
                (targets, None)
            }
            Some(system) => {
                let (targets, report) = self.poll_system(system).await;
                (targets, Some(report))
            }
        }
    }

    /// Each exported consumer's status and lag, with message timestamps read
    /// for the consumers that lag most when there is a reader.
    async fn judge_consumer_health(&self, snapshot: &mut Snapshot, started: Instant) {
        let Some(health) = &self.health else {
            return;
        };
        // Locked for each step, never across an await: the timestamps
        // are to be read between the two. Single flight keeps polls one
        // at a time, so nothing else updates the state in between.
        let lock = || health.lock_or_recover();
        let now = unix_now();
        let reads = self.settings.consumer_timestamp_reads as usize;
        let (streams, consumers) = snapshot.rows();
        // Held rows (after the led ones) are judged from what was kept.
        let (led_streams, led) = snapshot.led();
        let (consumers, held) = consumers.split_at(led);
        let rows = (&streams[..led_streams], consumers);
        let replies = match &self.timestamps {
            Some(timestamps) => {
                // Ranking every consumer is only worth it with a reader.
                let requests = lock().candidates(rows, now, reads);
                // A message below a stream's first sequence is gone: its
                // cached time must not answer for a later one.
                for (account, stream) in &streams {
                    timestamps.forget_below(account, &stream.name, stream.state.first_seq);
                }
                // Within what is left of the timeout: the scrape's
                // answer is never later for the reads.
                let left = self.settings.timeout.saturating_sub(started.elapsed());
                timestamps.read(&requests, reads, left).await
            }
            None => Replies::new(),
        };
        let mut health_rows = lock().update(rows, now, &replies);
        health_rows.extend(lock().held_rows(held, now));
        snapshot.consumer_health = health_rows;
    }

    /// Polls every source of `target` through `link` at once, each within
    /// `timeout`, then settles what they brought.
    async fn poll_target(
        &self,
        target: &Target,
        link: ServerLink<'_>,
        timeout: Duration,
    ) -> TargetSnapshot {
        let polls = join_all(target.sources.iter().map(|source| async {
            let bytes = Arc::new(AtomicU64::new(0));
            let polled = counting_reply_bytes(bytes.clone(), source.poll_boxed(&link));
            let (result, took) = timed(timeout, polled).await;
            (result, (took, bytes.load(Ordering::Relaxed)))
        }))
        .await;
        self.settle(target, polls)
    }

    /// Absorbs the sources' replies in their order, settles the `server`
    /// label and finishes them; a failed source is down and counted.
    fn settle(
        &self,
        target: &Target,
        polls: Vec<(Result<sources::Absorb<'_>, PollError>, (Duration, u64))>,
    ) -> TargetSnapshot {
        let now = unix_now();
        let mut state = target.state.lock_or_recover();
        let mut snap = TargetSnapshot {
            server_name: state.server_name.clone(),
            server_version: state.server_version.clone(),
            max_pending: state.max_pending,
            ..TargetSnapshot::default()
        };
        for (source, (result, (took, reply_bytes))) in target.sources.iter().zip(polls) {
            let source = source.kind();
            let up = result.is_ok();
            match result {
                Ok(absorb) => {
                    state.last_success.insert(source, now);
                    absorb(&mut snap);
                }
                Err(e) => {
                    match &target.url {
                        Some(url) => {
                            tracing::warn!(url = %redacted(url), source = source.as_str(), error = %e, "poll failed")
                        }
                        None => {
                            tracing::warn!(server = %target.identity, source = source.as_str(), error = %e, "poll failed")
                        }
                    }
                    *state
                        .errors
                        .entry(source)
                        .or_default()
                        .entry(e.kind())
                        .or_insert(0) += 1;
                }
            }
            snap.health.push(SourceHealth {
                source,
                up,
                duration: took.as_secs_f64(),
                reply_bytes,
                last_success: state.last_success.get(&source).copied(),
                errors: state.errors.get(&source).cloned().unwrap_or_default(),
            });
        }
        state.server_name = snap.server_name.clone();
        state.server_version = snap.server_version.clone();
        state.max_pending = snap.max_pending;
        snap.server = state
            .server_name
            .clone()
            .unwrap_or_else(|| target.identity.clone());
        for source in &target.sources {
            source.finish_boxed(&mut snap);
        }
        snap
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Runs `poll` bounded by `timeout`, and measures it.
async fn timed<T>(
    timeout: Duration,
    poll: impl Future<Output = Result<T, PollError>>,
) -> (Result<T, PollError>, Duration) {
    let start = Instant::now();
    let result = match tokio::time::timeout(timeout, poll).await {
        Ok(r) => r,
        Err(_) => Err(PollError::Timeout(timeout)),
    };
    (result, start.elapsed())
}

/// A target's own label: `host:port`, with the base path when another
/// monitoring URL shares that `host:port` (never credentials).
fn identity(url: &Url, all: &[Url]) -> String {
    let shared = all
        .iter()
        .filter(|u| authority(u) == authority(url))
        .count()
        > 1;
    let path = url.path().trim_end_matches('/');
    if shared && !path.is_empty() {
        format!("{}{path}", authority(url))
    } else {
        authority(url)
    }
}

/// Two URLs that reach the same server (through two proxies, say) would
/// report the same `server` name and so emit the same series twice: such
/// targets are labelled by their own identity instead.
fn distinct_server_labels(snaps: &mut [TargetSnapshot], targets: &[Target]) {
    let mut uses: BTreeMap<String, usize> = BTreeMap::new();
    for s in snaps.iter() {
        *uses.entry(s.server.clone()).or_default() += 1;
    }
    for (snap, target) in snaps.iter_mut().zip(targets) {
        if uses[&snap.server] > 1 && snap.server != target.identity {
            let label = target.identity.clone();
            snap.closed = std::mem::take(&mut snap.closed)
                .into_iter()
                .map(|(mut k, n)| {
                    if k.server == snap.server {
                        k.server = label.clone();
                    }
                    (k, n)
                })
                .collect();
            snap.server = label;
        }
    }
}

/// `host:port` of a URL.
fn authority(url: &Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        _ => url.to_string(),
    }
}
