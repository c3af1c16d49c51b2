//! Live mode: a core subscription to the advisory subjects and to the API
//! audits ([`super::api_audit`]); in durable mode, the same for the API
//! audits alone, on a connection of their own.
//!
//! Advisories sent while the exporter is down are lost; use durable mode for
//! exact counts across restarts.
//!
//! Own drops, counted exactly: async-nats reports a full subscription buffer
//! only through a lossy event channel, but this connection carries nothing
//! but the advisory subscriptions, so every message it reads (`in_messages`)
//! is handed over or dropped. Every [`AUDIT_INTERVAL`] the listener reads
//! `in_messages`, flushes (after the round trip those are handed over or
//! dropped) and drains its buffers: `in_messages - received` is a lower
//! bound of the drops, exact when nothing arrived meanwhile, so the counter
//! never over-counts and catches up when traffic pauses. Dead-letter
//! capture uses a second connection to stay out of this arithmetic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Message, Subscriber};
use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{watch, Mutex};

use super::api_audit::{ApiAuditCounter, API_AUDIT_SUBJECT};
use super::counting::{AdvisoryCounter, Outcome};
use super::dead_letter::DeadLetter;
use super::live_queue::{self, Queue, Received};
use super::metrics::AccountLabels;
use super::parse::SUBJECTS;
use super::since_2_11::{self, Since211Counter};
use super::AccountListener;
use crate::nats;
use crate::nats::retry::{or_stop, retry_after, stopped, ErrorKind, ListenerError, ListenerHealth};

/// Default of the messages the listener may hold received and not yet
/// counted before it drops: about 2^20, so a burst of a million advisories
/// does not lose one while the listener catches up, within
/// `--advisories-buffer-bytes` (64 MiB by default).
pub(super) const SUBSCRIPTION_CAPACITY: usize = 1 << 20;

/// Most messages the subscription's own buffer holds, whatever
/// `--advisories-buffer`: the session task moves each into the byte-bounded
/// queue as it arrives.
const CONNECTION_CAPACITY: usize = 4_096;

/// How long the listener waits for the echo that says the server took its
/// subscriptions.
const ECHO_WITHIN: Duration = Duration::from_secs(5);

/// How often the listener updates `listener_up` and audits its own drops.
pub(super) const AUDIT_INTERVAL: Duration = Duration::from_secs(1);

/// Copy attempts per dead message in live mode, which cannot ask for a
/// redelivery and must not fall behind while it retries.
const LIVE_CAPTURE_ATTEMPTS: u32 = 3;

/// What a live session listens to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scope {
    /// The delivery advisories and the API audits (live mode); owns
    /// `listener_up`.
    Everything,
    /// The API audits only (durable mode, whose stream holds the others).
    ApiAudits,
}

/// The counters a session writes to; kept across sessions.
struct Counters {
    delivery: Option<AdvisoryCounter>,
    api: ApiAuditCounter,
    since_2_11: Since211Counter,
    /// Whether [`since_2_11`] advisories are counted here (durable mode
    /// counts them from its stream when that captures them).
    since_live: Arc<AtomicBool>,
}

/// Runs the live listener of one account until shutdown.
pub(super) async fn run(l: AccountListener, shutdown: watch::Receiver<bool>) {
    let since_live = Arc::new(AtomicBool::new(true));
    run_scope(l, shutdown, Scope::Everything, since_live).await
}

/// Runs a live session of `scope` for one account until shutdown; the
/// advisories of [`since_2_11`] are counted while `since_live` holds.
pub(super) async fn run_scope(
    l: AccountListener,
    mut shutdown: watch::Receiver<bool>,
    scope: Scope,
    since_live: Arc<AtomicBool>,
) {
    let counters = Arc::new(Mutex::new(Counters {
        delivery: (scope == Scope::Everything).then(|| {
            AdvisoryCounter::new(
                &l.account,
                l.metrics.clone(),
                l.args.dedup_window,
                l.args.max_series,
            )
        }),
        api: ApiAuditCounter::new(&l.account, l.metrics.api_audit.clone(), l.args.max_series),
        since_2_11: Since211Counter::new(
            &l.account,
            l.metrics.since_2_11.clone(),
            l.metrics
                .malformed
                .get_or_create(&AccountLabels {
                    account: l.account.clone(),
                })
                .clone(),
            l.args.max_series,
        ),
        since_live,
    }));
    let health = Health { l: &l, scope };
    while let Err(e) = session(&l, scope, &counters, &mut shutdown).await {
        if retry_after(&health, health.what(), e, &mut shutdown).await {
            break;
        }
    }
    health.set_up(false);
}

/// The listener's health as a session of `scope` reports it: only the
/// session of everything speaks for `listener_up`.
struct Health<'a> {
    l: &'a AccountListener,
    scope: Scope,
}

