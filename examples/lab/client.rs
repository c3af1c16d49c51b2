//! Loss in the application's client library: drops the link-in crate
//! counts exactly in its own queue, and drops async-nats makes in its own
//! buffer before the crate sees the messages (counted by events, a lower
//! bound).

use std::time::Duration;

use crate::{Lab, APP_CLIENT, APP_INSTANCE, APP_SUBJECT, PLAIN_CLIENT};

const WAIT: Duration = Duration::from_secs(30);

/// The application's handler pauses while 1,000 messages arrive; its
/// subscription holds 100 and drops the rest. The truth: messages the
/// application published minus messages its handler received.
pub async fn client_drops(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "client library drops: a handler pauses, its subscription buffer (100) overflows",
        &["NatsClientDroppedMessages"],
    );
    let n = 1000u64;
    for i in 0..n {
        lab.app.publish(APP_SUBJECT, i.to_string().into()).await?;
    }
    // Same connection: when the flush returns, the server has sent every
    // message to the application.
    lab.app.flush().await?;
    lab.app_published += n;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let handled = lab.handle_pending().await;
    let dropped = (lab.app_published - lab.app_handled) as f64;
    lab.report.note(&format!(
        "published {n} while the handler paused; it then received {handled}"
    ));
    let sel = format!("{{client=\"{APP_CLIENT}\",subscription=\"{APP_SUBJECT}\"}}");
    for (what, metric, truth) in [
        (
            "messages dropped by the client",
            "nats_delivery_client_dropped_messages_total",
            dropped,
        ),
        (
            "same, re-exported from the app's reports",
            "nats_delivery_app_dropped_messages_total",
            dropped,
        ),
        (
            "messages handed to the application",
            "nats_delivery_client_delivered_messages_total",
            lab.app_handled as f64,
        ),
    ] {
        let q = format!("sum({metric}{sel})");
        let got = lab.prom.settle(&q, truth, WAIT).await?;
        lab.report.count(what, truth, &q, got);
    }
    // Once from the application's own /metrics, once from its reports
    // re-exported by the exporter (`instance` kept by honor_labels).
    let own = [
        ("client", APP_CLIENT),
        ("subscription", APP_SUBJECT),
        ("job", "lab-app"),
    ];
    let reported = [
        ("client", APP_CLIENT),
        ("subscription", APP_SUBJECT),
        ("job", "nats-delivery-exporter"),
        ("instance", APP_INSTANCE),
    ];
    for labels in [&own[..], &reported[..]] {
        lab.expect_firing("NatsClientDroppedMessages", labels, WAIT)
            .await?;
    }
    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);
    Ok(())
}

/// A plain async-nats subscriber on a connection with `subscription_capacity`
/// 16, named through the crate so that async-nats' slow-consumer events are
/// attributed to it: 1,000 messages arrive while nobody reads, async-nats
/// itself drops what does not fit, in waves until Prometheus has seen the
/// events' series (born with the first event) before a wave that drops
/// more. The truth: published minus received. The events are a
/// lower bound (async-nats loses events when its queue of 128 is full), so
/// Prometheus must hold at least one and at most the truth.
pub async fn library_drops(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsClientLibraryDroppedMessages";
    lab.report.scenario(
        "async-nats itself drops: a plain subscriber's channel (16) overflows",
        &[alert],
    );
    let subject = "lab.plain.events";
    let mut subscriber = lab.plain.subscribe(subject).await?;
    lab.plain_metrics
        .name_subscriber(&subscriber, subject)
        .expect("async-nats shows the sid in its Debug output");
    let q = format!(
        "sum(nats_delivery_client_slow_consumer_events_total{{client=\"{PLAIN_CLIENT}\",subscription=\"{subject}\"}})"
    );
    let (mut published, mut received) = (0u64, 0u64);
    let mut events = None;
    // Waves until one drops while Prometheus already holds the series.
    let mut series_seen = false;
    for _wave in 0..6 {
        for i in 0..1000u32 {
            lab.plain.publish(subject, i.to_string().into()).await?;
        }
        lab.plain.flush().await?;
        published += 1000;
        let before = received;
        while let Ok(Some(_)) = tokio::time::timeout(
            Duration::from_secs(1),
            futures::StreamExt::next(&mut subscriber),
        )
        .await
        {
            received += 1;
        }
        if received - before == 1000 {
            continue; // nothing dropped in this wave
        }
        // Settles on the truth if no event was lost; otherwise on less.
        let truth = (published - received) as f64;
        events = lab.prom.settle(&q, truth, Duration::from_secs(10)).await?;
        if series_seen {
            break;
        }
        series_seen = events.is_some();
    }
    let dropped = published - received;
    lab.report.note(&format!(
        "published {published} while nobody read; the subscriber then received {received}"
    ));
    lab.report.fact(
        "messages async-nats dropped",
        dropped as f64,
        &format!(
            "{} slow-consumer events (a lower bound)",
            events.map_or("no".to_string(), |e| e.to_string())
        ),
    );
    let bounded = events.is_some_and(|e| e >= 1.0 && e <= dropped as f64);
    lab.report.check(
        bounded,
        &format!("slow-consumer events {events:?} are between 1 and the {dropped} drops  [{q}]"),
    );
    let labels = [
        ("client", PLAIN_CLIENT),
        ("subscription", subject),
        ("job", "lab-app"),
    ];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    Ok(())
}
