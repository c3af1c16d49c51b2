//! Consumer health: six consumers on the real server, each put into one
//! status by what its application does (see `health_drive`), and the
//! exporter's status, delivery lag and oldest unacknowledged age compared
//! with what the lab made. The exporter runs with a status window of
//! [`crate::processes::STATUS_WINDOW_SECS`] seconds.
//!
//! The truth for the times is the server's own: the lab reads the stored
//! time of the message concerned (`get_raw_message`) and the time of the
//! Prometheus sample, so truth = sample time - stored time.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, Context};

use crate::health_drive::{self as drive, stream_of, CONSUMER};
use crate::jetstream::err;
use crate::processes::STATUS_WINDOW_SECS;
use crate::Lab;

/// Every status the lab drives, one stream each.
pub const STATUSES: [&str; 6] = ["ok", "lagging", "stalled", "stopped", "rewound", "paused"];
/// The alert for a consumer that holds messages without acknowledging.
const STALLED_ALERT: &str = "NatsJetStreamConsumerStalled";
/// The alert for a consumer whose application is gone.
const STOPPED_ALERT: &str = "NatsJetStreamConsumerStopped";
/// The alert for a consumer far behind in time (lab threshold 10 s, see
/// `rules::LAB_THRESHOLDS`).
const LAG_ALERT: &str = "NatsJetStreamConsumerDeliveryLagHigh";
/// Time for a status to show once its window is full: scrapes, a rule
/// evaluation, and room for a loaded machine.
const SHOW_WAIT: Duration = Duration::from_secs(30);
/// How far a time read from Prometheus may be from the truth: the exporter
/// reads the same stored time the lab does, measured against the server's
/// clock at the poll, which runs a few milliseconds after the scrape starts
/// (the sample's time). Half a second leaves room for a loaded machine.
const TIME_TOLERANCE: f64 = 0.5;

/// Status of the consumer in account OTHER, which the exporter (connected
/// to NATS in account APP) cannot read messages of: its times are estimated.
const ELSEWHERE: &str = "other";

fn labels(status: &str) -> String {
    let account = if status == ELSEWHERE { "OTHER" } else { "APP" };
    format!(
        "account=\"{account}\",stream=\"{}\",consumer=\"{CONSUMER}\"",
        stream_of(status)
    )
}

