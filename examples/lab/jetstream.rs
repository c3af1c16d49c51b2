//! JetStream loss: messages that exhaust `max_deliver`, unacknowledged
//! messages deleted by stream limits, and a consumer held at
//! `max_ack_pending`. The truth is what the lab's application received (each
//! message's stream sequence and delivery count) and what it acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::PullConsumer, stream};
use futures::StreamExt;
use nats_delivery_metrics::Acknowledgement;

use crate::processes::DEAD_LETTER_STREAM;
use crate::Lab;

const WAIT: Duration = Duration::from_secs(30);
/// `max_deliver` of the consumer that NAKs everything.
const MAX_DELIVER: i64 = 3;

pub fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// A stream of `subject` that keeps the last `keep` messages (`max_msgs`,
/// discard old).
pub async fn keeping_stream(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
    keep: u64,
) -> anyhow::Result<stream::Stream> {
    js.create_stream(stream::Config {
        name: name.into(),
        subjects: vec![subject.into()],
        max_messages: keep as i64,
        discard: stream::DiscardPolicy::Old,
        ..Default::default()
    })
    .await
    .map_err(err)
}

pub async fn consumer(lab: &Lab, stream: &str, name: &str) -> anyhow::Result<PullConsumer> {
    let js = jetstream::new(lab.app.clone());
    js.get_stream(stream)
        .await
        .map_err(err)?
        .get_consumer(name)
        .await
        .map_err(err)
}

pub async fn publish(lab: &Lab, subject: &str, n: u64) -> anyhow::Result<()> {
    let js = jetstream::new(lab.app.clone());
    for i in 0..n {
        js.publish(subject.to_string(), i.to_string().into())
            .await
            .map_err(err)?
            .await
            .map_err(err)?;
    }
    Ok(())
}

/// One pull of up to `max` messages, waiting at most 300 ms.
pub async fn fetch(c: &PullConsumer, max: usize) -> anyhow::Result<Vec<jetstream::Message>> {
    let mut batch = c
        .fetch()
        .max_messages(max)
        .expires(Duration::from_millis(300))
        .messages()
        .await
        .map_err(err)?;
    let mut out = Vec::new();
    while let Some(m) = batch.next().await {
        out.push(m.map_err(err)?);
    }
    Ok(out)
}

/// Streams and consumers of the scenarios, and healthy traffic for the
/// baseline: three orders delivered and acknowledged.
pub async fn setup(lab: &mut Lab) -> anyhow::Result<()> {
    let js = jetstream::new(lab.app.clone());
    let streams = [
        ("LAB_ORDERS", "lab.orders.>", -1),
        ("LAB_SMALL", "lab.small", 5),
        ("LAB_JOBS", "lab.jobs", -1),
    ];
    for (name, subject, max_messages) in streams {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![subject.into()],
            max_messages,
            max_bytes: 1 << 20,
            ..Default::default()
        })
        .await
        .map_err(err)?;
    }
    let consumers = [
        ("LAB_ORDERS", "billing", MAX_DELIVER, 1000, 30),
        ("LAB_SMALL", "slowpoke", -1, 1000, 300),
        ("LAB_JOBS", "reports", -1, 10, 600),
    ];
    for (stream_name, name, max_deliver, max_ack_pending, ack_wait) in consumers {
        js.get_stream(stream_name)
            .await
            .map_err(err)?
            .create_consumer(pull::Config {
                durable_name: Some(name.into()),
                max_deliver,
                max_ack_pending,
                ack_wait: Duration::from_secs(ack_wait),
                ..Default::default()
            })
            .await
            .map_err(err)?;
    }
    publish(lab, "lab.orders.new", 3).await?;
    let billing = consumer(lab, "LAB_ORDERS", "billing").await?;
    let metrics = lab.metrics.jetstream_consumer("LAB_ORDERS", "billing");
    let mut acked = 0;
    while acked < 3 {
        for m in fetch(&billing, 3).await? {
            metrics.received(&m);
            metrics
                .acknowledge(&m, Acknowledgement::Ack)
                .await
                .map_err(err)?;
            acked += 1;
        }
    }
    lab.report.note(
        "JetStream: streams LAB_ORDERS, LAB_SMALL, LAB_JOBS; 3 orders delivered and acknowledged",
    );
    Ok(())
}

