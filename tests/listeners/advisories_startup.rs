//! The live listener reads up only once the server has taken its
//! subscriptions: an advisory published the moment `up` reads 1 is counted.
//! A proxy passes what the listener sends to the server only after
//! [`HELD`], as a slow network would, so a listener that said up once its
//! SUBs were written (async-nats' `flush`), before the server read them,
//! misses that advisory.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use nats_delivery_exporter::NatsArgs;
use nats_test_server::wait::{Text, Wait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A max-deliveries advisory as the server writes it.
const ADVISORY: &str = r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"c1","timestamp":"2026-11-29T00:00:00Z","stream":"S","consumer":"C","stream_seq":1,"deliveries":2}"#;

/// How long the proxy holds each piece a client sends before passing it on.
const HELD: Duration = Duration::from_millis(400);

/// A proxy to `upstream` (`host:port`) that holds the client's bytes back
/// by [`HELD`] and passes the server's at once; returns its address.
async fn slow_to_server(upstream: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&upstream).await.unwrap();
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = from_client.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    // The scenario's slow network, not a wait for a fact.
                    tokio::time::sleep(HELD).await;
                    if to_server.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    format!("nats://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_sent_as_up_reads_1_is_counted() {
    let s = server();
    let upstream = s.client_url().trim_start_matches("nats://").to_string();
    let url = slow_to_server(upstream).await;
    let nats = NatsArgs::from_flags(["--nats-servers", &url]).expect("flags");
    let running = spawn_listener_at(nats, "APP", "user:app:app-secret", advisory_args(&[]));
    let app = client(&s, "app").await;
    // Polled often: the advisory goes out as soon as `up` reads 1.
    Wait::secs("nats_delivery_advisory_listener_up 1", 30)
        .every(Duration::from_millis(5))
        .until(|| {
            let text = running.text();
            let up = exact(
                &text,
                "nats_delivery_advisory_listener_up",
                &[("account", "APP")],
            );
            (up == Some(1.0)).then_some(()).ok_or(Text(text))
        })
        .await;
    app.publish(
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C",
        ADVISORY.into(),
    )
    .await
    .unwrap();
    app.flush().await.unwrap();
    // Markers after it (a type no one counts), sent until one is handled:
    // the advisory was either counted or missed by then.
    let marker = r#"{"type":"io.nats.test.marker","stream":"MARK","consumer":"MARK"}"#;
    Wait::secs("a marker handled after the advisory", 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let unknown = "nats_delivery_advisories_unknown_total";
            match exact(&running.text(), unknown, &[("account", "APP")]) {
                Some(n) if n >= 1.0 => Ok(()),
                n => {
                    app.publish(MAX_DELIVERIES_SUBJECT, marker.into())
                        .await
                        .unwrap();
                    app.flush().await.unwrap();
                    Err(n)
                }
            }
        })
        .await;
    let labels = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    let text = running.text();
    assert_eq!(
        exact(
            &text,
            "nats_delivery_jetstream_max_deliveries_total",
            &labels
        ),
        Some(1.0),
        "the advisory sent as up read 1:\n{text}"
    );
    running.stop().await;
}
