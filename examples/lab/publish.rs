//! Loss before the stream: JetStream publishes a full stream refuses under
//! discard new, counted by the application's JetStream publisher.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::{Lab, APP_CLIENT};

const WAIT: Duration = Duration::from_secs(30);
const STREAM: &str = "LAB_FULL";
const SUBJECT: &str = "lab.full";
const KEEP: u64 = 5;
const PUBLISHED: u64 = 12;

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// A stream of `max_msgs` 5 under discard new takes 12 publishes through the
/// application's instrumented publisher. The truth: publishes whose
/// acknowledgement the application received (stored) and those it got an
/// error for (refused), checked against what the stream holds.
pub async fn publish_refused(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsJetStreamPublishRefused";
    lab.report.scenario(
        "a full stream refuses publishes: max_msgs 5 under discard new, 12 published",
        &[alert],
    );
    let js = jetstream::new(lab.app.clone());
    let publisher = lab.metrics.jetstream_publisher(js.clone()).map_err(err)?;
    js.create_stream(stream::Config {
        name: STREAM.into(),
        subjects: vec![SUBJECT.into()],
        max_messages: KEEP as i64,
        discard: stream::DiscardPolicy::New,
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .map_err(err)?;
    // Scraped at 0 first, so that the rise is new in Prometheus' window.
    let sel = format!("{{client=\"{APP_CLIENT}\",reason=\"max_messages\"}}");
    let failures = format!("sum(nats_delivery_client_jetstream_publish_failures_total{sel})");
    lab.wait_series(&format!("{failures} == 0")).await?;
    let (mut stored, mut refused) = (0u64, 0u64);
    for i in 0..PUBLISHED {
        let pending = publisher
            .publish(SUBJECT, i.to_string().into())
            .await
            .map_err(err)?;
        match pending.await {
            Ok(_) => stored += 1,
            Err(_) => refused += 1,
        }
    }
    let held = js
        .get_stream(STREAM)
        .await
        .map_err(err)?
        .info()
        .await
        .map_err(err)?
        .state
        .messages;
    lab.report.note(&format!(
        "published {PUBLISHED}: {stored} acknowledged, {refused} refused; the stream holds {held}"
    ));
    lab.report.check(
        stored == held && stored + refused == PUBLISHED,
        &format!("acknowledged ({stored}) = held by the stream ({held}), and with the refused the {PUBLISHED} published"),
    );
    let got = lab.prom.settle(&failures, refused as f64, WAIT).await?;
    lab.report.count(
        "JetStream publishes refused (max_messages)",
        refused as f64,
        &failures,
        got,
    );
    let q = format!(
        "sum(nats_delivery_client_jetstream_published_messages_total{{client=\"{APP_CLIENT}\"}})"
    );
    let got = lab.prom.settle(&q, stored as f64, WAIT).await?;
    lab.report
        .count("JetStream publishes stored", stored as f64, &q, got);
    let labels = [
        ("client", APP_CLIENT),
        ("reason", "max_messages"),
        ("job", "lab-app"),
    ];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    Ok(())
}
