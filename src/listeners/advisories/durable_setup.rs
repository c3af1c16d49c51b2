//! Durable mode's setup: the advisory stream, the totals bucket, the
//! dead-letter stream and the durable pull consumer, found or created, and
//! where counting resumes.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};

use super::api_errors::{is_consumer_not_found, is_stream_not_found};
use super::batch::Applier;
use super::dead_letter::DeadLetter;
use super::incarnation::Incarnations;
use super::parse::SUBJECTS;
use super::since_2_11;
use super::store::TotalsStore;
use super::totals::ACCOUNT_KEY;
use super::{subject_covers, AccountListener};
use crate::nats::retry::{ErrorKind, ListenerError};

/// Advisories asked for per pull request.
pub(super) const BATCH: usize = 1000;

/// Why durable mode cannot run (retried after a delay).
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// The named stream exists but does not capture the advisory subjects.
    #[error("advisory stream {stream:?} exists but its subjects {subjects:?} do not capture {missing:?}; use another name or add the subjects")]
    StreamMismatch {
        /// Stream name.
        stream: String,
        /// The subjects it captures.
        subjects: Vec<String>,
        /// Advisory subjects it does not capture.
        missing: Vec<String>,
    },
    /// A JetStream request about the stream failed.
    #[error("{what}: {source}")]
    Request {
        /// What was asked, for the log.
        what: String,
        /// How it failed.
        #[source]
        source: async_nats::Error,
    },
}

impl DurableError {
    /// The error of a failed request about `what`.
    fn request<E: Into<async_nats::Error>>(what: impl Into<String>) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| DurableError::Request {
            what,
            source: e.into(),
        }
    }
}

/// What the advisory stream captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamFit {
    /// Its subjects are exactly those the exporter creates it with: the
    /// consumer needs no filter.
    pub exact: bool,
    /// Its creation time in Unix ns (what its sequences belong to).
    pub created: i64,
    /// It captures the abandoned-batch and pin advisories too (a stream
    /// the exporter made before they were counted does not).
    pub since_2_11: bool,
}

/// Every subject the exporter's own advisory stream captures.
fn all_subjects() -> impl Iterator<Item = &'static str> {
    SUBJECTS.iter().chain(&since_2_11::SUBJECTS).copied()
}

