//! The exporter binary as an operator runs it: polling, the advisory listener
//! and application reports wired together, scraped over HTTP, stopped with
//! SIGTERM.
use crate::common;

use std::process::{Child, Command};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, AckKind};
use futures::StreamExt;
use nats_delivery_metrics::{ClientMetrics, PendingLimits, ReportOptions, SubscribeOptions};
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

struct Exporter {
    child: Child,
    url: String,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_exporter(server: &NatsServer) -> Exporter {
    let port = nats_test_server::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args([
            "--monitor-url",
            &server.monitor_url(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "--nats-servers",
            &server.client_url(),
            "--advisories",
            "--client-reports",
            "--client-reports-max-instances",
            "3",
        ])
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    Exporter {
        child,
        url: format!("http://127.0.0.1:{port}/metrics"),
    }
}

async fn scrape(url: &str) -> Option<String> {
    reqwest::get(url).await.ok()?.text().await.ok()
}

#[tokio::test]
async fn the_binary_counts_every_kind_of_loss_it_listens_for() {
    let server = NatsServer::builder().jetstream().start();
    let exporter = start_exporter(&server);
    // Ready when the advisory listener is connected and subscribed.
    Wait::secs("the advisory listener", 20)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            let text = scrape(&exporter.url).await?;
            (value(
                &text,
                "nats_delivery_advisory_listener_up",
                &[("account", "$G")],
            ) == Some(1.0))
            .then_some(())
        })
        .await;

    let client = nak_four_and_terminate_one(&server).await;

    let (_app, _held, _reports) = drop_eight_of_ten(&server, &client).await;

    let app_labels = [
        ("client", "e2e-app"),
        ("instance", "e2e-1"),
        ("subscription", "work"),
    ];
    let c = [("account", "$G"), ("stream", "E2E"), ("consumer", "worker")];
    let text = Wait::secs("the advisories and the application's report", 20)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            let text = scrape(&exporter.url).await?;
            let naks = value(&text, "nats_delivery_jetstream_naks_total", &c);
            let dropped = value(
                &text,
                "nats_delivery_app_dropped_messages_total",
                &app_labels,
            );
            (naks == Some(4.0) && dropped == Some(8.0)).then_some(text)
        })
        .await;
    check_the_other_series(&text);

    stop_with_sigterm(exporter).await;
}

/// JetStream: 4 messages NAKed, 1 terminated by the client; the client.
async fn nak_four_and_terminate_one(server: &NatsServer) -> async_nats::Client {
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let st = js
        .create_stream(stream::Config {
            name: "E2E".into(),
            subjects: vec!["e2e.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let consumer = st
        .create_consumer(pull::Config {
            durable_name: Some("worker".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    common::publish_acked(&js, (0..5).map(|i| format!("e2e.{i}")), "m").await;
    let mut batch = consumer.fetch().max_messages(5).messages().await.unwrap();
    let mut n = 0;
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        let kind = if n < 4 {
            AckKind::Nak(None)
        } else {
            AckKind::Term
        };
        m.double_ack_with(kind).await.unwrap();
        n += 1;
    }
    assert_eq!(n, 5);

    client
}

/// An application whose subscription holds at most 2 messages: 10 arrive
/// while it reads none, 8 are dropped, and its reports say so. What must
/// live as long as the test: the connection, the subscription, the reports.
async fn drop_eight_of_ten(
    server: &NatsServer,
    client: &async_nats::Client,
) -> (async_nats::Client, impl Sized, impl Sized) {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ClientMetrics::new("e2e-app", &mut registry);
    let app = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let held = metrics
        .subscribe_with(
            &app,
            "work",
            SubscribeOptions::new()
                .name("work")
                .pending_limits(PendingLimits::new(2, 1 << 20)),
        )
        .await
        .unwrap();
    // A round trip on the app's connection: after it the server knows the
    // subscription (a flush only empties the client's write buffer).
    let no_responders = app.request("roundtrip.nobody", "".into()).await;
    assert!(no_responders.is_err());
    for _ in 0..10 {
        client.publish("work", "job".into()).await.unwrap();
    }
    client.flush().await.unwrap();
    let reports = metrics.publish_reports(
        app.clone(),
        ReportOptions::new()
            .interval(Duration::from_millis(200))
            .instance("e2e-1"),
    );

    (app, held, reports)
}

/// The series beside the ones the test waited for.
fn check_the_other_series(text: &str) {
    let app_labels = [
        ("client", "e2e-app"),
        ("instance", "e2e-1"),
        ("subscription", "work"),
    ];
    let c = [("account", "$G"), ("stream", "E2E"), ("consumer", "worker")];
    assert_eq!(
        value(
            text,
            "nats_delivery_jetstream_terminated_total",
            &[("reason", "client")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(text, "nats_delivery_app_pending_messages", &app_labels),
        Some(2.0)
    );
    assert_eq!(
        value(text, "nats_delivery_consumer_ack_pending_messages", &c),
        Some(4.0)
    );
    assert_eq!(
        value(text, "nats_delivery_up", &[("source", "jsz")]),
        Some(1.0)
    );
    assert_eq!(
        value(text, "nats_delivery_app_report_instances_limit", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(text, "nats_delivery_app_reports_listener_up", &[]),
        Some(1.0)
    );
    nats_test_server::reference::assert_documented(text);
}

/// SIGTERM: a clean stop.
async fn stop_with_sigterm(mut exporter: Exporter) {
    let status = Command::new("kill")
        .args(["-TERM", &exporter.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = tokio::task::spawn_blocking(move || exporter.child.wait().unwrap())
        .await
        .unwrap();
    assert!(code.success(), "exit after SIGTERM: {code}");
}
