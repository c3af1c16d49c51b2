//! Durable mode: a stream keeps the advisories while the exporter is away, and
//! a durable pull consumer hands them out.
//!
//! An advisory is acknowledged only after it has been counted (and, with
//! dead-letter capture, after the copy's PubAck), so advisories produced while
//! the exporter is stopped are counted when it comes back, and replicas
//! sharing the consumer each count a disjoint share. On shutdown the client is
//! flushed so every acknowledgement sent reaches the server; an advisory that
//! was counted but whose acknowledgement was lost in a crash is redelivered to
//! a process that starts from zero anyway (the crashed process's counts are gone
//! with it, unless a scrape caught them in between: the one window where a
//! count can repeat, documented in the README).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use tokio::sync::watch;

use super::counting::{AdvisoryCounter, Outcome};
use super::dead_letter::{is_stream_not_found, DeadLetter, CAPTURE_ATTEMPTS};
use super::parse::SUBJECTS;
use super::{or_stop, retry_after, stopped, subject_covers, AccountListener};
use crate::nats_connection;

/// Advisories asked for per pull request.
pub const BATCH: usize = 1000;
/// Subscription buffer of the pull consumer's connection (>= 1.5 x batch: a
/// pull consumer whose client drops messages stalls until redelivery).
pub const SUBSCRIPTION_CAPACITY: usize = 4 * BATCH;

/// Why durable mode cannot run (retried after a delay).
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// The named stream exists but does not capture the advisory subjects.
    #[error("advisory stream {stream:?} exists but its subjects {subjects:?} do not capture {missing:?}; use another name or add the subjects")]
    StreamMismatch {
        /// Stream name.
        stream: String,
        /// Its subjects.
        subjects: Vec<String>,
        /// Advisory subjects it does not capture.
        missing: Vec<String>,
    },
    /// Anything else (connection, JetStream request).
    #[error("{0}")]
    Other(String),
}

fn other(e: impl std::fmt::Display) -> DurableError {
    DurableError::Other(e.to_string())
}

