//! A jump in consumers between two polls never empties a scrape, and the
//! exporter does not stick: the account's configuration read after the
//! jump is learned stream by stream, never held beside the poll whole, so
//! a budget (`--max-kept-size`) that holds a first poll of the server as it
//! now is holds the poll after the jump too. (Once, the poll held both
//! copies, failed `too_large`, kept nothing, and the next poll did the
//! same, for good.) The read after the jump runs beside the scrapes and
//! fits what they leave of the budget, with a full `/jsz` fetch running
//! beside the exporter all the while: no configuration read fails
//! (before, it held the account parsed whole with its configuration, did
//! not fit, and fell to the scrape path). Scaled down: 3,000 consumers in
//! one account, and a budget half above the least a new exporter needs
//! for them (at this size the few streams the read holds as text at once
//! are as much again as what it learns); over HTTP and through the system
//! account.
use crate::common;

use std::future::Future;

use futures::StreamExt;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::{samples, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// Streams before the jump, and after it; consumers in each.
const STREAMS_BEFORE: usize = 2;
const STREAMS_AFTER: usize = 150;
const CONSUMERS_PER_STREAM: usize = 20;

/// Scrapes after the jump, every one with `/jsz`.
const SCRAPES_AFTER: usize = 4;

/// `--timeout`: only the budget may refuse a poll here, never a loaded
/// machine's slow reply.
const LONG_TIMEOUT: &str = "120s";

#[tokio::test]
async fn a_jump_in_consumers_never_empties_a_scrape() {
    let server = NatsServer::builder().jetstream().start();
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    let url = server.monitor_url();
    let exporter = |budget: usize| {
        let budget = budget.to_string();
        let url = url.clone();
        async move {
            common::exporter(
                &[url],
                &[
                    "--sources",
                    "varz,jsz",
                    "--max-kept-size",
                    &budget,
                    "--timeout",
                    LONG_TIMEOUT,
                ],
            )
        }
    };
    jump(&server, js, exporter, "$G").await;
}

#[tokio::test]
async fn a_jump_in_consumers_never_empties_a_scrape_through_the_system_account() {
    let (server, app) = common::system_polling::server_and_app().await;
    let client_url = server.client_url();
    let exporter = |budget: usize| {
        let budget = budget.to_string();
        let url = client_url.clone();
        async move {
            let flags = [
                "--max-kept-size",
                budget.as_str(),
                "--timeout",
                LONG_TIMEOUT,
            ];
            common::system_polling::system_exporter_with(&url, "varz,jsz", &flags).await
        }
    };
    jump(&server, jetstream::new(app), exporter, "APP").await;
}

/// Streams `streams`, each with its consumers (`max_ack_pending` 7).
async fn make_streams(js: &jetstream::Context, streams: std::ops::Range<usize>) {
    let consumer = |name| pull::Config {
        durable_name: Some(name),
        max_ack_pending: 7,
        ..Default::default()
    };
    common::make_streams(js, streams, CONSUMERS_PER_STREAM, consumer, false).await;
}

/// What a scrape says of `/jsz` on `server`: up, whether it read the
/// configuration, and how many consumers have theirs.
async fn jsz_seen(exporter: &Exporter, server: &str) -> (f64, Option<f64>, usize) {
    let (up, read, configured, _) = jsz_seen_failing(exporter, server).await;
    (up, read, configured)
}

/// [`jsz_seen`], and the configuration reads that failed so far.
async fn jsz_seen_failing(
    exporter: &Exporter,
    server: &str,
) -> (f64, Option<f64>, usize, Option<f64>) {
    let text = common::scrape(exporter).await;
    let failures = value(
        &text,
        "nats_delivery_jsz_config_read_failures_total",
        &[("server", server)],
    );
    let up = value(
        &text,
        "nats_delivery_up",
        &[("server", server), ("source", "jsz")],
    );
    let read = value(
        &text,
        "nats_delivery_jsz_config_read",
        &[("server", server)],
    );
    let configured = samples(&text, "nats_delivery_consumer_max_ack_pending", &[])
        .iter()
        .filter(|(_, v)| *v == 7.0)
        .count();
    (up.expect("jsz up"), read, configured, failures)
}

/// The least `--max-kept-size` (within 10%) with which a new exporter's
/// first scrape had `/jsz`: halved in ratio from 256 KiB (too little for
/// 3,000 consumers) to 64 MiB (enough), so six or seven exporters are
/// tried. Near the least, one budget may pass once and fail the next time:
/// what a parse holds at its peak depends on how the reply's arrival and
/// the parsers overlap. So the budget found is not tried again (the test
/// then gives half as much again).
async fn least_budget<F, E>(exporter: &F, server: &str) -> usize
where
    F: Fn(usize) -> E,
    E: Future<Output = Exporter>,
{
    let (mut fails, mut passes) = (256usize << 10, 64usize << 20);
    let (up, _, _) = jsz_seen(&exporter(fails).await, server).await;
    assert_eq!(
        up, 0.0,
        "{fails} bytes gave /jsz: the search starts too high"
    );
    let (up, _, _) = jsz_seen(&exporter(passes).await, server).await;
    assert_eq!(up, 1.0, "{passes} bytes gave no /jsz");
    while passes - fails > passes / 10 {
        let mid = ((fails as f64) * (passes as f64)).sqrt() as usize;
        let (up, _, _) = jsz_seen(&exporter(mid).await, server).await;
        if up == 1.0 {
            passes = mid;
        } else {
            fails = mid;
        }
    }
    passes
}

async fn jump<F, E>(server: &NatsServer, mut js: jetstream::Context, exporter: F, account: &str)
where
    F: Fn(usize) -> E,
    E: Future<Output = Exporter>,
{
    js.set_timeout(common::JETSTREAM_API_WAIT);
    let name = server.name.as_str();
    make_streams(&js, 0..STREAMS_AFTER).await;
    let all = STREAMS_AFTER * CONSUMERS_PER_STREAM;
    let budget = least_budget(&exporter, name).await * 3 / 2;
    futures::stream::iter(STREAMS_BEFORE..STREAMS_AFTER)
        .for_each_concurrent(8, |i| {
            let js = js.clone();
            async move {
                js.delete_stream(format!("S{i}")).await.unwrap();
            }
        })
        .await;
    let exporter = exporter(budget).await;
    let before = STREAMS_BEFORE * CONSUMERS_PER_STREAM;
    assert_eq!(jsz_seen(&exporter, name).await, (1.0, Some(1.0), before));
    assert_eq!(jsz_seen(&exporter, name).await, (1.0, Some(0.0), before));
    // A second scraper's full fetch, over and over, from the jump until
    // the new consumers' configuration is known.
    let beside = FullFetches::start(server.monitor_url());
    make_streams(&js, STREAMS_BEFORE..STREAMS_AFTER).await;
    // The account is read again with its configuration beside the
    // scrapes, each stream learned as it is parsed: that read fits what
    // the scrapes leave of the budget, and none fails.
    Wait::new("the new consumers' configuration", Duration::from_secs(240))
        .until_async(async || {
            let (up, _, configured, failed) = jsz_seen_failing(&exporter, name).await;
            assert_eq!((up, failed), (1.0, Some(0.0)), "{account}, budget {budget}");
            (configured == all).then_some(()).ok_or(configured)
        })
        .await;
    assert!(beside.stop() > 0, "no full fetch ended beside the scrapes");
    // Then it settles: a read the scrape path overtook may still be taken
    // in by the next poll, and none after that reads again.
    let mut read = Vec::new();
    for _ in 1..SCRAPES_AFTER {
        let (up, was_read, configured, failed) = jsz_seen_failing(&exporter, name).await;
        assert_eq!(
            (up, configured, failed),
            (1.0, all, Some(0.0)),
            "{account}, budget {budget}"
        );
        read.push(was_read);
    }
    assert_eq!(
        read[1..],
        [Some(0.0); SCRAPES_AFTER - 2],
        "{account}, budget {budget}"
    );
}

/// Full `/jsz` fetches (with the configuration), one after the other on a
/// thread of their own, as a second scraper or a peer exporter asks.
struct FullFetches {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl FullFetches {
    fn start(monitor_url: String) -> FullFetches {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let path = "jsz?accounts=true&streams=true&consumers=true&config=true";
        let thread = std::thread::spawn(move || {
            let mut done = 0;
            while !stopped.load(Ordering::Relaxed) {
                nats_test_server::http_get(&format!("{monitor_url}/{path}"));
                done += 1;
            }
            done
        });
        FullFetches {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the fetches; how many ended.
    fn stop(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap())
    }
}

impl Drop for FullFetches {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
