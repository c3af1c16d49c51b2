//! Durable mode tells a stream's incarnations apart by its creation time.
//! While that time cannot be learned (a timeout, an election, a refused
//! request) an advisory must wait, not be counted under a "stream gone" tag:
//! the same event re-sent later, with the time known, would then look new
//! and be counted twice.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use async_nats::jetstream;
use nats_test_server::NatsServer;

/// APP's exporter user may not ask for WORK's stream info, until reloaded.
const REFUSED: &str = r#"
accounts {
  APP {
    jetstream: enabled
    users: [
      { user: app, password: app-secret }
      { user: exp, password: exp-secret, permissions: { publish: { deny: ["$JS.API.STREAM.INFO.WORK"] } } }
    ]
  }
  SYS { users: [ { user: sys, password: sys-secret } ] }
}
system_account: SYS
"#;

const APP: &[(&str, &str)] = &[("account", "APP")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_stream_cannot_be_looked_up_waits_and_is_counted_once() {
    let s = NatsServer::builder().jetstream().config(REFUSED).start();
    let flags = ["--advisories-stream", "ADV", "--advisories-ack-wait", "2s"];
    let exporter = start_listener(&s, "APP", "exp", advisory_args(&flags)).await;
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    let labels = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";

    // One message dies while its stream cannot be looked up. Its advisory
    // handed out a third time: the first two were received and left
    // unacknowledged past the 2 s ack wait, not counted and acknowledged.
    let_die(&js, &consumer, 0, 1, 1).await;
    Wait::secs("the advisory handed out a third time", 30)
        .every(Duration::from_millis(100))
        .until_async(async || {
            let info = advisory_consumer(&js, "nats-delivery-exporter").await?;
            let handed_out = info.delivered.consumer_sequence;
            (handed_out >= 3)
                .then_some(())
                .ok_or(format!("handed out {handed_out} times"))
        })
        .await;
    let info = advisory_consumer(&js, "nats-delivery-exporter")
        .await
        .unwrap();
    assert_eq!(info.ack_floor.stream_sequence, 0, "acknowledged: {info:?}");
    assert_eq!(
        exact(&exporter.text(), name, &labels),
        None,
        "counted before its stream was known"
    );

    // Allowed again: counted once, on redelivery.
    s.reload_with("$JS.API.STREAM.INFO.WORK", "$JS.API.STREAM.INFO.NONE");
    wait_value(&exporter.registry, name, &labels, 1.0, 30).await;

    // The server sends the same event again (as after a leader change): a
    // copy of the advisory lands in ADV. It is the same death: not counted.
    let adv = js.get_stream("ADV").await.unwrap();
    let original = adv.get_raw_message(1).await.unwrap();
    app.publish(original.subject.to_string(), original.payload.clone())
        .await
        .unwrap();
    app.flush().await.unwrap();
    wait_value(
        &exporter.registry,
        "nats_delivery_advisories_received_total",
        APP,
        2.0,
        30,
    )
    .await;
    let text = exporter.text();
    assert_eq!(exact(&text, name, &labels), Some(1.0), "{text}");
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(1.0),
        "{text}"
    );
    exporter.stop().await;
}