/// Finds or creates the advisory stream; returns whether its subjects are
/// exactly the advisory subjects (then the consumer needs no filter).
pub async fn ensure_stream(
    js: &jetstream::Context,
    name: &str,
    max_age: Duration,
) -> Result<bool, DurableError> {
    match js.get_stream(name).await {
        Ok(mut s) => {
            let subjects = s.info().await.map_err(other)?.config.subjects.clone();
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
            let exact = subjects.len() == SUBJECTS.len()
                && SUBJECTS.iter().all(|s| subjects.iter().any(|f| f == s));
            Ok(exact)
        }
        Err(e) if is_stream_not_found(&e) => {
            js.create_stream(stream::Config {
                name: name.to_string(),
                subjects: SUBJECTS.iter().map(|s| s.to_string()).collect(),
                max_age,
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| other(format!("create advisory stream {name:?}: {e}")))?;
            tracing::info!(stream = name, "created advisory stream");
            Ok(true)
        }
        Err(e) => Err(other(format!("advisory stream {name:?}: {e}"))),
    }
}

/// Runs the durable listener of one account until shutdown.
pub async fn run(l: AccountListener, mut shutdown: watch::Receiver<bool>) {
    let mut counter = AdvisoryCounter::new(&l.account, l.metrics.clone(), l.args.dedup_window);
    while let Err(e) = session(&l, &mut counter, &mut shutdown).await {
        if retry_after(&l, "durable advisory listener", e, &mut shutdown).await {
            break;
        }
    }
    l.metrics.set_up(&l.account, false);
}

async fn session(
    l: &AccountListener,
    counter: &mut AdvisoryCounter,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), DurableError> {
    let stream_name = l.args.stream.as_deref().unwrap_or_default();
    let client = nats_connection::connect(
        &l.nats,
        &l.auth,
        "advisories-durable",
        SUBSCRIPTION_CAPACITY,
    )
    .await
    .map_err(other)?;
    let js = jetstream::new(client.clone());
    // Setup makes JetStream requests that wait while the server refuses us;
    // shutdown may cut in (nothing is acknowledged yet).
    let setup = setup(l, &js, stream_name);
    let (dead_letter, mut messages) = match or_stop(shutdown, setup).await {
        None => return Ok(()),
        Some(r) => r?,
    };
    l.metrics.set_up(&l.account, true);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let result = loop {
        tokio::select! {
            _ = stopped(shutdown) => break Ok(()),
            _ = tick.tick() => {
                l.metrics.set_up(&l.account, nats_connection::is_connected(&client));
            }
            next = messages.next() => match next {
                Some(Ok(msg)) => handle(counter, dead_letter.as_ref(), msg).await,
                Some(Err(e)) => {
                    // Missed heartbeats and similar are transient; the
                    // stream keeps pulling. A deleted consumer is not.
                    tracing::warn!(account = %l.account, "advisory consumer: {e}");
                    if matches!(e.kind(), consumer::pull::MessagesErrorKind::ConsumerDeleted) {
                        break Err(other("advisory consumer was deleted; re-creating"));
                    }
                }
                None => break Err(other("advisory consumer stream ended")),
            },
        }
    };
    // Stop asking for more, then make sure every acknowledgement sent so far
    // reaches the server before this process lets go.
    drop(messages);
    let _ = tokio::time::timeout(Duration::from_secs(5), client.flush()).await;
    result
}

/// Finds or creates the streams and the durable consumer and starts pulling.
async fn setup(
    l: &AccountListener,
    js: &jetstream::Context,
    stream_name: &str,
) -> Result<(Option<DeadLetter>, consumer::pull::Stream), DurableError> {
    let exact = ensure_stream(js, stream_name, l.args.stream_max_age).await?;
    let dead_letter = match &l.args.dead_letter_stream {
        Some(dl) => Some(
            DeadLetter::setup(
                js.clone(),
                dl,
                &l.args.dead_letter_subject_prefix,
                l.args.dead_letter_terminated,
                &l.account,
                l.metrics.clone(),
            )
            .await
            .map_err(other)?,
        ),
        None => None,
    };
    let advisory_stream = js.get_stream_no_info(stream_name).await.map_err(other)?;
    let consumer: consumer::PullConsumer = advisory_stream
        .get_or_create_consumer(
            &l.args.consumer,
            consumer::pull::Config {
                durable_name: Some(l.args.consumer.clone()),
                description: Some("nats-delivery-exporter: counts delivery advisories".into()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: l.args.ack_wait,
                // Never give up on an advisory: a limit would drop counts and
                // make advisories about the exporter's own consumer.
                max_deliver: -1,
                max_ack_pending: (BATCH * 10) as i64,
                filter_subjects: if exact {
                    Vec::new()
                } else {
                    SUBJECTS.iter().map(|s| s.to_string()).collect()
                },
                ..Default::default()
            },
        )
        .await
        .map_err(|e| other(format!("durable consumer {:?}: {e}", l.args.consumer)))?;
    let messages = consumer
        .stream()
        .max_messages_per_batch(BATCH)
        .heartbeat(Duration::from_secs(5))
        .expires(Duration::from_secs(30))
        .messages()
        .await
        .map_err(other)?;
    Ok((dead_letter, messages))
}

async fn handle(
    counter: &mut AdvisoryCounter,
    dead_letter: Option<&DeadLetter>,
    msg: jetstream::Message,
) {
    // A wider stream holds other advisories too; the consumer filters them
    // out on 2.10+, older servers ignore the filter and deliver them.
    if !SUBJECTS.iter().any(|p| subject_covers(p, &msg.subject)) {
        if let Err(e) = msg.ack().await {
            tracing::warn!(account = %counter.account(), "acknowledging a skipped advisory: {e}");
        }
        return;
    }
    let outcome = counter.record(&msg.subject, &msg.payload);
    if let (Some(dl), Outcome::Counted(a) | Outcome::Duplicate(a)) = (dead_letter, &outcome) {
        let first_time = matches!(outcome, Outcome::Counted(_));
        if let Err(e) = dl.capture(a, first_time).await {
            let attempts = msg.info().map(|i| i.delivered).unwrap_or(0);
            if attempts < i64::from(CAPTURE_ATTEMPTS) {
                // Not acknowledged: the server redelivers after ack_wait; the
                // count is not repeated (dedup), the copy is retried.
                tracing::warn!(
                    account = %counter.account(),
                    stream = %a.stream,
                    seq = a.stream_seq,
                    attempts,
                    "dead-letter capture failed, will retry: {e}"
                );
                return;
            }
            // Unacknowledged advisories would pile up to max_ack_pending and
            // stop all counting: give this copy up, loudly.
            dl.give_up(a);
        }
    }
    if let Err(e) = msg.ack().await {
        tracing::warn!(account = %counter.account(), "acknowledging an advisory: {e}");
    }
}
