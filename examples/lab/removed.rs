//! Messages a stream removed before a consumer delivered them, and where
//! every message went: one ledger per consumer.
//!
//! Stream `LAB_REMOVED` keeps [`KEEP`] messages (`max_msgs`, discard old),
//! and has three unfiltered pull consumers, created before its first
//! message: `keeper` reads and acknowledges everything as it arrives;
//! `laggard` (ack policy none) stops while more messages arrive than the
//! stream keeps, reads a few, and falls behind again; `worker` keeps up but
//! acknowledges, terminates, NAKs until `max_deliver` and holds messages by
//! their sequence ([`worker_fate`]). The lab's truth is what it published
//! (the acknowledged sequences), what each consumer received and what the
//! application did with each message; which messages the stream still
//! keeps follows from `max_msgs` (and is checked against the server).

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, AckKind};
use async_nats::jetstream::{consumer::PullConsumer, Message};

use nats_delivery_metrics::{Acknowledgement, ConsumerMetrics};

use crate::jetstream::{err, fetch, keeping_stream};
use crate::ledger::{self, Truth};
use crate::Lab;

/// The stream's `max_msgs`.
const KEEP: u64 = 20;
const STREAM: &str = "LAB_REMOVED";
const SUBJECT: &str = "lab.removed";
/// The worker's `max_deliver`.
const MAX_DELIVER: i64 = 3;
/// Messages published before the laggard stops, while it is stopped, and
/// after it read [`LAGGARD_READS`] (the total is [`TOTAL`]).
const WAVES: [u64; 3] = [10, 25, 25];
const LAGGARD_READS: usize = 8;
const TOTAL: u64 = WAVES[0] + WAVES[1] + WAVES[2];
/// Messages are published in batches the consumers that keep up read
/// before the stream removes anything of them.
const BATCH: u64 = 5;
const WAIT: Duration = Duration::from_secs(30);
/// The alert on the new counter.
const ALERT: &str = "NatsJetStreamMessagesRemovedBeforeDelivery";

/// What the worker's application does with the message of a sequence.
#[derive(Clone, Copy, PartialEq)]
enum Fate {
    Ack,
    /// `AckTerm`: the advisory's reason is `client`.
    Term,
    /// NAKed at every delivery until `max_deliver` gives it up.
    NakToDeath,
    /// Never acknowledged: 9 and 10 are still held when the stream removes
    /// them (terminated, reason `unacked_deleted`), the last two stay
    /// awaiting acknowledgement.
    Hold,
}

fn worker_fate(seq: u64) -> Fate {
    match seq {
        5 | 6 => Fate::Term,
        7 | 8 => Fate::NakToDeath,
        9 | 10 => Fate::Hold,
        s if s > TOTAL - 2 => Fate::Hold,
        _ => Fate::Ack,
    }
}

/// One consumer, what the lab knows of it, and the application's counters
/// of its acknowledgements (the link-in crate's).
struct Reader {
    consumer: PullConsumer,
    truth: Truth,
    metrics: ConsumerMetrics,
}

/// The stream, its consumers and the truth the lab keeps for each.
struct Scenario {
    js: jetstream::Context,
    /// Stream sequences of the lab's published messages (from their acks).
    published: Vec<u64>,
    keeper: Reader,
    laggard: Reader,
    worker: Reader,
    /// The worker's messages not acknowledged, for the clean-up.
    held: Vec<Message>,
}

impl Scenario {
    /// Creates the stream and the consumers, and waits until the exporter
    /// counts for each (its counter starts at 0 when it first sees one).
    async fn start(lab: &mut Lab) -> anyhow::Result<Scenario> {
        let js = jetstream::new(lab.app.clone());
        let stream = keeping_stream(&js, STREAM, SUBJECT, KEEP).await?;
        let mut consumers = Vec::new();
        for (name, ack_policy, max_deliver) in [
            ("keeper", AckPolicy::Explicit, -1),
            ("laggard", AckPolicy::None, -1),
            ("worker", AckPolicy::Explicit, MAX_DELIVER),
        ] {
            let c = stream
                .create_consumer(pull::Config {
                    durable_name: Some(name.into()),
                    ack_policy,
                    max_deliver,
                    ack_wait: Duration::from_secs(600),
                    ..Default::default()
                })
                .await
                .map_err(err)?;
            consumers.push(Reader {
                consumer: c,
                truth: Truth::new(name, ack_policy == AckPolicy::None),
                metrics: lab.metrics.jetstream_consumer(STREAM, name),
            });
            let expr = format!(
                "nats_delivery_consumer_removed_before_delivery_messages_total{{{}}} == 0",
                ledger::selector(STREAM, name)
            );
            lab.wait_series(&expr).await?;
        }
        let [keeper, laggard, worker] =
            <[_; 3]>::try_from(consumers).map_err(|_| anyhow::anyhow!("three consumers"))?;
        lab.report.note(&format!(
            "stream {STREAM} keeps {KEEP} messages (max_msgs, discard old); consumers keeper, \
             laggard (ack none), worker (max_deliver {MAX_DELIVER}), each counted by the exporter from 0"
        ));
        Ok(Scenario {
            js,
            published: Vec::new(),
            keeper,
            laggard,
            worker,
            held: Vec::new(),
        })
    }