impl Health<'_> {
    fn what(&self) -> &'static str {
        match self.scope {
            Scope::Everything => "advisory listener",
            Scope::ApiAudits => "API audit listener",
        }
    }
}

impl ListenerHealth for Health<'_> {
    fn set_up(&self, up: bool) {
        if self.scope == Scope::Everything {
            self.l.set_up(up);
        }
    }

    fn count_error(&self, kind: ErrorKind) {
        // The durable listener's own connection counts refused logins.
        if self.scope == Scope::Everything || kind != ErrorKind::Connect {
            self.l.count_error(kind);
        }
    }

    fn account(&self) -> Option<&str> {
        Some(&self.l.account)
    }
}

async fn subscribe_all(
    client: &Client,
    scope: Scope,
) -> Result<SelectAll<Subscriber>, ListenerError> {
    let subjects: &[&str] = match scope {
        Scope::Everything => &SUBJECTS,
        Scope::ApiAudits => &[],
    };
    let mut subs = Vec::new();
    let live_in_both = since_2_11::SUBJECTS.iter().chain([&API_AUDIT_SUBJECT]);
    for s in subjects.iter().chain(live_in_both) {
        subs.push(
            client
                .subscribe(*s)
                .await
                .map_err(|e| ListenerError::request(&format!("subscribe {s}"), &e))?,
        );
    }
    Ok(futures::stream::select_all(subs))
}

/// Tracks the connection's message count against what was handed over.
struct DropAudit {
    baseline: u64,
    received: u64,
    reported: u64,
}

/// What the session task does with each message it takes from the
/// subscriptions: counts it for the drop audit and queues it for counting,
/// or drops it (and counts the drop) when the queue is full.
struct Intake {
    audit: DropAudit,
    queue: Queue,
    dropped: Counter,
    /// Dropped by the queue since the last log line.
    unlogged: u64,
}

impl Intake {
    fn take(&mut self, msg: Message) {
        self.audit.received += 1;
        if !self.queue.push(msg) {
            self.dropped.inc();
            self.unlogged += 1;
        }
    }
}