/// The application NAKs every delivery of `billing` (max_deliver 3), in two
/// waves. The counter's series is born with its first event; the rules catch
/// such a first event only when Prometheus scraped the exporter 10 minutes
/// earlier (`up offset 10m`), which a lab does not wait for, so the second
/// wave lets `increase()` see the counter rise.
pub async fn max_deliver(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsJetStreamMaxDeliveriesExceeded";
    lab.report.scenario(
        "JetStream max_deliver: every delivery is NAKed until the consumer gives up",
        &[alert],
    );
    let billing = consumer(lab, "LAB_ORDERS", "billing").await?;
    let metrics = lab.metrics.jetstream_consumer("LAB_ORDERS", "billing");
    let sel = "{account=\"APP\",stream=\"LAB_ORDERS\",consumer=\"billing\"}";
    let dead_q = format!("sum(nats_delivery_jetstream_max_deliveries_total{sel})");
    let (mut dead, mut naks) = (0u64, 0u64);
    lab.report.note(
        "two waves: the rules see a counter's first event only with 10 minutes of scrape history",
    );
    for wave in [2u64, 3] {
        publish(lab, "lab.orders.new", wave).await?;
        let mut deliveries: BTreeMap<u64, i64> = BTreeMap::new();
        loop {
            let batch = fetch(&billing, 10).await?;
            let done = batch.is_empty()
                && deliveries.len() as u64 == wave
                && deliveries.values().all(|d| *d == MAX_DELIVER);
            if done {
                break;
            }
            for m in batch {
                let info = m.info().map_err(err)?;
                deliveries.insert(info.stream_sequence, info.delivered);
                metrics.received(&m);
                metrics
                    .acknowledge(&m, Acknowledgement::Nak(None))
                    .await
                    .map_err(err)?;
                naks += 1;
            }
        }
        dead += wave;
        lab.report.note(&format!(
            "{wave} orders, each delivered {MAX_DELIVER} times and NAKed: the consumer gave them up"
        ));
        lab.prom.settle(&dead_q, dead as f64, WAIT).await?;
    }
    let got = lab.prom.settle(&dead_q, dead as f64, WAIT).await?;
    lab.report
        .count("messages dead after max_deliver", dead as f64, &dead_q, got);
    let q = format!("sum(nats_delivery_jetstream_naks_total{sel})");
    let got = lab.prom.settle(&q, naks as f64, WAIT).await?;
    lab.report.count("NAKs sent", naks as f64, &q, got);
    let q = "sum(nats_delivery_client_jetstream_acknowledgements_total{stream=\"LAB_ORDERS\",consumer=\"billing\",kind=\"nak\"})";
    let got = lab.prom.settle(q, naks as f64, WAIT).await?;
    lab.report
        .count("NAKs sent, by the app's own counter", naks as f64, q, got);
    let q = "sum(nats_delivery_dead_letter_stored_total{stream=\"LAB_ORDERS\"})";
    let got = lab.prom.settle(q, dead as f64, WAIT).await?;
    lab.report.count(
        "dead messages copied to the dead-letter stream",
        dead as f64,
        q,
        got,
    );
    let js = jetstream::new(lab.app.clone());
    let mut dlq = js.get_stream(DEAD_LETTER_STREAM).await.map_err(err)?;
    let stored = dlq.info().await.map_err(err)?.state.messages;
    lab.report.check(
        stored == dead,
        &format!("the server holds {stored} copies in {DEAD_LETTER_STREAM}"),
    );
    let labels = [
        ("account", "APP"),
        ("stream", "LAB_ORDERS"),
        ("consumer", "billing"),
    ];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    Ok(())
}

