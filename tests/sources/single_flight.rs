//! Scrapes that arrive together share one poll: with one source hanging,
//! 20 concurrent scrapes each get their answer within --timeout (plus
//! encoding), and each server is polled once per round, not once per scrape.
use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake_endpoint::{self, Reply};
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// How many times the server answered `path` over HTTP, from its own /varz.
fn served(server: &NatsServer, path: &str) -> u64 {
    let varz = common::monitor_json(&server.monitor_url(), "varz");
    varz["http_req_stats"][path].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_scrapes_share_one_poll() {
    let server = NatsServer::builder().jetstream().start();
    let hanging = fake_endpoint::start(|_| Reply::Hang).await;
    let timeout = Duration::from_secs(2);
    let exporter = Arc::new(common::exporter(
        &[server.monitor_url(), hanging.url.clone()],
        &["--timeout", "2s"],
    ));
    for round in 1..=2u64 {
        let started = Instant::now();
        let scrapes: Vec<_> = (0..20)
            .map(|_| {
                let exporter = exporter.clone();
                tokio::spawn(async move {
                    let begun = Instant::now();
                    let text = common::scrape(&exporter).await;
                    (begun.elapsed(), text)
                })
            })
            .collect();
        for scrape in scrapes {
            let (took, text) = scrape.await.unwrap();
            assert!(
                took <= timeout + Duration::from_secs(1),
                "round {round}: an answer took {took:?}"
            );
            let up = |s: &str| {
                value(
                    &text,
                    "nats_delivery_up",
                    &[("server", s), ("source", "jsz")],
                )
            };
            assert_eq!(up(&server.name), Some(1.0));
            assert_eq!(up(&hanging.authority), Some(0.0));
        }
        assert!(started.elapsed() <= timeout + Duration::from_secs(1));
        // varz, connz (the top list; the closed list waits behind it), jsz
        // and accstatz.
        assert_eq!(hanging.requests() as u64, 4 * round, "round {round}");
        assert_eq!(served(&server, "/jsz"), round, "round {round}");
    }
}

/// Two scrapers of an HA pair, with `--reuse-poll-for`: a scrape that comes
/// within that long after a completed poll is answered from it, so the
/// server builds one `/jsz` for both; a later one polls again. Without the
/// flag every scrape polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ha_pair_within_the_reuse_window_costs_one_poll() {
    let server = NatsServer::builder().jetstream().start();
    let url = [server.monitor_url()];
    // A window no pair of scrapes outlasts, however slow the machine.
    let reusing = common::exporter(&url, &["--reuse-poll-for", "1h"]);
    let first = common::scrape(&reusing).await;
    let second = common::scrape(&reusing).await;
    assert_eq!(served(&server, "/jsz"), 1);
    // The same poll: its own measured duration, to the digit.
    let took = |text: &str| {
        value(
            text,
            "nats_delivery_scrape_duration_seconds",
            &[("server", &server.name), ("source", "jsz")],
        )
    };
    assert!(took(&first).is_some());
    assert_eq!(took(&first), took(&second));
    // A scrape past the window polls again: with a 1 s window, every scrape
    // answered from the poll began before the window could have ended, and
    // the one that polled ended after it had.
    let window = Duration::from_secs(1);
    let short = common::exporter(&url, &["--reuse-poll-for", "1s"]);
    let asked = Instant::now();
    common::scrape(&short).await;
    let polled_by = Instant::now();
    assert_eq!(served(&server, "/jsz"), 2);
    let ended = Wait::secs("a scrape past the window to poll again", 20)
        .every(Duration::from_millis(100))
        .until_async(async || {
            let began = Instant::now();
            common::scrape(&short).await;
            let served = served(&server, "/jsz");
            if served == 3 {
                return Ok(Instant::now());
            }
            assert!(
                began < polled_by + window,
                "a scrape past the window reused"
            );
            Err(served)
        })
        .await;
    assert!(ended >= asked + window, "polled again within the window");
    // Without the flag each of the pair's scrapes polls.
    let plain = common::exporter(&url, &[]);
    common::scrape(&plain).await;
    common::scrape(&plain).await;
    assert_eq!(served(&server, "/jsz"), 5);
}
