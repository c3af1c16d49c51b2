//! One account's canary: a publisher on a steady tick and a reader through
//! a pull consumer, sharing the account's [`Books`].
//!
//! The publisher never waits for the reader: while the consumer cannot be
//! set up (server gone, partition) messages are still sent, and counted lost
//! at their deadline, which is what the canary is for. Each publish waits
//! for its acknowledgement in a task of its own, bounded by the deadline.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use tokio::sync::watch;

use super::books::Books;
use super::ledger::Arrival;
use super::CanarySettings;
use crate::nats::retry::{sleep_or_stop, stopped};

/// Pause before the reader sets its consumer up again after a failure:
/// short, since messages count lost while it is down.
const READ_RETRY: Duration = Duration::from_secs(1);

/// How long a pull waits on the server; heartbeats come every second, so
/// a dead connection or a consumer gone ends the reading within seconds:
/// at the second window of two heartbeats in a row with nothing, as
/// async-nats' own ordered consumer decides (one such window is a stalled
/// server or machine as often as a dead reading).
const PULL_EXPIRES: Duration = Duration::from_secs(5);
const PULL_HEARTBEAT: Duration = Duration::from_secs(1);

/// An ephemeral consumer left behind by a reading that ended (its client
/// gone) is removed by the server after this long without a pull.
const CONSUMER_INACTIVE: Duration = Duration::from_secs(30);

/// The most the consumer's deletion may take (within the exporter's
/// default 5 s shutdown timeout).
const DELETE_WITHIN: Duration = Duration::from_secs(2);

/// Runs one account's canary on `client` until `shutdown`; deletes its
/// consumer on the way out (the stream stays, bounded: see the module
/// documentation of `canary`).
pub(crate) async fn run(
    client: async_nats::Client,
    settings: CanarySettings,
    books: Books,
    mut shutdown: watch::Receiver<bool>,
) {
    // The last token of a fresh inbox is a random NUID: this exporter's
    // subject, apart from any other exporter's sharing the stream.
    let id = client
        .new_inbox()
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .to_string();
    let subject = format!("{}.{id}", settings.subject);
    let mut js = jetstream::new(client);
    js.set_timeout(settings.deadline);
    // Publishing starts once the consumer first reads: before, the stream
    // may not exist, and what was sent would count lost at every start.
    let (reading_tx, reading_rx) = watch::channel(false);
    let mut stop = shutdown.clone();
    let publishing = async {
        let mut started = reading_rx;
        tokio::select! {
            _ = started.wait_for(|r| *r) => {}
            _ = stopped(&mut stop) => return,
        }
        publish(js.clone(), subject.clone(), &settings, &books, stop).await
    };
    let reading = read(
        js.clone(),
        subject.clone(),
        &settings,
        &books,
        &mut shutdown,
        reading_tx,
    );
    tokio::join!(publishing, reading);
}

/// Sends one message every interval, counting lost what is out past the
/// deadline on every tick.
async fn publish(
    js: jetstream::Context,
    subject: String,
    settings: &CanarySettings,
    books: &Books,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped(&mut shutdown) => return,
        }
        let now = Instant::now();
        let payload = {
            let mut counts = books.counts();
            counts.ledger.expire(now, settings.deadline);
            let seq = counts.ledger.send(now);
            let payload = seq.to_string();
            counts.sent_bytes += (subject.len() + payload.len()) as u64;
            payload
        };
        tokio::spawn(publish_one(
            js.clone(),
            subject.clone(),
            payload,
            settings.deadline,
            books.clone(),
        ));
    }
}

/// Publishes one message and waits for its acknowledgement, at most the
/// deadline in all.
async fn publish_one(
    js: jetstream::Context,
    subject: String,
    payload: String,
    deadline: Duration,
    books: Books,
) {
    let sent = async {
        let ack = js.publish(subject, payload.into()).await?;
        ack.await.map(|_| ())
    };
    match tokio::time::timeout(deadline, sent).await {
        Ok(Ok(())) => books.counts().ledger.acknowledged += 1,
        Ok(Err(e)) => {
            use jetstream::context::PublishErrorKind as Kind;
            let kind = match e.kind() {
                Kind::TimedOut => "unanswered",
                _ => "publish",
            };
            books.error(kind);
            tracing::debug!(account = %books.account, error = %e, "canary publish failed");
        }
        Err(_) => books.error("unanswered"),
    }
}

/// Where a consumer set up again starts: past the last message read from
/// the stream, so that it skips nothing the stream still holds (one
/// delivering only new messages skipped those sent while the reader was
/// being set up again, and they counted lost).
#[derive(Debug, Clone, Copy)]
struct ReadFrom {
    /// The stream's creation: a stream made again (a memory stream after
    /// its server restarted) numbers its messages from 1 again.
    created: time::OffsetDateTime,
    /// The next stream sequence to read.
    next: u64,
}

