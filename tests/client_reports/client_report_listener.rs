//! The exporter's application-report listener against a real server:
//! garbage is counted in full and logged at a bounded rate, its own state is
//! a metric, and the permissions in docs/operators.md keep other clients off
//! the report subject.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use nats_delivery_exporter::ReportLimits;
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::json;

use crate::client_reports_support;
use crate::common;

use client_reports_support::*;
use common::exposition;

const LONG: Duration = Duration::from_secs(600);

/// A writer collecting log output in memory.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured_log() -> &'static LogBuffer {
    static LOG: OnceLock<LogBuffer> = OnceLock::new();
    LOG.get_or_init(|| {
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .init();
        buffer
    })
}

/// 1,000 garbage reports: all counted, one log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_is_counted_in_full_and_logged_at_a_bounded_rate() {
    let log = captured_log();
    let server = NatsServer::builder().start();
    let subject = "bounds.garbage";
    let (registry, _) = exporter_with(&server, subject, LONG, ReportLimits::default()).await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    for i in 0..1_000 {
        publisher
            .publish(format!("{subject}.x"), Bytes::from(format!("garbage {i}")))
            .await
            .unwrap();
    }
    publisher.flush().await.unwrap();
    Wait::secs("1,000 reports", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(1_000.0))
        .await;
    let text = exposition(&registry);
    assert_eq!(rejected(&text, "malformed"), Some(1_000.0));
    assert_eq!(
        exact(&text, "nats_delivery_app_reports_malformed_total", &[]),
        Some(1_000.0)
    );
    let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let lines = log
        .lines()
        .filter(|l| l.contains("ignored an application report") && l.contains(subject))
        .count();
    assert_eq!(lines, 1, "{log}");
}

/// The listener's own health: 1 while subscribed and connected, 0 once the
/// server is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_up_follows_the_connection() {
    let server = NatsServer::builder().start();
    let (registry, _) = exporter(&server, SUBJECT, LONG).await;
    let up = || {
        exact(
            &exposition(&registry),
            "nats_delivery_app_reports_listener_up",
            &[],
        )
    };
    Wait::secs("listener up", 20)
        .every(Duration::from_millis(10))
        .until(|| up() == Some(1.0))
        .await;
    drop(server);
    Wait::secs("listener down", 20)
        .every(Duration::from_millis(10))
        .until(|| up() == Some(0.0))
        .await;
}