/// Finds or creates the advisory stream: it must capture the delivery
/// advisories ([`SUBJECTS`]); abandoned batches and pins are counted from
/// it when it captures them too.
pub async fn ensure_stream(
    js: &jetstream::Context,
    name: &str,
    max_age: Duration,
    replicas: usize,
) -> Result<StreamFit, DurableError> {
    match js.get_stream(name).await {
        Ok(mut s) => {
            let info = s
                .info()
                .await
                .map_err(DurableError::request(format!("advisory stream {name:?}")))?;
            let created = unix_nanos(info.created);
            let subjects = info.config.subjects.clone();
            let missing: Vec<String> = SUBJECTS
                .iter()
                .filter(|needed| !subjects.iter().any(|f| subject_covers(f, needed)))
                .map(|s| s.to_string())
                .collect();
            if !missing.is_empty() {
                return Err(DurableError::StreamMismatch {
                    stream: name.to_string(),
                    subjects,
                    missing,
                });
            }
            let all: Vec<&str> = all_subjects().collect();
            let exact =
                subjects.len() == all.len() && all.iter().all(|s| subjects.iter().any(|f| f == s));
            let since_2_11 = since_2_11::SUBJECTS
                .iter()
                .all(|needed| subjects.iter().any(|f| subject_covers(f, needed)));
            Ok(StreamFit {
                exact,
                created,
                since_2_11,
            })
        }
        Err(e) if is_stream_not_found(&e) => {
            let mut created = js
                .create_stream(stream::Config {
                    name: name.to_string(),
                    subjects: all_subjects().map(str::to_string).collect(),
                    max_age,
                    storage: stream::StorageType::File,
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await
                .map_err(DurableError::request(format!(
                    "create advisory stream {name:?}"
                )))?;
            tracing::info!(stream = name, replicas, "created advisory stream");
            let info = created
                .info()
                .await
                .map_err(DurableError::request(format!("advisory stream {name:?}")))?;
            Ok(StreamFit {
                exact: true,
                created: unix_nanos(info.created),
                since_2_11: true,
            })
        }
        Err(e) => Err(DurableError::request(format!("advisory stream {name:?}"))(
            e,
        )),
    }
}

fn unix_nanos(t: time::OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(0)
}

/// What a durable session starts from, once its setup is done.
pub(super) struct DurableSession {
    /// The totals, as stored.
    pub(crate) store: TotalsStore,
    /// Changes to the totals bucket made by other exporters.
    pub(crate) watch: async_nats::jetstream::kv::Watch,
    /// Applies each advisory to the totals.
    pub(crate) applier: Applier,
    /// The durable consumer of the advisory stream.
    pub(crate) consumer: consumer::PullConsumer,
    /// The consumer's messages, pulled [`BATCH`] at a time.
    pub(crate) messages: consumer::pull::Stream,
}

/// Finds or creates the advisory stream, the totals bucket, the dead-letter
/// stream and the durable consumer, and starts pulling.
pub(super) async fn setup(
    l: &AccountListener,
    js: &jetstream::Context,
) -> Result<DurableSession, ListenerError> {
    let stream_name = l.args.stream.as_deref().unwrap_or_default();
    let replicas = usize::from(l.args.replicas);
    let fit = ensure_stream(js, stream_name, l.args.stream_max_age, replicas)
        .await
        .map_err(|e| match e {
            DurableError::StreamMismatch { .. } => {
                ListenerError::new(ErrorKind::StreamMismatch, e.to_string())
            }
            DurableError::Request { .. } => ListenerError::request("advisory stream", &e),
        })?;
    let source = fit.created;
    let (store, watch) = TotalsStore::open(js, &l.args.totals_bucket(), replicas).await?;
    let dead_letter = open_dead_letter(l, js).await?;
    // A consumer created again (deleted, or lost) starts after the ack floor
    // stored with the totals: what was counted is not handed out again.
    let deliver_policy = match store.entries.get(ACCOUNT_KEY) {
        Some(s) if s.totals.source == source && s.totals.ack_floor > 0 => {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: s.totals.ack_floor + 1,
            }
        }
        _ => consumer::DeliverPolicy::All,
    };
    let advisory_stream = js
        .get_stream_no_info(stream_name)
        .await
        .map_err(|e| ListenerError::request("advisory stream", &e))?;
    let consumer = durable_consumer(l, &advisory_stream, fit, deliver_policy).await?;
    log_resume(l, &store, source, &consumer);
    let since_2_11 = fit.since_2_11 && hands_out_since_2_11(&consumer);
    if !since_2_11 {
        tracing::warn!(
            account = %l.account,
            stream = stream_name,
            "the advisory stream or its consumer does not capture {:?}: abandoned batches and pins are counted live, only while the exporter runs (add the subjects to count them across restarts)",
            since_2_11::SUBJECTS
        );
    }
    let messages = consumer
        .stream()
        .max_messages_per_batch(BATCH)
        .heartbeat(Duration::from_secs(5))
        .expires(Duration::from_secs(30))
        .messages()
        .await
        .map_err(|e| ListenerError::request("advisory consumer", &e))?;
    let applier = Applier {
        account: l.account.clone(),
        source,
        max_series: l.args.max_series,
        js: js.clone(),
        incarnations: Incarnations::default(),
        dead_letter,
        captures: Default::default(),
        since_2_11,
    };
    Ok(DurableSession {
        store,
        watch,
        applier,
        consumer,
        messages,
    })
}

/// The dead-letter stream, when `--advisory-dead-letter-stream` asks for one.
async fn open_dead_letter(
    l: &AccountListener,
    js: &jetstream::Context,
) -> Result<Option<DeadLetter>, ListenerError> {
    let Some(dl) = &l.args.dead_letter_stream else {
        return Ok(None);
    };
    DeadLetter::setup(
        js.clone(),
        dl,
        &l.args.dead_letter_subject_prefix,
        l.args.dead_letter_terminated,
        &l.account,
        l.metrics.clone(),
    )
    .await
    .map(Some)
    .map_err(|e| ListenerError::request("dead-letter stream", &e))
}

/// The durable consumer, made again when it is gone.
async fn durable_consumer(
    l: &AccountListener,
    advisory_stream: &jetstream::stream::Stream<()>,
    fit: StreamFit,
    deliver_policy: consumer::DeliverPolicy,
) -> Result<consumer::PullConsumer, ListenerError> {
    let resumes = matches!(
        deliver_policy,
        consumer::DeliverPolicy::ByStartSequence { .. }
    );
    let config = consumer::pull::Config {
        durable_name: Some(l.args.consumer.clone()),
        description: Some("nats-delivery-exporter: counts delivery advisories".into()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: l.args.ack_wait,
        deliver_policy,
        // Never give up on an advisory: a limit would drop counts and
        // make advisories about the exporter's own consumer.
        max_deliver: -1,
        max_ack_pending: (BATCH * 10) as i64,
        num_replicas: usize::from(l.args.replicas),
        filter_subjects: match (fit.exact, fit.since_2_11) {
            (true, _) => Vec::new(),
            (false, true) => all_subjects().map(str::to_string).collect(),
            (false, false) => SUBJECTS.iter().map(|s| s.to_string()).collect(),
        },
        ..Default::default()
    };
    let failed = |e: &(dyn std::error::Error + 'static)| {
        ListenerError::request(&format!("durable consumer {:?}", l.args.consumer), e)
    };
    match advisory_stream.get_consumer(&l.args.consumer).await {
        Ok(c) => Ok(c),
        Err(e) if is_consumer_not_found(e.as_ref()) => {
            if resumes {
                // The totals say it existed: it was deleted (or lost) while
                // no session watched, which is counted as a session that
                // sees it go counts it.
                l.metrics
                    .listener_error(&l.account, ErrorKind::ConsumerMissing.as_label());
                tracing::warn!(
                    account = %l.account,
                    consumer = %l.args.consumer,
                    "the advisory consumer was gone; made again, starting after what was counted"
                );
            }
            advisory_stream
                .create_consumer(config)
                .await
                .map_err(|e| failed(&e))
        }
        Err(e) => Err(failed(e.as_ref())),
    }
}

/// Whether the consumer hands out the advisories of [`since_2_11`]: it has
/// no filter, or its filters cover them (one made before they were counted
/// filters them out).
fn hands_out_since_2_11(consumer: &consumer::PullConsumer) -> bool {
    let config = &consumer.cached_info().config;
    let filters: Vec<&str> = std::iter::once(config.filter_subject.as_str())
        .filter(|f| !f.is_empty())
        .chain(config.filter_subjects.iter().map(String::as_str))
        .collect();
    filters.is_empty()
        || since_2_11::SUBJECTS
            .iter()
            .all(|needed| filters.iter().any(|f| subject_covers(f, needed)))
}

/// One line per session says where counting resumes: enough to tell, after
/// a fault, whether advisories handed out again were recognised.
fn log_resume(
    l: &AccountListener,
    store: &TotalsStore,
    source: i64,
    consumer: &consumer::PullConsumer,
) {
    let stored = store.entries.get(ACCOUNT_KEY).map(|s| &s.totals);
    let info = consumer.cached_info();
    tracing::info!(
        account = %l.account,
        keys = store.entries.len(),
        received = stored.map_or(0, |t| t.received),
        stored_ack_floor = stored.map_or(0, |t| t.ack_floor),
        stored_source = stored.map_or(0, |t| t.source),
        source,
        consumer_ack_floor = info.ack_floor.stream_sequence,
        consumer_delivered = info.delivered.stream_sequence,
        "durable advisory listener: totals loaded, consumer ready"
    );
}
