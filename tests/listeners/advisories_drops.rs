//! The live listener's own client-side drops are counted exactly, and the
//! listener comes back on its own after its server goes away.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;

const APP: &[(&str, &str)] = &[("account", "APP")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_client_drops_are_counted_exactly() {
    // A tiny buffer forces the exporter's own client to drop during a burst.
    burst_counted_or_dropped(&["--advisories-buffer", "8"], 20_000, "an 8-message buffer").await;
}

/// The listener holds at most --advisories-buffer-bytes of advisories not
/// yet counted (before, only a number of messages bounded it, 1,048,576 by
/// default): with 1 KiB, about four of these 270-byte advisories, a burst
/// overflows it, and every advisory is counted or counted as dropped. The
/// burst of 3,000 fits the subscription's own buffer (4,096): every drop is
/// the queue's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_queue_is_bounded_in_bytes() {
    let flags = ["--advisories-buffer-bytes", "1KiB"];
    burst_counted_or_dropped(&flags, 3_000, "a 1 KiB queue").await;
}

/// `n` max-deliveries advisories in a burst into a live listener with
/// `flags`: counted plus dropped equals what was sent, with drops.
async fn burst_counted_or_dropped(flags: &[&str], n: u64, bound: &str) {
    let s = server();
    let running = start_listener(&s, "APP", "app", advisory_args(flags)).await;
    let app = client(&s, "app").await;
    for seq in 1..=n {
        let payload = format!(
            r#"{{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"x","timestamp":"2026-11-29T00:00:00Z","stream":"B","consumer":"C","stream_seq":{seq},"deliveries":3}}"#
        );
        app.publish(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.B.C",
            payload.into(),
        )
        .await
        .unwrap();
    }
    app.flush().await.unwrap();
    let labels = [("account", "APP"), ("stream", "B"), ("consumer", "C")];
    let counted_and_dropped = |text: &str| {
        let counted = exact(
            text,
            "nats_delivery_jetstream_max_deliveries_total",
            &labels,
        )
        .unwrap_or(0.0);
        let dropped = exact(text, "nats_delivery_exporter_dropped_messages_total", APP).unwrap();
        (counted, dropped)
    };
    // Every advisory is either counted or counted as dropped, exactly.
    Wait::secs(format!("{n} advisories counted or counted as dropped"), 20)
        .every(Duration::from_millis(100))
        .until(|| {
            let text = running.text();
            let (counted, dropped) = counted_and_dropped(&text);
            let received = exact(&text, "nats_delivery_advisories_received_total", APP).unwrap();
            if counted + dropped != n as f64 {
                return Err(format!("counted {counted} + dropped {dropped}"));
            }
            assert_eq!(received, counted, "{text}");
            assert!(dropped > 0.0, "the burst did not overflow {bound}: {text}");
            Ok(())
        })
        .await;
    // And it stays exact: no late over-count. A drop audit that started
    // before the counts settled may still be running; the one after it
    // started after them and read every message the connection had.
    let audits = running.metrics.drop_audits.get();
    Wait::secs("two more drop audits", 20)
        .until(|| {
            let done = running.metrics.drop_audits.get();
            (done >= audits + 2).then_some(()).ok_or(done)
        })
        .await;
    let text = running.text();
    let (counted, dropped) = counted_and_dropped(&text);
    assert_eq!(counted + dropped, n as f64, "{text}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_reconnects_by_itself() {
    // Both servers listen on the same port, as a restarted server would.
    let port = nats_test_server::free_port();
    let cfg = format!("port: {port}\n{ACCOUNTS}");
    let first = nats_test_server::NatsServer::builder().config(&cfg).start();
    assert_eq!(first.client_port, port);
    let running = start_listener(&first, "APP", "app", advisory_args(&[])).await;
    let up = "nats_delivery_advisory_listener_up";
    drop(first);
    wait_value(&running.registry, up, APP, 0.0, 15).await;

    let second = nats_test_server::NatsServer::builder().config(&cfg).start();
    wait_value(&running.registry, up, APP, 1.0, 30).await;
    let app = client(&second, "app").await;
    app.publish(
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C",
        r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"C","stream_seq":1,"deliveries":2}"#.into(),
    )
    .await
    .unwrap();
    app.flush().await.unwrap();
    let labels = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    wait_value(
        &running.registry,
        "nats_delivery_jetstream_max_deliveries_total",
        &labels,
        1.0,
        10,
    )
    .await;
    running.stop().await;
}
