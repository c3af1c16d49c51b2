//! JetStream API requests a server dropped, from the system account's
//! `$JS.EVENT.ADVISORY.API.LIMIT_REACHED` advisories, against a real server.
use crate::advisories_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use advisories_support::*;
use futures::{FutureExt, StreamExt};
use nats_test_server::NatsServer;

const DROPPED: &str = "nats_delivery_jetstream_api_requests_dropped_total";
const EVENTS: &str = "nats_delivery_jetstream_api_limit_reached_total";
/// Requests sent per burst: far beyond the queue limit of [`QUEUE_LIMIT`].
const BURST: u64 = 2000;
const QUEUE_LIMIT: u64 = 20;

/// Every request either gets an answer or is dropped: once all are accounted
/// for, the exporter's dropped count is exactly what the clients never heard
/// back, and what the server's own advisories say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_api_requests_are_counted_exactly() {
    let store = tempfile::tempdir().unwrap();
    let probe = NatsServer::builder().start();
    let version = client_version(&probe).await;
    drop(probe);
    // 2.10.25+ send the advisory, but before 2.11 a server answers its own
    // clients' requests in place and queues only those arriving over
    // routes, gateways and leaf nodes: from a client nothing is dropped.
    let has_advisory = nats_test_server::version_numbers(&version) >= vec![2, 11];
    // Servers before 2.10 have no such option (nor the advisory).
    let limit = if nats_test_server::version_numbers(&version) >= vec![2, 10] {
        format!("request_queue_limit: {QUEUE_LIMIT}")
    } else {
        String::new()
    };
    let s = NatsServer::builder()
        .config(ACCOUNTS)
        .config(&format!(
            "jetstream {{ store_dir: \"{}\", {limit} }}",
            store.path().display()
        ))
        .start();
    let listener = SystemListener::start(&s, 10).await;

    // The server's own word, read beside the exporter.
    let sys = client(&s, "sys").await;
    let mut advisories = sys
        .subscribe("$JS.EVENT.ADVISORY.API.LIMIT_REACHED")
        .await
        .unwrap();
    sys.flush().await.unwrap();
    let app = client(&s, "app").await;
    let mut replies = app.subscribe("flood.replies").await.unwrap();
    app.flush().await.unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let counting = answered.clone();
    tokio::spawn(async move {
        while replies.next().await.is_some() {
            counting.fetch_add(1, Ordering::Relaxed);
        }
    });

    let mut sent = 0;
    let mut told = (0u64, 0u64); // (advisories, dropped) seen by the test
    let bursts = if has_advisory { 20 } else { 3 };
    for _ in 0..bursts {
        for _ in 0..BURST {
            app.publish_with_reply("$JS.API.INFO", "flood.replies", "".into())
                .await
                .unwrap();
        }
        app.flush().await.unwrap();
        sent += BURST;
        // Every request answered or dropped before the next burst.
        Wait::secs("every request answered or dropped", 60)
            .every(Duration::from_millis(20))
            .until_async(async || {
                while let Some(Some(m)) = advisories.next().now_or_never() {
                    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
                    told.0 += 1;
                    told.1 += v["dropped"].as_u64().unwrap();
                }
                let got = answered.load(Ordering::Relaxed);
                (got + told.1 == sent).then_some(()).ok_or((got, told))
            })
            .await;
        if told.0 > 0 {
            break;
        }
    }
    let server = [("server", s.name.as_str())];
    if has_advisory {
        // The test saw every advisory (each drop is in one), and the
        // exporter reads them on one subscription, in order: once it
        // counted as many, it counted them all.
        Wait::secs("the exporter to count every advisory", 20)
            .until(|| {
                let text = listener.text();
                let n = exact(&text, EVENTS, &server).unwrap_or(0.0);
                (n >= told.0 as f64).then_some(()).ok_or(Text(text))
            })
            .await;
    } else {
        // A client closed: its disconnect event leaves the server after
        // anything sent before it (on another subscription of the
        // exporter's, so only a sign that the listener is reading).
        client(&s, "app").await.drain().await.unwrap();
        let received = "nats_delivery_system_events_received_total";
        Wait::secs("the barrier's disconnect event", 20)
            .until(|| {
                let text = listener.text();
                let n = exact(&text, received, &[]).unwrap_or(0.0);
                (n >= 1.0).then_some(()).ok_or(Text(text))
            })
            .await;
    }
    let text = listener.text();
    if has_advisory {
        assert!(told.1 > 0, "no request dropped in {sent}: {text}");
        assert_eq!(
            exact(&text, DROPPED, &server),
            Some(told.1 as f64),
            "{text}"
        );
        assert_eq!(exact(&text, EVENTS, &server), Some(told.0 as f64), "{text}");
    } else {
        assert_eq!(told, (0, 0));
        assert!(!text.contains(DROPPED), "{text}");
        assert!(!text.contains(EVENTS), "{text}");
    }
    assert_eq!(
        exact(
            &text,
            "nats_delivery_jetstream_api_limit_advisories_malformed_total",
            &[]
        ),
        Some(0.0)
    );
    eprintln!(
        "{version}: {sent} requests, {} answered, {} dropped in {} advisories",
        answered.load(Ordering::Relaxed),
        told.1,
        told.0
    );
    nats_test_server::reference::assert_documented(&text);
    listener.stop().await;
}

async fn client_version(s: &NatsServer) -> String {
    let c = async_nats::connect(s.client_url()).await.unwrap();
    c.server_info().version
}

/// A forged advisory (any client allowed to publish on the subject in the
/// system account could send one) is counted as malformed, never as drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_api_limit_advisory_is_malformed() {
    let s = NatsServer::builder().config(ACCOUNTS).start();
    let listener = SystemListener::start(&s, 10).await;
    let sys = client(&s, "sys").await;
    for garbage in [
        "not json",
        r#"{"type":"io.nats.jetstream.advisory.v1.api_limit_reached","id":"x","server":"n","dropped":-3}"#,
    ] {
        sys.publish("$JS.EVENT.ADVISORY.API.LIMIT_REACHED", garbage.into())
            .await
            .unwrap();
    }
    sys.flush().await.unwrap();
    wait_value(
        &listener.registry,
        "nats_delivery_jetstream_api_limit_advisories_malformed_total",
        &[],
        2.0,
        20,
    )
    .await;
    let text = listener.text();
    assert!(!text.contains(DROPPED), "{text}");
    assert_eq!(listener.metrics.listener_up.get(), 1);
    listener.stop().await;
}