/// The permissions docs/operators.md shows: a client that is neither an
/// application nor the exporter can neither publish a report nor read one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_permissions_keep_other_clients_off_the_subject() {
    let docs =
        std::fs::read_to_string(nats_test_server::workspace_root().join("docs/operators.md"))
            .unwrap();
    let start = docs.find("authorization {").unwrap();
    let end = start + docs[start..].find("\n```").unwrap();
    let config = docs[start..end].replace("\"...\"", "\"secret\"");
    let server = NatsServer::builder().config(&config).start();
    let connect = |user: &str| {
        async_nats::ConnectOptions::with_user_and_password(user.into(), "secret".into())
            .connect(server.client_url())
    };
    let exporter_client = connect("exporter").await.unwrap();
    let reports = Arc::new(nats_delivery_exporter::ClientReports::new(LONG));
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(reports.clone()));
    tokio::spawn(nats_delivery_exporter::run_client_reports(
        exporter_client.clone(),
        SUBJECT.to_string(),
        reports.clone(),
    ));
    Wait::secs("listener up", 20)
        .every(Duration::from_millis(10))
        .until(|| {
            exact(
                &exposition(&registry),
                "nats_delivery_app_reports_listener_up",
                &[],
            ) == Some(1.0)
        })
        .await;
    common::sync_with_server(&exporter_client).await;

    let other = connect("other").await.unwrap();
    let mut eavesdropper = other.subscribe(format!("{SUBJECT}.>")).await.unwrap();
    other
        .publish(
            format!("{SUBJECT}.forged"),
            report("forged", "x", 1, json!([])),
        )
        .await
        .unwrap();
    other.flush().await.unwrap();
    let app = connect("orders").await.unwrap();
    // Not as billing: the server refuses that subject to orders.
    app.publish(
        format!("{SUBJECT}.billing"),
        report("billing", "pod-1", 1, json!([])),
    )
    .await
    .unwrap();
    app.publish(
        format!("{SUBJECT}.orders"),
        report("orders", "pod-1", 1, json!([])),
    )
    .await
    .unwrap();
    app.flush().await.unwrap();
    Wait::secs("the application's report", 20)
        .every(Duration::from_millis(10))
        .until(|| reports.instances() == 1)
        .await;
    // The server has handled the forged report (a round trip of its
    // publisher) and anything it forwarded to the exporter came before the
    // reply to the exporter's own round trip; only one report was received.
    // A second report of the application, sent after: once it is taken in,
    // whatever came before it was too; two reports were received.
    common::sync_with_server(&other).await;
    app.publish(
        format!("{SUBJECT}.orders"),
        report("orders", "pod-2", 1, json!([])),
    )
    .await
    .unwrap();
    app.flush().await.unwrap();
    Wait::secs("the application's second report", 20)
        .every(Duration::from_millis(10))
        .until(|| reports.instances() == 2)
        .await;
    assert_eq!(received(&exposition(&registry)), Some(2.0));
    use futures::StreamExt;
    let read = tokio::time::timeout(Duration::from_millis(300), eavesdropper.next()).await;
    assert!(
        !matches!(read, Ok(Some(_))),
        "the other client read a report"
    );
}

/// A refused login is one outage of the report listener: counted once as
/// `connect` however often the client tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_is_counted_once_as_connect() {
    use nats_delivery_exporter::{
        connect_client_reports, run_client_reports, ClientReports, NatsArgs,
    };
    let server = NatsServer::builder()
        .config(r#"authorization { users: [ { user: exporter, password: secret } ] }"#)
        .start();
    let nats = NatsArgs::from_flags(["--nats-servers", &server.client_url()]).unwrap();
    let reports = Arc::new(ClientReports::new(LONG));
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(reports.clone()));
    let client = connect_client_reports(
        &nats,
        &"user:exporter:wrong".parse().unwrap(),
        reports.clone(),
    )
    .await
    .unwrap();
    let task = tokio::spawn(run_client_reports(client, SUBJECT.to_string(), reports));
    // Three attempts refused: the client kept trying after the first.
    let refused = || {
        let url = format!("{}/connz?state=closed", server.monitor_url());
        let body = tokio::task::block_in_place(|| nats_test_server::http_get(&url));
        let connz: serde_json::Value = serde_json::from_str(&body).unwrap();
        let closed = connz["connections"].as_array().unwrap();
        closed
            .iter()
            .filter(|c| c["reason"] != "Client Closed")
            .count()
    };
    let connect_errors = "nats_delivery_app_reports_listener_errors_total";
    Wait::secs("3 login attempts refused, the outage counted", 30)
        .every(Duration::from_millis(100))
        .until(|| {
            let text = exposition(&registry);
            let counted = exact(&text, connect_errors, &[("kind", "connect")]);
            let n = refused();
            (counted.is_some() && n >= 3)
                .then_some(())
                .ok_or((n, counted))
        })
        .await;
    let text = exposition(&registry);
    let errors = |kind: &str| {
        exact(
            &text,
            "nats_delivery_app_reports_listener_errors_total",
            &[("kind", kind)],
        )
    };
    assert_eq!(errors("connect"), Some(1.0), "{text}");
    assert_eq!(errors("other"), None, "{text}");
    assert_eq!(
        exact(&text, "nats_delivery_app_reports_listener_up", &[]),
        Some(0.0)
    );
    nats_test_server::reference::assert_documented(&text);
    task.abort();
}
