//! Durable mode: a stream keeps the advisories while the exporter is away,
//! a durable pull consumer hands them out, and the totals live in a
//! key-value bucket of the account ([`super::store`]).
//!
//! Commit first, acknowledge last: a batch is applied to the stored totals,
//! the changed keys are written (compare-and-set), the counters shown are
//! raised to what was written, and only then are the advisories
//! acknowledged. A crash at any point loses nothing and counts nothing
//! twice: a redelivered advisory is recognised by its advisory-stream
//! sequence, stored with the totals. Replicas sharing the consumer each
//! commit their share and watch the bucket, so all show the same totals.
//!
//! Every [`PROBE_INTERVAL`] the consumer is asked for its state: a stream or
//! consumer gone, JetStream off or a refused subject ends the session with
//! its reason counted, and setup starts again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use tokio::sync::watch;

use super::batch::{counts_any, Applier};
pub use super::durable_setup::{ensure_stream, DurableError, StreamFit};
use super::durable_setup::{setup, DurableSession, BATCH};
use super::metrics::AdvisoryMetrics;
use super::store::TotalsStore;
use super::totals::{Totals, ACCOUNT_KEY};
use super::AccountListener;
use crate::nats;
use crate::nats::retry::{or_stop, retry_after, stopped, ErrorKind, ListenerError};

/// Subscription buffer of the pull consumer's connection (>= 1.5 x batch: a
/// pull consumer whose client drops messages stalls until redelivery).
pub(crate) const SUBSCRIPTION_CAPACITY: usize = 4 * BATCH;

/// How long a batch may wait for more advisories once one has arrived.
const GATHER: Duration = Duration::from_millis(20);

/// Longest time setup may take before it is abandoned and retried.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the listener checks that its consumer still exists.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Runs the durable listener of one account until shutdown.
/// `since_live` is set to whether the advisories of
/// [`super::since_2_11`] are to be counted live (the advisory stream does
/// not capture them) at each session's start.
pub(crate) async fn run(
    l: AccountListener,
    mut shutdown: watch::Receiver<bool>,
    since_live: Arc<AtomicBool>,
) {
    let mut shown: Option<Shown> = None;
    while let Err(e) = session(&l, &mut shown, &mut shutdown, &since_live).await {
        if retry_after(&l, "durable advisory listener", e, &mut shutdown).await {
            break;
        }
    }
    l.metrics.set_up(&l.account, false);
}

/// What the counters of this account show: the totals of one bucket.
struct Shown {
    bucket_created: i64,
    series: Vec<(String, String)>,
}

async fn session(
    l: &AccountListener,
    shown: &mut Option<Shown>,
    shutdown: &mut watch::Receiver<bool>,
    since_live: &AtomicBool,
) -> Result<(), ListenerError> {
    let client = l
        .connect("advisories-durable", SUBSCRIPTION_CAPACITY)
        .await?;
    let Some(DurableSession {
        mut store,
        watch,
        mut applier,
        consumer,
        messages,
    }) = set_up_in_time(l, &client, shutdown).await?
    else {
        return Ok(());
    };
    since_live.store(!applier.since_2_11, Ordering::Relaxed);
    show_store(l, &store, shown);
    let watcher = tokio::spawn(mirror(l.clone(), watch));
    l.metrics.set_up(&l.account, true);
    let mut messages = messages.ready_chunks(BATCH);
    let mut probe = tokio::time::interval(PROBE_INTERVAL);
    probe.tick().await;
    let mut ack_floor = 0;
    let result = loop {
        tokio::select! {
            _ = stopped(shutdown) => break Ok(()),
            _ = probe.tick() => match check(&consumer).await {
                Ok(floor) => {
                    ack_floor = floor;
                    if let Err(e) = store_ack_floor(&mut store, applier.source, floor).await {
                        break Err(e);
                    }
                    l.metrics.set_up(&l.account, nats::is_connected(&client));
                }
                Err(e) => break Err(e),
            },
            next = messages.next() => {
                let Some(chunk) = next else {
                    break Err(ListenerError::new(ErrorKind::Other, "advisory consumer stream ended"));
                };
                let (batch, failed) = gather_batch(chunk, &mut messages).await;
                // The ack floor bounds what the bucket must remember; asking
                // for it per batch keeps each stored value small. Only for
                // a batch that counts something: see `counts_any`.
                if counts_any(&batch) {
                    match check(&consumer).await {
                        Ok(floor) => ack_floor = floor,
                        Err(e) => break Err(e),
                    }
                }
                if let Err(e) = commit_then_ack(&mut store, &mut applier, &l.metrics, batch, ack_floor).await {
                    break Err(e);
                }
                if let Some(e) = failed {
                    // Missed heartbeats and the like: the stream keeps
                    // pulling, but ask at once whether the consumer is gone.
                    tracing::warn!(account = %l.account, "advisory consumer: {e}");
                    if let Err(e) = check(&consumer).await {
                        break Err(e);
                    }
                }
            }
        }
    };
    watcher.abort();
    // Stop asking for more, then make sure every acknowledgement sent so far
    // reaches the server before this process lets go.
    drop(messages);
    let _ = tokio::time::timeout(Duration::from_secs(5), client.flush()).await;
    result
}

