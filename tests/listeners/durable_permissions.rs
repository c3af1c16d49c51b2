//! Durable mode when the operator takes the JetStream API away from the
//! exporter's user and gives it back: the listener is down with the cause
//! counted, and the advisories stored meanwhile are counted once restored.
use crate::advisories_support;

use advisories_support::*;

const EXPORTER_USER: &str = "{ user: exporter, password: exporter-secret }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_permissions_are_noticed_and_counting_resumes_when_restored() {
    let accounts = format!(
        "accounts {{ APP {{ jetstream: enabled, users: [ {{ user: app, password: app-secret }}, {EXPORTER_USER} ] }} }}"
    );
    let s = nats_test_server::NatsServer::builder()
        .jetstream()
        .config(&accounts)
        .start();
    let flags = advisory_args(&["--advisories-stream", "ADV"]);
    let running = start_listener(&s, "APP", "exporter", flags).await;
    let app = client(&s, "app").await;
    let subject = "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.WORK.worker";
    let labels = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let naks = "nats_delivery_jetstream_naks_total";
    let send = |seqs: std::ops::Range<u64>| {
        let app = app.clone();
        async move {
            for seq in seqs {
                let p = format!(
                    r#"{{"type":"io.nats.jetstream.advisory.v1.nak","stream":"WORK","consumer":"worker","stream_seq":{seq},"deliveries":1}}"#
                );
                app.publish(subject, p.into()).await.unwrap();
            }
            app.flush().await.unwrap();
        }
    };
    send(1..4).await;
    wait_value(&running.registry, naks, &labels, 3.0, 20).await;

    // The operator takes the JetStream API away from the exporter's user.
    s.reload_with(
        EXPORTER_USER,
        "{ user: exporter, password: exporter-secret, permissions: { publish: { deny: [\"$JS.API.>\"] } } }",
    );
    let app_labels = [("account", "APP")];
    wait_value(
        &running.registry,
        "nats_delivery_advisory_listener_up",
        &app_labels,
        0.0,
        30,
    )
    .await;
    let text = running.text();
    let errors: f64 = ["permission", "timeout"]
        .iter()
        .filter_map(|k| {
            exact(
                &text,
                "nats_delivery_advisory_listener_errors_total",
                &[("account", "APP"), ("kind", k)],
            )
        })
        .sum();
    assert!(errors >= 1.0, "no failure counted:\n{text}");
    // Advisories keep arriving in the stream meanwhile.
    send(4..9).await;

    // Permissions restored: set up again, and the five are counted.
    s.reload_with(
        "{ user: exporter, password: exporter-secret, permissions: { publish: { deny: [\"$JS.API.>\"] } } }",
        EXPORTER_USER,
    );
    wait_value(
        &running.registry,
        "nats_delivery_advisory_listener_up",
        &app_labels,
        1.0,
        30,
    )
    .await;
    wait_value(&running.registry, naks, &labels, 8.0, 30).await;
    running.stop().await;
}