/// LAB_SMALL keeps 5 messages. `slowpoke` holds 5 delivered, unacknowledged
/// messages, then 5 more are published and the limit removes the held ones;
/// twice (two waves, as for max_deliver). The truth: held sequences below
/// the stream's first sequence.
pub async fn stream_limits(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsJetStreamUnackedMessagesDeleted";
    lab.report.scenario(
        "JetStream stream limits delete messages a consumer had not acknowledged",
        &[alert],
    );
    let slowpoke = consumer(lab, "LAB_SMALL", "slowpoke").await?;
    let js = jetstream::new(lab.app.clone());
    let mut small = js.get_stream("LAB_SMALL").await.map_err(err)?;
    let sel = "{account=\"APP\",stream=\"LAB_SMALL\",consumer=\"slowpoke\",reason=~\"stream_limits|unacked_deleted\"}";
    let q = format!("sum(nats_delivery_jetstream_terminated_total{sel})");
    let mut held = BTreeSet::new();
    publish(lab, "lab.small", 5).await?;
    let mut deleted = 0;
    for _wave in 0..2 {
        let mut got = 0;
        while got < 5 {
            for m in fetch(&slowpoke, 5).await? {
                held.insert(m.info().map_err(err)?.stream_sequence);
                got += 1;
            }
        }
        publish(lab, "lab.small", 5).await?;
        let first = small.info().await.map_err(err)?.state.first_sequence;
        deleted = held.iter().filter(|s| **s < first).count();
        lab.report.note(&format!(
            "held {} delivered messages unacknowledged; the stream now starts at {first}",
            held.len()
        ));
        lab.prom.settle(&q, deleted as f64, WAIT).await?;
    }
    let got = lab.prom.settle(&q, deleted as f64, WAIT).await?;
    lab.report.count(
        "unacknowledged messages deleted by limits",
        deleted as f64,
        &q,
        got,
    );
    let dq = "sum(nats_delivery_dead_letter_missing_total{stream=\"LAB_SMALL\"})";
    let got = lab.prom.settle(dq, deleted as f64, WAIT).await?;
    lab.report.count(
        "dead-letter copies impossible (originals gone)",
        deleted as f64,
        dq,
        got,
    );
    // Servers before 2.10.4 give no reason: then every termination is "client".
    let labels = [
        ("account", "APP"),
        ("stream", "LAB_SMALL"),
        ("consumer", "slowpoke"),
        ("reason", "unacked_deleted"),
    ];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    // The application catches up with the 5 messages left, so that slowpoke
    // is not a stuck consumer (backlog, nothing delivered) in what follows.
    let mut caught_up = 0;
    while caught_up < 5 {
        for m in fetch(&slowpoke, 5).await? {
            m.double_ack().await.map_err(err)?;
            caught_up += 1;
        }
    }
    lab.report
        .note("the application took and acknowledged the 5 messages left in LAB_SMALL");
    Ok(())
}

/// `reports` allows 10 unacknowledged messages; 15 are published and the
/// application acknowledges none.
pub async fn saturated(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsJetStreamConsumerSaturated";
    lab.report.scenario(
        "JetStream consumer saturated: max_ack_pending 10 reached",
        &[alert],
    );
    publish(lab, "lab.jobs", 15).await?;
    let reports = consumer(lab, "LAB_JOBS", "reports").await?;
    loop {
        let batch = fetch(&reports, 15).await?;
        if batch.is_empty() && !lab.held_jobs.is_empty() {
            break;
        }
        lab.held_jobs.extend(batch);
    }
    let held = lab.held_jobs.len() as u64;
    let mut reports = reports;
    let info = reports.info().await.map_err(err)?;
    lab.report.note(&format!(
        "15 jobs published; the application received {held} and acknowledged none; the server says {} unacknowledged",
        info.num_ack_pending
    ));
    lab.report.check(
        info.num_ack_pending as u64 == held,
        "the server's num_ack_pending equals what the lab holds",
    );
    let sel = "{account=\"APP\",stream=\"LAB_JOBS\",consumer=\"reports\"}";
    let q = format!("max(nats_delivery_consumer_ack_pending_messages{sel})");
    let got = lab.prom.settle(&q, held as f64, WAIT).await?;
    lab.report
        .count("messages delivered, not acknowledged", held as f64, &q, got);
    let q = format!("max(nats_delivery_consumer_pending_messages{sel})");
    let got = lab.prom.settle(&q, (15 - held) as f64, WAIT).await?;
    lab.report
        .count("messages waiting behind them", (15 - held) as f64, &q, got);
    let labels = [
        ("account", "APP"),
        ("stream", "LAB_JOBS"),
        ("consumer", "reports"),
    ];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    Ok(())
}
