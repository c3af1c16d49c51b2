//! A stopped JetStream consumer, and recovery. `reports` was left saturated
//! by the scenario before: 10 messages delivered and held unacknowledged, 5
//! waiting behind them that the server will not deliver, and the
//! application no longer asks for more. Nothing moves: once the exporter's
//! status window (lab: 10 s) has seen nothing delivered and nobody asking,
//! the consumer's status is `stopped` and the stopped alert fires, taking
//! over from the saturated alert (one alert for one cause). Then the
//! application acknowledges what it holds and takes the rest, and both
//! alerts must stop firing.
//!
//! The older stuck alert fires only for consumers without a status (an
//! exporter run with `--consumer-status-window 0s`); the lab's exporter has
//! one, so the stuck alert must stay silent here.

use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::PullConsumer;

use crate::jetstream::{consumer, err, fetch};
use crate::Lab;

const WAIT: Duration = Duration::from_secs(30);
/// The lab's status window (10 s) plus the lab's `for:` (3 s), with room
/// for scrapes and rule evaluations.
const STUCK_WAIT: Duration = Duration::from_secs(60);

const LABELS: [(&str, &str); 3] = [
    ("account", "APP"),
    ("stream", "LAB_JOBS"),
    ("consumer", "reports"),
];

/// The server's view of `c`: delivered stream sequence, waiting messages,
/// and seconds since its last delivery.
async fn progress(c: &mut PullConsumer) -> anyhow::Result<(u64, u64, f64)> {
    let info = c.info().await.map_err(err)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let idle = info.delivered.last_active.map_or(f64::INFINITY, |t| {
        now - t.unix_timestamp_nanos() as f64 / 1e9
    });
    Ok((info.delivered.stream_sequence, info.num_pending, idle))
}

/// `reports` delivers nothing while messages wait: the stopped alert fires,
/// and stops with the saturated alert once the application catches up.
pub async fn stuck(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsJetStreamConsumerStopped";
    lab.report.scenario(
        "JetStream consumer stopped: messages wait, nothing is delivered, nobody asks",
        &[alert],
    );
    let mut reports = consumer(lab, "LAB_JOBS", "reports").await?;
    let (delivered, waiting, _) = progress(&mut reports).await?;
    lab.report.note(&format!(
        "reports: delivered up to stream sequence {delivered}, {waiting} waiting; nobody acknowledges"
    ));
    let started = Instant::now();
    let found = lab.prom.wait_firing(alert, &LABELS, STUCK_WAIT).await?;
    let waited = started.elapsed().as_secs_f64();
    let (delivered_after, waiting_after, idle) = progress(&mut reports).await?;
    lab.report.check(
        delivered_after == delivered,
        &format!(
            "the server delivered nothing new meanwhile (stream sequence {delivered} -> {delivered_after})"
        ),
    );
    let q =
        "max(nats_delivery_consumer_pending_messages{stream=\"LAB_JOBS\",consumer=\"reports\"})";
    let got = lab.prom.value(q).await?;
    lab.report.count(
        "messages waiting, none delivered",
        waiting_after as f64,
        q,
        got,
    );
    // Not before the status window has passed since the last delivery.
    let window = crate::processes::STATUS_WINDOW_SECS as f64;
    lab.report.check(
        found.is_none() || idle >= window,
        &format!(
            "the alert fired {idle:.0} s after the consumer's last delivery, {waited:.0} s into \
             the scenario, not before the {window:.0} s status window (production: 5 min plus 5 min `for:`)"
        ),
    );
    let q = "nats_delivery_consumer_status{stream=\"LAB_JOBS\",consumer=\"reports\",status=\"stopped\"}";
    let got = lab.prom.value(q).await?;
    lab.report
        .count("the exporter's status is stopped", 1.0, q, got);
    lab.report.alert(alert, &LABELS, found);
    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);

    // Recovery: the held messages are acknowledged, the rest taken and
    // acknowledged; nothing waits, nothing is unacknowledged.
    let held = std::mem::take(&mut lab.held_jobs);
    for m in &held {
        m.double_ack().await.map_err(err)?;
    }
    let mut rest = 0;
    while rest < waiting_after {
        for m in fetch(&reports, 15).await? {
            m.double_ack().await.map_err(err)?;
            rest += 1;
        }
    }
    lab.report.note(&format!(
        "the application acknowledged the {} held messages and took and acknowledged the {rest} waiting",
        held.len()
    ));
    let q = "max(nats_delivery_consumer_ack_pending_messages{stream=\"LAB_JOBS\",consumer=\"reports\"})";
    let got = lab.prom.settle(q, 0.0, WAIT).await?;
    lab.report
        .count("messages unacknowledged after recovery", 0.0, q, got);
    for name in [alert, "NatsJetStreamConsumerSaturated"] {
        let stopped = lab.prom.wait_resolved(name, &LABELS, WAIT).await?;
        lab.report.resolved(name, &LABELS, stopped);
    }
    Ok(())
}
