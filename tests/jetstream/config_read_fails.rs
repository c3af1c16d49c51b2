//! A configuration read that fails never empties a scrape: a real server
//! behind an endpoint that forwards every request, except that it never
//! answers a request for configuration after the first. The scrape then
//! serves the poll without configuration, with the configuration kept;
//! `nats_delivery_jsz_config_read` is 0 and
//! `nats_delivery_jsz_config_read_failures_total` counts each failed read.
//! Both reads that can fail: the periodic one (of every account) and the
//! one for an account where a consumer is new (`acc=`).
use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use common::fake_endpoint::{self, FakeEndpoint, Reply};
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// Forwards to `monitor_url`, but a request for configuration is answered
/// only once: later ones hang.
async fn answering_config_once(monitor_url: String) -> FakeEndpoint {
    let answered = Arc::new(AtomicBool::new(false));
    fake_endpoint::start(move |path| {
        if path.contains("config=true") && answered.swap(true, Ordering::SeqCst) {
            return Reply::Hang;
        }
        Reply::Fixed(
            "200 OK",
            nats_test_server::http_get(&format!("{monitor_url}{path}")),
        )
    })
    .await
}

/// A durable pull consumer `name` with `max_ack_pending`.
fn consumer(name: &str, max_ack_pending: i64) -> pull::Config {
    pull::Config {
        durable_name: Some(name.into()),
        max_ack_pending,
        ..Default::default()
    }
}

/// What a scrape says: `/jsz` up, the configuration read, the failed reads,
/// and per consumer its pending messages and `max_ack_pending`.
#[derive(Debug, PartialEq)]
struct Seen {
    up: Option<f64>,
    read: Option<f64>,
    failures: Option<f64>,
    consumers: Vec<(Option<f64>, Option<f64>)>,
}

async fn seen(exporter: &Exporter, server: &str, consumers: &[&str]) -> Seen {
    let text = common::scrape(exporter).await;
    let of = |name: &str, c: &str| {
        let labels = [("account", "$G"), ("stream", "C"), ("consumer", c)];
        value(&text, name, &labels)
    };
    Seen {
        up: value(
            &text,
            "nats_delivery_up",
            &[("server", server), ("source", "jsz")],
        ),
        read: value(
            &text,
            "nats_delivery_jsz_config_read",
            &[("server", server)],
        ),
        failures: value(
            &text,
            "nats_delivery_jsz_config_read_failures_total",
            &[("server", server)],
        ),
        consumers: consumers
            .iter()
            .map(|c| {
                let pending = of("nats_delivery_consumer_pending_messages", c);
                (pending, of("nats_delivery_consumer_max_ack_pending", c))
            })
            .collect(),
    }
}

/// Connects to `server`, makes stream `C` with consumer `first`
/// (`max_ack_pending` 5) and publishes `messages` to it.
async fn stream_with_consumer(server: &NatsServer, messages: usize) -> jetstream::stream::Stream {
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    let st = js
        .create_stream(stream::Config {
            name: "C".into(),
            subjects: vec!["c".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    st.create_consumer(consumer("first", 5)).await.unwrap();
    common::publish_acked(&js, (0..messages).map(|_| "c".to_string()), "m").await;
    st
}

/// The read for an account with a new consumer (beside the scrapes) fails:
/// the new consumer is served without configuration, the one before with
/// the one kept.
#[tokio::test]
async fn a_failed_read_for_a_new_consumer_serves_the_counts_with_what_is_kept() {
    let server = NatsServer::builder().jetstream().start();
    let st = stream_with_consumer(&server, 3).await;
    let fake = answering_config_once(server.monitor_url()).await;
    let flags = [
        "--sources",
        "varz,jsz",
        "--timeout",
        "6s",
        "--jsz-config-timeout",
        "1s",
    ];
    let exporter = common::exporter(std::slice::from_ref(&fake.url), &flags);
    let name = server.name.as_str();
    let first = seen(&exporter, name, &["first"]).await;
    let want = Seen {
        up: Some(1.0),
        read: Some(1.0),
        failures: Some(0.0),
        consumers: vec![(Some(3.0), Some(5.0))],
    };
    assert_eq!(first, want);
    st.create_consumer(consumer("late", 7)).await.unwrap();
    // Read beside the scrapes, again after each failure; every scrape
    // meanwhile has the counts.
    Wait::new("two failed reads", Duration::from_secs(120))
        .until_async(async || {
            let now = seen(&exporter, name, &["first", "late"]).await;
            let consumers = vec![(Some(3.0), Some(5.0)), (Some(3.0), None)];
            assert_eq!((now.up, now.read), (Some(1.0), Some(0.0)), "{now:?}");
            assert_eq!(now.consumers, consumers, "{now:?}");
            now.failures.filter(|f| *f >= 2.0).ok_or(now)
        })
        .await;
}

/// The periodic read of every account fails (`--jsz-config-interval 0s`:
/// due at every poll): the counts are served, fresh, with the
/// configuration kept.
#[tokio::test]
async fn a_failed_periodic_read_serves_the_counts_with_what_is_kept() {
    let server = NatsServer::builder().jetstream().start();
    let _st = stream_with_consumer(&server, 2).await;
    let fake = answering_config_once(server.monitor_url()).await;
    let flags = [
        "--sources",
        "varz,jsz",
        "--timeout",
        "6s",
        "--jsz-config-interval",
        "0s",
    ];
    let exporter = common::exporter(std::slice::from_ref(&fake.url), &flags);
    let name = server.name.as_str();
    let first = seen(&exporter, name, &["first"]).await;
    assert_eq!((first.read, first.failures), (Some(1.0), Some(0.0)));
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    common::publish_acked(&js, ["c".to_string()], "m").await;
    let want = Seen {
        up: Some(1.0),
        read: Some(0.0),
        failures: Some(1.0),
        consumers: vec![(Some(3.0), Some(5.0))],
    };
    assert_eq!(seen(&exporter, name, &["first"]).await, want);
}