async fn session(
    l: &AccountListener,
    scope: Scope,
    counters: &Arc<Mutex<Counters>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ListenerError> {
    let purpose = match scope {
        Scope::Everything => "advisories",
        Scope::ApiAudits => "api-audits",
    };
    // The session task only moves messages into the queue: the
    // subscription's own buffer needs little room.
    let capacity = l.args.buffer.clamp(1, CONNECTION_CAPACITY);
    let client = l
        .connect_counting(purpose, capacity, scope == Scope::Everything)
        .await?;
    let dead_letter = match (&l.args.dead_letter_stream, scope) {
        (Some(stream), Scope::Everything) => match set_up_dead_letter(l, stream, shutdown).await? {
            Some(dl) => Some(dl),
            None => return Ok(()),
        },
        _ => None,
    };
    let mut audit = DropAudit {
        baseline: client.statistics().in_messages.load(Ordering::Relaxed),
        received: 0,
        reported: 0,
    };
    let mut subs = subscribe_all(&client, scope).await?;
    // The subscription is only live once the server has processed SUB. While
    // the server refuses us this waits, so shutdown must be able to cut in.
    match or_stop(shutdown, client.flush()).await {
        None => return Ok(()),
        Some(r) => r.map_err(|e| ListenerError::request("subscribe", &e))?,
    }
    // `flush` only writes: `up` waits for an echo, which the server sends
    // after it took the SUBs (an advisory sent before then reaches no one).
    match or_stop(shutdown, nats::round_trip(&client, ECHO_WITHIN)).await {
        None => return Ok(()),
        // The echo came on this connection: not an advisory, not a drop.
        Some(Ok(true)) => audit.baseline += 1,
        Some(Ok(false)) => tracing::warn!(
            account = %l.account,
            "no echo from the server on the listener's own inbox within {ECHO_WITHIN:?} (may its user publish to _INBOX.>?): advisories sent while it subscribed may be missed"
        ),
        Some(Err(e)) => return Err(ListenerError::request("subscribe", &*e)),
    }
    let (queue, received) = live_queue::queue(l.args.buffer.max(1), l.args.buffer_bytes);
    let counting = tokio::spawn(count(received, counters.clone(), dead_letter));
    let mut intake = Intake {
        audit,
        queue,
        dropped: l.metrics.dropped.get_or_create_owned(&AccountLabels {
            account: l.account.clone(),
        }),
        unlogged: 0,
    };
    let result = listen(l, scope, &client, &mut subs, &mut intake, shutdown).await;
    // What was queued is still counted.
    drop(intake);
    let _ = counting.await;
    result
}

/// Counts what the queue hands over, until it is dropped and empty.
async fn count(
    mut received: Received,
    counters: Arc<Mutex<Counters>>,
    dead_letter: Option<DeadLetter>,
) {
    while let Some(msg) = received.next().await {
        handle(&mut *counters.lock().await, dead_letter.as_ref(), msg).await;
    }
}

/// Moves messages from the subscriptions into the queue and audits the
/// drops every second, until shutdown or the subscriptions end.
async fn listen(
    l: &AccountListener,
    scope: Scope,
    client: &Client,
    subs: &mut SelectAll<Subscriber>,
    intake: &mut Intake,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ListenerError> {
    let health = Health { l, scope };
    health.set_up(true);
    let mut tick = tokio::time::interval(AUDIT_INTERVAL);
    loop {
        tokio::select! {
            _ = stopped(shutdown) => return Ok(()),
            msg = subs.next() => match msg {
                Some(msg) => intake.take(msg),
                None => return Err(ListenerError::new(ErrorKind::Other, "advisory subscriptions closed")),
            },
            _ = tick.tick() => {
                if intake.unlogged > 0 {
                    tracing::error!(
                        account = %l.account,
                        dropped = std::mem::take(&mut intake.unlogged),
                        "advisories dropped: the listener's queue was full (--advisories-buffer, --advisories-buffer-bytes)"
                    );
                }
                let connected = nats::is_connected(client);
                health.set_up(connected);
                if !connected {
                    continue;
                }
                let Some(lower) = audit_drops(client, subs, intake).await else {
                    continue;
                };
                let audit = &mut intake.audit;
                if lower > audit.reported {
                    intake.dropped.inc_by(lower - audit.reported);
                    tracing::error!(
                        account = %l.account,
                        dropped = lower,
                        "the exporter's own NATS client dropped advisories (buffer full)"
                    );
                    audit.reported = lower;
                }
                l.metrics.drop_audits.inc();
            }
        }
    }
}

/// Sets up dead-letter capture on its own connection; `None` when shutdown
/// came first.
async fn set_up_dead_letter(
    l: &AccountListener,
    stream: &str,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<DeadLetter>, ListenerError> {
    let dl_client = l.connect("dead-letter", 1024).await?;
    let setup = DeadLetter::setup(
        async_nats::jetstream::new(dl_client),
        stream,
        &l.args.dead_letter_subject_prefix,
        l.args.dead_letter_terminated,
        &l.account,
        l.metrics.clone(),
    );
    match or_stop(shutdown, setup).await {
        None => Ok(None),
        Some(r) => {
            Ok(Some(r.map_err(|e| {
                ListenerError::request("dead-letter stream", &e)
            })?))
        }
    }
}

/// One audit round: reads the connection's message count, waits for a round
/// trip, drains the buffers and returns the lower bound of the drops so far
/// (`None` when the round trip did not complete).
async fn audit_drops(
    client: &Client,
    subs: &mut SelectAll<Subscriber>,
    intake: &mut Intake,
) -> Option<u64> {
    let a = client.statistics().in_messages.load(Ordering::Relaxed);
    // Only a completed round trip proves those `a` messages were
    // handed over or dropped.
    let flushed = tokio::time::timeout(AUDIT_INTERVAL * 5, client.flush()).await;
    if !matches!(flushed, Ok(Ok(()))) {
        return None;
    }
    // Unconstrained: under Tokio's cooperative budget a channel
    // that still holds messages can answer "not ready", and
    // every message left behind here would be taken for a drop.
    while let Some(Some(msg)) = tokio::task::unconstrained(subs.next()).now_or_never() {
        intake.take(msg);
    }
    let audit = &intake.audit;
    Some(
        a.saturating_sub(audit.baseline)
            .saturating_sub(audit.received),
    )
}

async fn handle(counters: &mut Counters, dead_letter: Option<&DeadLetter>, msg: Message) {
    if msg.subject.as_str() == API_AUDIT_SUBJECT {
        counters.api.record(&msg.payload);
        return;
    }
    if Since211Counter::wants(&msg.subject) {
        if counters.since_live.load(Ordering::Relaxed) {
            counters.since_2_11.record(&msg.subject, &msg.payload);
        }
        return;
    }
    let Some(counter) = counters.delivery.as_mut() else {
        return;
    };
    let (advisory, first_time) = match counter.record(&msg.subject, &msg.payload) {
        Outcome::Counted(a) => (a, true),
        Outcome::Duplicate(a) => (a, false),
        Outcome::Malformed | Outcome::Unknown => return,
    };
    let Some(dl) = dead_letter else { return };
    if !dl.wants(advisory.kind) {
        return;
    }
    // Live mode cannot ask for a redelivery: retry a few times, then give up
    // (each failed attempt is counted in dead_letter_errors, the loss in
    // dead_letter_failed).
    for attempt in 1..=LIVE_CAPTURE_ATTEMPTS {
        match dl.capture(&advisory, first_time).await {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(
                    account = %counter.account(),
                    stream = %advisory.stream,
                    seq = advisory.stream_seq,
                    attempt,
                    "dead-letter capture failed: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    dl.give_up(&advisory);
}