    /// Publishes `n` messages; the keeper and the worker read each batch
    /// before the next, the laggard only when `laggard_too`.
    async fn publish(&mut self, n: u64, laggard_too: bool) -> anyhow::Result<()> {
        for _ in 0..n / BATCH {
            for _ in 0..BATCH {
                let ack = self
                    .js
                    .publish(SUBJECT, "removed".into())
                    .await
                    .map_err(err)?
                    .await
                    .map_err(err)?;
                self.published.push(ack.sequence);
            }
            let upto = self.published.len() as u64;
            self.keep_up(upto).await?;
            if laggard_too {
                self.laggard_reads(BATCH as usize).await?;
            }
        }
        Ok(())
    }

    /// The keeper and the worker read and treat everything up to `upto`.
    async fn keep_up(&mut self, upto: u64) -> anyhow::Result<()> {
        let Reader {
            consumer,
            truth,
            metrics,
        } = &mut self.keeper;
        while (truth.delivered.len() as u64) < upto {
            for m in fetch(consumer, BATCH as usize).await? {
                let seq = m.info().map_err(err)?.stream_sequence;
                truth.delivered.insert(seq);
                m.double_ack().await.map_err(err)?;
                metrics.record(Acknowledgement::Ack);
                truth.acked.insert(seq);
            }
        }
        self.worker_reads(upto).await
    }

    /// The worker treats each message by its fate, until it has had every
    /// sequence up to `upto`, given up every NAKed one, and the server
    /// holds exactly the held messages still stored as unacknowledged.
    async fn worker_reads(&mut self, upto: u64) -> anyhow::Result<()> {
        let Reader {
            consumer: worker,
            truth,
            metrics,
        } = &mut self.worker;
        let started = std::time::Instant::now();
        loop {
            anyhow::ensure!(
                started.elapsed() < WAIT,
                "worker: up to {upto} not settled within {WAIT:?} (delivered {}, dead {:?})",
                truth.delivered.len(),
                truth.dead
            );
            let batch = fetch(worker, 10).await?;
            let quiet = batch.is_empty() && truth.delivered.len() as u64 == upto;
            if quiet {
                let first = upto.saturating_sub(KEEP) + 1;
                let held = truth.held.iter().filter(|s| **s >= first).count();
                if worker.info().await.map_err(err)?.num_ack_pending == held {
                    return Ok(());
                }
            }
            for m in batch {
                let info = m.info().map_err(err)?;
                let (seq, delivered) = (info.stream_sequence, info.delivered);
                truth.delivered.insert(seq);
                match worker_fate(seq) {
                    Fate::Ack => {
                        m.double_ack().await.map_err(err)?;
                        metrics.record(Acknowledgement::Ack);
                        truth.acked.insert(seq);
                    }
                    Fate::Term => {
                        m.double_ack_with(AckKind::Term).await.map_err(err)?;
                        metrics.record(Acknowledgement::Term);
                        truth.terminated.insert(seq);
                    }
                    Fate::NakToDeath => {
                        m.double_ack_with(AckKind::Nak(None)).await.map_err(err)?;
                        metrics.record(Acknowledgement::Nak(None));
                        if delivered == MAX_DELIVER {
                            truth.dead.insert(seq);
                        }
                    }
                    Fate::Hold => {
                        truth.held.insert(seq);
                        self.held.push(m);
                    }
                }
            }
        }
    }