/// Makes (or finds) the canary stream and a consumer of this exporter's
/// subject, and reads it until the reading fails; then again, until
/// shutdown.
async fn read(
    js: jetstream::Context,
    subject: String,
    settings: &CanarySettings,
    books: &Books,
    shutdown: &mut watch::Receiver<bool>,
    reading: watch::Sender<bool>,
) {
    let mut from = None;
    loop {
        let consumer = tokio::select! {
            c = set_up(&js, &subject, settings, &mut from) => c,
            _ = stopped(shutdown) => return,
        };
        match consumer {
            Ok(consumer) => {
                let name = consumer.cached_info().name.clone();
                let stopping =
                    read_consumer(&consumer, settings, books, shutdown, &reading, &mut from).await;
                books.counts().up = false;
                // Best effort: the server removes it after CONSUMER_INACTIVE anyway.
                let _ = tokio::time::timeout(
                    DELETE_WITHIN,
                    js.delete_consumer_from_stream(&name, &settings.stream),
                )
                .await;
                if stopping {
                    return;
                }
            }
            Err((kind, e)) => {
                books.error(kind);
                tracing::warn!(account = %books.account, stream = %settings.stream, error = %e,
                    "cannot set up the canary's stream or consumer; retrying");
            }
        }
        if sleep_or_stop(READ_RETRY, shutdown).await {
            return;
        }
    }
}

type SetupError = (&'static str, String);

/// The canary stream (created with [`super::StreamBounds`] when missing) and a new
/// ephemeral consumer of `subject`: the first delivering from now on, the
/// next ones from `from` (all of a stream made again since).
async fn set_up(
    js: &jetstream::Context,
    subject: &str,
    settings: &CanarySettings,
    from: &mut Option<ReadFrom>,
) -> Result<consumer::PullConsumer, SetupError> {
    let bounds = &settings.bounds;
    let config = stream::Config {
        name: settings.stream.clone(),
        subjects: vec![format!("{}.>", settings.subject)],
        storage: stream::StorageType::Memory,
        retention: stream::RetentionPolicy::Limits,
        discard: stream::DiscardPolicy::Old,
        max_messages: bounds.max_messages,
        max_bytes: bounds.max_bytes,
        max_age: bounds.max_age,
        duplicate_window: bounds.max_age,
        num_replicas: usize::from(settings.replicas),
        ..Default::default()
    };
    let stream = js
        .get_or_create_stream(config)
        .await
        .map_err(|e| ("setup", format!("stream: {e}")))?;
    let subjects = &stream.cached_info().config.subjects;
    if !subjects
        .iter()
        .any(|f| crate::listeners::advisories::subject_covers(f, subject))
    {
        return Err((
            "setup",
            format!("the existing stream's subjects {subjects:?} do not capture {subject}"),
        ));
    }
    let info = stream.cached_info();
    let (deliver_policy, next) = match *from {
        Some(f) if f.created == info.created => (
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: f.next,
            },
            f.next,
        ),
        Some(_) => (consumer::DeliverPolicy::All, 1),
        None => (
            consumer::DeliverPolicy::New,
            info.state.last_sequence.saturating_add(1),
        ),
    };
    let created = info.created;
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: subject.to_string(),
            deliver_policy,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: CONSUMER_INACTIVE,
            ..Default::default()
        })
        .await
        .map_err(|e| ("setup", format!("consumer: {e}")))?;
    *from = Some(ReadFrom { created, next });
    Ok(consumer)
}

/// Reads `consumer` until its reading fails or ends (false) or shutdown
/// (true), moving `from` past each message read.
async fn read_consumer(
    consumer: &consumer::PullConsumer,
    settings: &CanarySettings,
    books: &Books,
    shutdown: &mut watch::Receiver<bool>,
    reading: &watch::Sender<bool>,
    from: &mut Option<ReadFrom>,
) -> bool {
    let messages = consumer
        .stream()
        .expires(PULL_EXPIRES)
        .heartbeat(PULL_HEARTBEAT)
        .messages()
        .await;
    let mut messages = match messages {
        Ok(m) => m,
        Err(e) => {
            books.error("read");
            tracing::warn!(account = %books.account, error = %e, "cannot read the canary's consumer");
            return false;
        }
    };
    books.counts().up = true;
    reading.send_replace(true);
    let mut missed_heartbeat = false;
    loop {
        let message = tokio::select! {
            m = messages.next() => m,
            _ = stopped(shutdown) => return true,
        };
        match message {
            Some(Ok(m)) => {
                missed_heartbeat = false;
                if let (Ok(info), Some(f)) = (m.info(), from.as_mut()) {
                    f.next = f.next.max(info.stream_sequence.saturating_add(1));
                }
                arrive(&m.payload, settings.deadline, books)
            }
            Some(Err(e)) if is_missed_heartbeat(&e) && !missed_heartbeat => {
                missed_heartbeat = true;
                tracing::info!(account = %books.account, "the canary's reader missed its server's heartbeats once; reading on");
            }
            Some(Err(e)) => {
                books.error("read");
                tracing::warn!(account = %books.account, error = %e, "the canary's reading failed; setting it up again");
                return false;
            }
            None => {
                books.error("read");
                return false;
            }
        }
    }
}

fn is_missed_heartbeat(e: &consumer::pull::MessagesError) -> bool {
    matches!(
        e.kind(),
        consumer::pull::MessagesErrorKind::MissingHeartbeat
    )
}

/// Records one message read back.
fn arrive(payload: &[u8], deadline: Duration, books: &Books) {
    let now = Instant::now();
    let seq = std::str::from_utf8(payload)
        .ok()
        .and_then(|t| t.parse::<u64>().ok());
    let arrival = match seq {
        Some(seq) => books.counts().ledger.arrive(seq, now, deadline),
        None => Arrival::Unknown,
    };
    match arrival {
        Arrival::InTime(took) => books.observe_latency(took.as_secs_f64()),
        Arrival::Late => {}
        Arrival::Unknown => books.error("unexpected"),
    }
}
