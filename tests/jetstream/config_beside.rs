//! After a jump in consumers the configuration of the new ones is read
//! beside the scrapes: every scrape meanwhile has `/jsz` and the count of
//! every consumer, and the configuration arrives when its read ends, even
//! one that takes longer than a scrape may. Scaled down: 40, then 1,000
//! consumers in one account. Over HTTP the server sits behind an endpoint
//! that holds back every configuration reply after the first until three
//! more polls without configuration came in: a read on the scrape path
//! gives up before (its scrape's own poll never comes while it waits), one
//! beside the scrapes gets it. Through the system account (no endpoint to
//! hold a reply there) the same jump, read beside the scrapes.
use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use common::fake_endpoint::{self, FakeEndpoint, Later, Reply};
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::{samples, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// Streams before the jump, and after it; consumers in each.
const STREAMS_BEFORE: usize = 2;
const STREAMS_AFTER: usize = 50;
const CONSUMERS_PER_STREAM: usize = 20;

/// Polls without configuration that come in while a configuration reply
/// is held back.
const POLLS_WHILE_HELD: usize = 3;

/// Forwards to `monitor_url`; a request for configuration after the first
/// is answered once `POLLS_WHILE_HELD` more `/jsz` requests without it
/// came in.
async fn holding_config_back(monitor_url: String) -> FakeEndpoint {
    let first = Arc::new(AtomicBool::new(true));
    let (plain, _) = tokio::sync::watch::channel(0usize);
    let plain = Arc::new(plain);
    fake_endpoint::start(move |path| {
        let url = format!("{monitor_url}{path}");
        if !path.contains("config=true") {
            if path.starts_with("/jsz") {
                plain.send_modify(|n| *n += 1);
            }
        } else if !first.swap(false, Ordering::SeqCst) {
            let mut seen = plain.subscribe();
            let asked_at = *seen.borrow();
            return Reply::After(Later::new(async move {
                let _ = seen.wait_for(|n| *n >= asked_at + POLLS_WHILE_HELD).await;
                tokio::task::spawn_blocking(move || nats_test_server::http_get(&url))
                    .await
                    .unwrap()
            }));
        }
        Reply::Fixed("200 OK", nats_test_server::http_get(&url))
    })
    .await
}

/// What a scrape says of `/jsz` on `server`: up, the consumers with a
/// pending count (the counts), those with their configuration, and the
/// failed configuration reads.
#[derive(Debug, PartialEq)]
struct Seen {
    up: Option<f64>,
    counted: usize,
    configured: usize,
    failures: Option<f64>,
}

async fn seen(exporter: &Exporter, server: &str) -> Seen {
    let text = common::scrape(exporter).await;
    let of_server = [("server", server)];
    let configured = samples(&text, "nats_delivery_consumer_max_ack_pending", &[])
        .iter()
        .filter(|(_, v)| *v == 7.0)
        .count();
    let pending = samples(&text, "nats_delivery_consumer_pending_messages", &[]);
    Seen {
        up: value(
            &text,
            "nats_delivery_up",
            &[("server", server), ("source", "jsz")],
        ),
        counted: pending.iter().filter(|(_, v)| *v == 1.0).count(),
        configured,
        failures: value(
            &text,
            "nats_delivery_jsz_config_read_failures_total",
            &of_server,
        ),
    }
}

/// Streams `streams`, each with its consumers (`max_ack_pending` 7) and
/// one message.
async fn make_streams(js: &jetstream::Context, streams: std::ops::Range<usize>) {
    let consumer = |name| pull::Config {
        durable_name: Some(name),
        max_ack_pending: 7,
        ..Default::default()
    };
    common::make_streams(js, streams, CONSUMERS_PER_STREAM, consumer, true).await;
}

/// The jump: every scrape until the new consumers' configuration arrives
/// has `/jsz` and every consumer's count; at least `held` of them came
/// before it arrived; none failed.
async fn jump(server: &NatsServer, js: &jetstream::Context, exporter: &Exporter, held: usize) {
    let name = server.name.as_str();
    make_streams(js, 0..STREAMS_BEFORE).await;
    let before = STREAMS_BEFORE * CONSUMERS_PER_STREAM;
    let all = STREAMS_AFTER * CONSUMERS_PER_STREAM;
    let seen_before = Seen {
        up: Some(1.0),
        counted: before,
        configured: before,
        failures: Some(0.0),
    };
    assert_eq!(seen(exporter, name).await, seen_before);
    make_streams(js, STREAMS_BEFORE..STREAMS_AFTER).await;
    let mut without = 0;
    Wait::new("the new consumers' configuration", Duration::from_secs(240))
        .every(Duration::from_millis(200))
        .until_async(async || {
            let now = seen(exporter, name).await;
            let counts = (now.up, now.counted, now.failures);
            assert_eq!(counts, (Some(1.0), all, Some(0.0)), "{now:?}");
            if now.configured == all {
                return Ok(());
            }
            // The consumers known before keep theirs.
            assert_eq!(now.configured, before, "{now:?}");
            without += 1;
            Err(now)
        })
        .await;
    assert!(
        without >= held,
        "{without} scrapes before the configuration"
    );
    let after = Seen {
        up: Some(1.0),
        counted: all,
        configured: all,
        failures: Some(0.0),
    };
    assert_eq!(seen(exporter, name).await, after);
}

#[tokio::test]
async fn a_slow_configuration_read_after_a_jump_never_holds_a_scrape() {
    let server = NatsServer::builder().jetstream().start();
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    let fake = holding_config_back(server.monitor_url()).await;
    // A long `--timeout`: only the held configuration reply may be late.
    let flags = [
        "--sources",
        "varz,jsz",
        "--timeout",
        "30s",
        "--jsz-config-timeout",
        "5m",
    ];
    let exporter = common::exporter(std::slice::from_ref(&fake.url), &flags);
    jump(&server, &js, &exporter, POLLS_WHILE_HELD).await;
}

#[tokio::test]
async fn the_configuration_after_a_jump_is_read_beside_the_scrapes_through_the_system_account() {
    let (server, app) = common::system_polling::server_and_app().await;
    let flags = ["--timeout", "30s"];
    let url = server.client_url();
    let exporter = common::system_polling::system_exporter_with(&url, "varz,jsz", &flags).await;
    jump(&server, &jetstream::new(app), &exporter, 0).await;
}