    /// The laggard reads `n` messages (ack policy none: each delivery is
    /// its acknowledgement).
    async fn laggard_reads(&mut self, n: usize) -> anyhow::Result<()> {
        let Reader {
            consumer, truth, ..
        } = &mut self.laggard;
        let mut got = 0;
        while got < n {
            for m in fetch(consumer, n - got).await? {
                truth
                    .delivered
                    .insert(m.info().map_err(err)?.stream_sequence);
                got += 1;
            }
        }
        Ok(())
    }

    /// The sequences the stream keeps, by the lab's own reckoning
    /// (`max_msgs` with discard old keeps the last [`KEEP`]).
    fn kept(&self) -> BTreeSet<u64> {
        let skip = self.published.len().saturating_sub(KEEP as usize);
        self.published[skip..].iter().copied().collect()
    }

    fn truths(&self) -> [&Truth; 3] {
        [&self.keeper.truth, &self.laggard.truth, &self.worker.truth]
    }
}

/// Drives the three consumers, then checks the counter, the ledger and
/// the alert against the lab's truth.
pub async fn removed_before_delivery(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "JetStream stream limits remove messages a consumer had not delivered yet",
        &[ALERT],
    );
    let mut s = Scenario::start(lab).await?;
    s.publish(WAVES[0], true).await?;
    lab.report.note(&format!(
        "{} messages: every consumer read them; worker acknowledged 4, terminated 2, NAKed 2 \
         until max_deliver, holds 2",
        WAVES[0]
    ));
    s.publish(WAVES[1], false).await?;
    s.laggard_reads(LAGGARD_READS).await?;
    s.publish(WAVES[2], false).await?;
    let kept = s.kept();
    lab.report.note(&format!(
        "laggard stopped for {} messages, read {LAGGARD_READS}, stopped again for {}; \
         the stream keeps {}..={}",
        WAVES[1],
        WAVES[2],
        kept.first().unwrap_or(&0),
        kept.last().unwrap_or(&0)
    ));
    let mut stream = s.js.get_stream(STREAM).await.map_err(err)?;
    let state = stream.info().await.map_err(err)?.state.clone();
    lab.report.check(
        (state.first_sequence, state.last_sequence) == (*kept.first().unwrap_or(&0), TOTAL),
        &format!(
            "the server keeps {}..={} as the lab reckons",
            state.first_sequence, state.last_sequence
        ),
    );
    ledger::check(lab, STREAM, &s.truths(), (&s.published, &kept)).await?;
    for truth in s.truths() {
        // Unfiltered, and no interval both redelivered and passed removed
        // messages: every count is exact (METRICS.md).
        let q = format!(
            "nats_delivery_consumer_removed_before_delivery_exact{{{}}}",
            ledger::selector(STREAM, &truth.name)
        );
        let got = lab.prom.value(&q).await?;
        let what = format!("{}: the exporter says its count is exact", truth.name);
        lab.report.term(&what, 1.0, &q, got);
    }
    check_alert(lab).await?;
    clean_up(lab, s).await
}

/// The alert fires for the laggard, and not for the two that lost nothing.
async fn check_alert(lab: &mut Lab) -> anyhow::Result<()> {
    let labels = [
        ("account", "APP"),
        ("stream", STREAM),
        ("consumer", "laggard"),
    ];
    lab.expect_firing(ALERT, &labels, WAIT).await?;
    let alerts = lab.prom.alerts().await?;
    for name in ["keeper", "worker"] {
        let quiet = !alerts
            .iter()
            .any(|a| a.is(ALERT, &[("stream", STREAM), ("consumer", name)]));
        lab.report.check(
            quiet,
            &format!("{ALERT} is neither pending nor firing for {name}, which lost nothing"),
        );
    }
    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);
    Ok(())
}

/// The laggard catches up and the worker acknowledges what it held, so
/// that no status alert fires for them in the scenarios after.
async fn clean_up(lab: &mut Lab, mut s: Scenario) -> anyhow::Result<()> {
    // The held messages the stream removed are no longer the consumer's.
    let kept = s.kept();
    for m in std::mem::take(&mut s.held) {
        if kept.contains(&m.info().map_err(err)?.stream_sequence) {
            m.double_ack().await.map_err(err)?;
        }
    }
    let laggard = &mut s.laggard.consumer;
    let mut rest = laggard.info().await.map_err(err)?.num_pending;
    while rest > 0 {
        rest -= rest.min(fetch(laggard, rest as usize).await?.len() as u64);
    }
    lab.report.note(
        "clean-up: the worker acknowledged what it held, the laggard read what the stream kept",
    );
    Ok(())
}
