//! The loss seen coming: a stream that keeps [`KEEP`] messages (`max_msgs`,
//! discard old) is published to at a steady [`RATE`]; its consumer `slow`
//! (ack policy none) reads the first [`READ`] messages and stops. The
//! removal forecast counts down, `NatsJetStreamRemovalForecast` must fire
//! before the stream removes the first message `slow` has not received
//! (the lab watches the stream's first sequence), and then the removal is
//! counted and the consumer's ledger closes exactly.
//!
//! `slow` is left behind at the end: its forecast stays at 0 (the stream's
//! first message is above its next), which the dashboard check reads.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};

use crate::jetstream::{err, fetch, keeping_stream};
use crate::ledger::{self, Truth};
use crate::prom::Alert;
use crate::Lab;

const STREAM: &str = "LAB_FORECAST";
const SUBJECT: &str = "lab.forecast";
/// The stream's `max_msgs`.
const KEEP: u64 = 150;
/// Messages a second.
const RATE: f64 = 10.0;
/// Messages `slow` reads before it stops.
const READ: u64 = 5;
/// Messages published: the removal of `slow`'s next one comes at
/// [`KEEP`] + [`READ`] + 1, then some more are removed.
const TOTAL: u64 = 180;
/// The alert on the forecast, and the one on the removal it announces.
pub const ALERT: &str = "NatsJetStreamRemovalForecast";
const REMOVED_ALERT: &str = "NatsJetStreamMessagesRemovedBeforeDelivery";

/// What the lab saw while it published: when the alert fired, when the
/// stream removed `slow`'s next message, and the forecast then.
#[derive(Default)]
struct Seen {
    fired: Option<(Instant, Option<f64>, Alert)>,
    removed: Option<Instant>,
}

/// The stream and its consumer, counted by the exporter from 0.
async fn start(lab: &mut Lab) -> anyhow::Result<(jetstream::Context, PullConsumer)> {
    let js = jetstream::new(lab.app.clone());
    let stream = keeping_stream(&js, STREAM, SUBJECT, KEEP).await?;
    let slow = stream
        .create_consumer(pull::Config {
            durable_name: Some("slow".into()),
            ack_policy: AckPolicy::None,
            ..Default::default()
        })
        .await
        .map_err(err)?;
    let expr = format!(
        "nats_delivery_consumer_removed_before_delivery_messages_total{{{}}} == 0",
        ledger::selector(STREAM, "slow")
    );
    lab.wait_series(&expr).await?;
    lab.report.note(&format!(
        "stream {STREAM} keeps {KEEP} messages (max_msgs, discard old), published to at \
         {RATE} a second; consumer slow (ack none) reads {READ} and stops"
    ));
    Ok((js, slow))
}

/// Publishes [`TOTAL`] messages at [`RATE`], `slow` reading the first
/// [`READ`]; between publishes, watches the alert and the stream.
async fn publish_and_watch(
    lab: &mut Lab,
    js: &jetstream::Context,
    slow: &PullConsumer,
    truth: &mut Truth,
) -> anyhow::Result<(Vec<u64>, Seen)> {
    let labels = [("account", "APP"), ("stream", STREAM), ("consumer", "slow")];
    let forecast = format!(
        "min(nats_delivery_consumer_removal_forecast_seconds{{{}}})",
        ledger::selector(STREAM, "slow")
    );
    let mut stream = js.get_stream(STREAM).await.map_err(err)?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / RATE));
    let (mut published, mut seen) = (Vec::new(), Seen::default());
    while (published.len() as u64) < TOTAL {
        tick.tick().await;
        let ack = js.publish(SUBJECT, "forecast".into()).await.map_err(err)?;
        published.push(ack.await.map_err(err)?.sequence);
        if published.len() as u64 == READ {
            while (truth.delivered.len() as u64) < READ {
                for m in fetch(slow, (READ as usize) - truth.delivered.len()).await? {
                    truth
                        .delivered
                        .insert(m.info().map_err(err)?.stream_sequence);
                }
            }
        }
        if seen.fired.is_none() {
            let alerts = lab.prom.firing().await?;
            if let Some(a) = alerts.into_iter().find(|a| a.is(ALERT, &labels)) {
                seen.fired = Some((Instant::now(), lab.prom.value(&forecast).await?, a));
            }
        }
        if seen.removed.is_none()
            && stream.info().await.map_err(err)?.state.first_sequence > READ + 1
        {
            seen.removed = Some(Instant::now());
        }
    }
    Ok((published, seen))
}

/// Drives the scenario and checks the alert came first, then the count
/// and the ledger.
pub async fn removal_forecast(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "JetStream limits about to remove messages a consumer has not delivered: the forecast",
        &[ALERT, REMOVED_ALERT],
    );
    let (js, slow) = start(lab).await?;
    let mut truth = Truth::new("slow", true);
    let started = Instant::now();
    let (published, seen) = publish_and_watch(lab, &js, &slow, &mut truth).await?;
    let at = |t: Instant| (t - started).as_secs_f64();
    let removed = seen.removed.map(at);
    let fired = seen.fired.as_ref().map(|(t, f, _)| (at(*t), *f));
    let tenth = |v: f64| (v * 10.0).round() / 10.0;
    lab.report.note(&format!(
        "published {TOTAL} over {:.1} s; the alert fired at {:?} s (forecast then {:?} s), \
         the stream removed message {} at {:?} s",
        started.elapsed().as_secs_f64(),
        fired.map(|f| tenth(f.0)),
        fired.and_then(|f| f.1).map(tenth),
        READ + 1,
        removed.map(tenth),
    ));
    let labels = [("account", "APP"), ("stream", STREAM), ("consumer", "slow")];
    lab.report.alert(ALERT, &labels, seen.fired.map(|f| f.2));
    let first = matches!((fired, removed), (Some((f, _)), Some(r)) if f < r);
    lab.report.check(
        first,
        &format!("{ALERT} fired for slow before the stream removed its next message"),
    );
    let kept: BTreeSet<u64> = published[published.len() - KEEP as usize..]
        .iter()
        .copied()
        .collect();
    ledger::check(lab, STREAM, &[&truth], (&published, &kept)).await?;
    lab.expect_firing_alone(REMOVED_ALERT, &labels, Duration::from_secs(30))
        .await
}