/// Runs setup, which shutdown may cut into (nothing is acknowledged yet);
/// `None` when shutdown came first.
///
/// Each request of setup has its own timeout; this one bounds the whole, so
/// a step that waits on a cluster still electing leaders is retried rather
/// than leaving the listener down without a word.
async fn set_up_in_time(
    l: &AccountListener,
    client: &async_nats::Client,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<DurableSession>, ListenerError> {
    let js = jetstream::new(client.clone());
    match or_stop(shutdown, tokio::time::timeout(SETUP_TIMEOUT, setup(l, &js))).await {
        None => Ok(None),
        Some(Ok(r)) => Ok(Some(r?)),
        Some(Err(_)) => Err(ListenerError::new(
            ErrorKind::Timeout,
            format!("setup did not finish in {} s", SETUP_TIMEOUT.as_secs()),
        )),
    }
}

/// Messages of the advisory consumer, as many as are ready at once.
type Chunks = futures::stream::ReadyChunks<consumer::pull::Stream>;

/// Completes the chunk that arrived into one batch: under load it waits
/// [`GATHER`] for more, up to [`BATCH`] (one commit per key per batch is the
/// cost, so larger batches cost less per advisory). Returns the messages and
/// the last error the stream reported among them.
async fn gather_batch(
    mut chunk: Vec<Result<jetstream::Message, consumer::pull::MessagesError>>,
    messages: &mut Chunks,
) -> (
    Vec<jetstream::Message>,
    Option<consumer::pull::MessagesError>,
) {
    let gather = tokio::time::Instant::now() + GATHER;
    while chunk.len() < BATCH {
        match tokio::time::timeout_at(gather, messages.next()).await {
            Ok(Some(more)) => chunk.extend(more),
            _ => break,
        }
    }
    let mut batch = Vec::with_capacity(chunk.len());
    let mut failed = None;
    for item in chunk {
        match item {
            Ok(m) => batch.push(m),
            Err(e) => failed = Some(e),
        }
    }
    (batch, failed)
}

/// Asks for the consumer's state; returns its ack floor (advisory stream
/// sequence) or why the listener cannot go on.
async fn check(consumer: &consumer::PullConsumer) -> Result<u64, ListenerError> {
    match tokio::time::timeout(PROBE_INTERVAL, consumer.get_info()).await {
        Ok(Ok(info)) => Ok(info.ack_floor.stream_sequence),
        Ok(Err(e)) => Err(ListenerError::request("advisory consumer", &e)),
        Err(_) => Err(ListenerError::new(
            ErrorKind::Timeout,
            "advisory consumer: no answer to a state request",
        )),
    }
}

/// Stores a consumer ack floor that moved since the last batch: a consumer
/// created again starts after it. A lost race is left to the next probe.
async fn store_ack_floor(
    store: &mut TotalsStore,
    source: i64,
    floor: u64,
) -> Result<(), ListenerError> {
    let Some(account) = store.entries.get(ACCOUNT_KEY) else {
        return Ok(());
    };
    let mut t = account.totals.clone();
    if t.source != source || t.ack_floor >= floor {
        return Ok(());
    }
    t.ack_floor = floor;
    t.prune(source, floor);
    let conflicts = store
        .commit([(ACCOUNT_KEY.to_string(), t)].into_iter().collect())
        .await?;
    for key in conflicts {
        store.reload(&key).await?;
    }
    Ok(())
}

/// Most attempts at one batch when other replicas keep writing the same keys.
const COMMIT_ATTEMPTS: usize = 20;

/// Applies a batch, stores it, shows it, then acknowledges it.
async fn commit_then_ack(
    store: &mut TotalsStore,
    applier: &mut Applier,
    metrics: &AdvisoryMetrics,
    batch: Vec<jetstream::Message>,
    ack_floor: u64,
) -> Result<(), ListenerError> {
    if batch.is_empty() {
        return Ok(());
    }
    applier.captures.clear();
    for _ in 0..COMMIT_ATTEMPTS {
        let mut work = applier.apply(store, &batch).await;
        for (key, t) in work.changed.iter_mut() {
            t.prune(applier.source, ack_floor);
            if key == ACCOUNT_KEY && applier.source == t.source {
                t.ack_floor = t.ack_floor.max(ack_floor);
            }
        }
        // Series first, the account last: a scrape in between never sees
        // an advisory received whose count is not shown yet.
        let mut keys: Vec<String> = work.changed.keys().cloned().collect();
        keys.sort_by_key(|k| k == ACCOUNT_KEY);
        let conflicts = store.commit(work.changed).await?;
        if !conflicts.is_empty() {
            // Another replica wrote these keys: read them and apply again
            // (what was stored, this batch's part included, is recognised).
            for key in &conflicts {
                store.reload(key).await?;
            }
            continue;
        }
        for key in &keys {
            if let Some(s) = store.entries.get(key) {
                show(&applier.account, key, &s.totals, metrics);
            }
        }
        for i in work.ack {
            if let Err(e) = batch[i].ack().await {
                tracing::warn!(account = %applier.account, "acknowledging an advisory: {e}");
            }
        }
        return Ok(());
    }
    Err(ListenerError::store(format!(
        "the totals kept changing under {COMMIT_ATTEMPTS} attempts to store one batch"
    )))
}

/// Shows one stored key in the counters.
fn show(account: &str, key: &str, t: &Totals, metrics: &AdvisoryMetrics) {
    if key == ACCOUNT_KEY {
        metrics.show_account(account, t);
    } else if !t.stream.is_empty() {
        metrics.show_series(account, t);
    }
}

/// Shows every stored key. A bucket other than the one shown before was
/// emptied and made again (a server restarted without its store): its totals
/// start again, so the counters are removed first and restart from what the
/// new bucket holds.
fn show_store(l: &AccountListener, store: &TotalsStore, shown: &mut Option<Shown>) {
    if let Some(before) = shown.as_ref() {
        if before.bucket_created != store.created {
            tracing::error!(
                account = %l.account,
                "the totals bucket was created again (emptied store?): the stored totals are gone and the counters start again from zero"
            );
            l.metrics.forget_account(&l.account, &before.series);
        }
    }
    l.metrics.show_account(
        &l.account,
        store
            .entries
            .get(ACCOUNT_KEY)
            .map(|s| &s.totals)
            .unwrap_or(&Totals::default()),
    );
    for (key, s) in &store.entries {
        show(&l.account, key, &s.totals, &l.metrics);
    }
    *shown = Some(Shown {
        bucket_created: store.created,
        series: store.series(),
    });
}

/// Follows the bucket for the totals other replicas store, so every replica
/// shows the same totals.
async fn mirror(l: AccountListener, mut watch: async_nats::jetstream::kv::Watch) {
    while let Some(Ok(entry)) = watch.next().await {
        if entry.operation != async_nats::jetstream::kv::Operation::Put {
            continue;
        }
        if let Ok(t) = serde_json::from_slice::<Totals>(&entry.value) {
            show(&l.account, &entry.key, &t, &l.metrics);
        }
    }
}