/// Waits until the exporter says `status` for the consumer driven into it;
/// records the check and returns whether it showed.
async fn expect_status(lab: &mut Lab, status: &str) -> anyhow::Result<bool> {
    let expr = format!(
        "nats_delivery_consumer_status{{{},status=\"{status}\"}} == 1",
        labels(status)
    );
    let started = Instant::now();
    let mut shown = false;
    while !shown && started.elapsed() < SHOW_WAIT {
        shown = !lab.prom.query(&expr).await?.is_empty();
        if !shown {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    lab.report.check(
        shown,
        &format!(
            "{}: the exporter says `{status}` ({:.1} s after asked)  [{expr}]",
            stream_of(status),
            started.elapsed().as_secs_f64()
        ),
    );
    Ok(shown)
}

/// A time the exporter reports for `status`'s consumer, against the truth:
/// the sample's time minus the stored time of stream sequence `seq`; and
/// whether the exporter says the value was read, not estimated.
async fn check_time(
    lab: &mut Lab,
    js: &Context,
    (family, status, seq): (&str, &str, u64),
) -> anyhow::Result<()> {
    let stream = js.get_stream(stream_of(status)).await.map_err(err)?;
    let stored = stream.get_raw_message(seq).await.map_err(err)?.time;
    let stored = stored.unix_timestamp_nanos() as f64 / 1e9;
    let selector = format!("{{{}}}", labels(status));
    let expr = format!("{family}_seconds{selector}");
    let pair = lab
        .prom
        .query(&format!(
            "{expr} or label_replace(timestamp({expr}), \"at\", \"1\", \"\", \"\")"
        ))
        .await?;
    let value = pair
        .iter()
        .find(|(l, _)| !l.contains_key("at"))
        .map(|s| s.1);
    let at = pair.iter().find(|(l, _)| l.contains_key("at")).map(|s| s.1);
    let read = status != ELSEWHERE;
    let (Some(value), Some(at)) = (value, at) else {
        lab.report
            .check(false, &format!("{expr}: no sample in Prometheus"));
        return Ok(());
    };
    let truth = at - stored;
    lab.report.check(
        (value - truth).abs() <= TIME_TOLERANCE,
        &format!(
            "{expr} = {value:.2} s; truth {truth:.2} s (sample at {at:.2}, sequence {seq} stored at {stored:.2}), \
             within {TIME_TOLERANCE} s"
        ),
    );
    let exact = format!("{family}_exact{selector}");
    let got = lab.prom.value(&exact).await?;
    let what = if read {
        "read from the stored message, not estimated"
    } else {
        "estimated (the exporter cannot read account OTHER's messages)"
    };
    lab.report
        .count(what, if read { 1.0 } else { 0.0 }, &exact, got);
    Ok(())
}

/// Each alert of the scenario and the status whose consumer fires it.
const ALERT_OF_STATUS: [(&str, &str); 3] = [
    (STALLED_ALERT, "stalled"),
    (STOPPED_ALERT, "stopped"),
    (LAG_ALERT, "lagging"),
];

/// What the scenario set up on the server and keeps running.
struct Health {
    /// JetStream in account APP.
    js: Context,
    /// JetStream in account OTHER.
    other: Context,
    consumers: drive::Consumers,
    /// The applications driving the consumers.
    driving: drive::Drive,
    /// When the consumers were created (Unix seconds).
    created_unix: f64,
}

impl Health {
    /// Creates every health consumer, the rewound one's history and the
    /// consumer in account OTHER, and starts the applications.
    async fn start(lab: &mut Lab) -> anyhow::Result<Health> {
        let js = jetstream::new(lab.app.clone());
        let consumers = drive::create_all(&js).await?;
        let created_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        drive::consume_rewound(&js).await?;
        let driving = drive::Drive::start(&js, &consumers).await?;
        // While it lives, account OTHER has a consumer nobody counts the
        // advisories of (the scenario after next is about that).
        lab.report.allow("NatsDeliveryAdvisoriesUnwatched");
        let other = drive::connect_other(lab).await?;
        drive::create(&other, ELSEWHERE, false).await?;
        drive::publish(&other, ELSEWHERE, 5).await?;
        lab.report.note(&format!(
            "six streams HEALTH_<STATUS>, consumer `{CONSUMER}` on each; status window {STATUS_WINDOW_SECS} s"
        ));
        Ok(Health {
            js,
            other,
            consumers,
            driving,
            created_unix,
        })
    }

    /// Stops the applications and deletes every health stream.
    async fn stop(self) -> anyhow::Result<()> {
        self.driving.stop().await?;
        drive::delete_all(&self.js).await?;
        self.other
            .delete_stream(stream_of(ELSEWHERE))
            .await
            .map_err(err)?;
        Ok(())
    }
}

/// A status is known as soon as what the exporter has seen decides it,
/// and never a guess: the application that keeps up is ok before its
/// window is full (nothing waits at a snapshot), the one nobody reads
/// is unknown until a whole window says stopped.
/// Read from Prometheus's history, not its current value: on a busy
/// machine the set-up can outlast the window.
async fn check_known_before_window(lab: &mut Lab, created_unix: f64) -> anyhow::Result<()> {
    for (status, says) in [("stopped", "unknown"), ("ok", "ok")] {
        let series = format!(
            "nats_delivery_consumer_status{{{},status=\"{says}\"}} == 1",
            labels(status)
        );
        lab.wait_series(&format!("last_over_time(({series})[10m:1s])"))
            .await?;
        let first = lab
            .prom
            .value(&format!("min_over_time(timestamp({series})[10m:1s])"))
            .await?;
        let early = first.map_or(f64::INFINITY, |at| at - created_unix);
        lab.report.check(
            early < STATUS_WINDOW_SECS as f64,
            &format!(
                "{} said `{says}` {early:.1} s after it was created, before its window was full",
                stream_of(status)
            ),
        );
    }
    Ok(())
}

/// The paused consumer says paused at once, in its status and its gauge.
async fn check_paused(lab: &mut Lab) -> anyhow::Result<()> {
    expect_status(lab, "paused").await?;
    let q = format!("nats_delivery_consumer_paused{{{}}}", labels("paused"));
    let got = lab.prom.value(&q).await?;
    lab.report
        .count("the paused consumer is paused", 1.0, &q, got);
    Ok(())
}

/// The lagging consumer's delivery lag, the stalled one's oldest
/// unacknowledged age, and the estimated lag in account OTHER, each against
/// the stored time of its message.
async fn check_times(lab: &mut Lab, health: &Health) -> anyhow::Result<()> {
    let lagging_consumes = &health.driving.lagging_consumes;
    // Lag in time: the lagging application stops taking messages, so its
    // first undelivered message stays the same while the lab reads it.
    lagging_consumes.store(false, std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let info = health
        .consumers
        .lagging
        .clone()
        .info()
        .await
        .map_err(err)?
        .clone();
    let next = info.delivered.stream_sequence + 1;
    lab.report.note(&format!(
        "lagging: delivered up to stream sequence {}, {} waiting",
        info.delivered.stream_sequence, info.num_pending
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lag = "nats_delivery_consumer_delivery_lag";
    check_time(lab, &health.js, (lag, "lagging", next)).await?;
    // Back to work before the pause could look like a stopped application.
    lagging_consumes.store(true, std::sync::atomic::Ordering::Relaxed);
    // The stalled application holds messages 1 to 10 unacknowledged: its
    // oldest unacknowledged message is sequence 1.
    let age = "nats_delivery_consumer_oldest_unacked_age";
    check_time(lab, &health.js, (age, "stalled", 1)).await?;
    // Estimated where the exporter cannot read: sequence 1 is the stream's
    // first, whose time /jsz gives, so the estimate meets the truth there.
    check_time(lab, &health.other, (lag, ELSEWHERE, 1)).await
}

/// One alert per cause (the stopped consumer is far behind too, but only
/// its stopped alert fires), nothing for the paused one. The lagging
/// application took 2 of every 10 messages: 10 s behind after about 10 s.
async fn expect_alerts(lab: &mut Lab) -> anyhow::Result<()> {
    for (alert, status) in ALERT_OF_STATUS {
        let want = [
            ("account", "APP"),
            ("stream", &*stream_of(status)),
            ("consumer", CONSUMER),
        ];
        lab.expect_firing(alert, &want, SHOW_WAIT).await?;
    }
    Ok(())
}

/// Once the streams are gone, every alert of the scenario stops, and the
/// unwatched-account alert of OTHER too (so that the unwatched-account
/// scenario starts from a quiet OTHER).
async fn expect_resolved(lab: &mut Lab) -> anyhow::Result<()> {
    for (alert, status) in ALERT_OF_STATUS {
        let want = [("stream", &*stream_of(status))];
        let stopped = lab.prom.wait_resolved(alert, &want, SHOW_WAIT).await?;
        lab.report.resolved(alert, &want, stopped);
    }
    let want = [("account", "OTHER")];
    let alert = "NatsDeliveryAdvisoriesUnwatched";
    let stopped = lab.prom.wait_resolved(alert, &want, SHOW_WAIT).await?;
    lab.report.resolved(alert, &want, stopped);
    Ok(())
}

/// The consumer-health scenario.
pub async fn consumer_health(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "consumer health: each status driven on the server, lag and age in seconds",
        &[STALLED_ALERT, STOPPED_ALERT, LAG_ALERT],
    );
    let health = Health::start(lab).await?;
    check_known_before_window(lab, health.created_unix).await?;
    check_paused(lab).await?;
    for status in ["ok", "lagging", "stalled", "stopped"] {
        expect_status(lab, status).await?;
    }
    check_times(lab, &health).await?;
    expect_alerts(lab).await?;

    // Rewound: its delivered position goes back from 30 to 9 while the
    // exporter watches (its window is full by now).
    drive::rewind(&health.js).await?;
    lab.report
        .note("rewound: consumer replaced by one starting at sequence 10 (delivered 30 -> 9)");
    // Behind its stream by the time since sequence 10 was stored: its lag
    // alert may fire, and is its only alert.
    expect_status(lab, "rewound").await?;

    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);
    health.stop().await?;
    expect_resolved(lab).await
}
