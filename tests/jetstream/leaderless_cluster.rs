//! Whose view of a replicated consumer counts, on a real 3-node cluster
//! with an R3 stream and an R3 consumer, 30 messages pending: with two of
//! three servers killed the survivor lists the consumer with no leader and
//! `num_pending` 0, and the exporter keeps writing the last leader's 30,
//! marked, scrape after scrape; a frozen leader resumed while another was
//! elected never has its stale claim taken.
use crate::common;

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

use common::system_polling::ACCOUNTS;

const PENDING: &str = "nats_delivery_consumer_pending_messages";
const MARK: &str = "nats_delivery_consumer_leaderless_seconds";
const LABELS: [(&str, &str); 3] = [("account", "APP"), ("stream", "HOLD"), ("consumer", "C")];

/// The `APP` user's JetStream on the servers at `urls`.
async fn app(urls: &[String]) -> jetstream::Context {
    let app = async_nats::ConnectOptions::with_user_and_password("app".into(), "app-secret".into())
        .connect(urls)
        .await
        .unwrap();
    jetstream::new(app)
}

/// An R3 stream HOLD with an R3 pull consumer C and 30 messages it has not
/// delivered.
async fn held_stream(js: &jetstream::Context) {
    let st = Wait::secs("a cluster ready for R3 streams", 30)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            (js.get_or_create_stream(stream::Config {
                name: "HOLD".into(),
                subjects: vec!["hold.>".into()],
                num_replicas: 3,
                ..Default::default()
            }))
            .await
            .ok()
        })
        .await;
    Wait::secs("an R3 consumer", 30)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            (st.create_consumer(pull::Config {
                durable_name: Some("C".into()),
                ack_wait: Duration::from_secs(300),
                num_replicas: 3,
                ..Default::default()
            }))
            .await
            .ok()
        })
        .await;
    common::publish_acked(js, (0..30).map(|i| format!("hold.{i}")), "m").await;
}

/// An exporter over HTTP polling `servers`, in their order.
fn exporter(servers: &[&NatsServer]) -> Exporter {
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    common::exporter(&urls, &["--sources", "varz,jsz", "--timeout", "2s"])
}

/// The server naming itself C's leader, among `servers`, once one does.
async fn consumer_leader(servers: &[&NatsServer]) -> String {
    Wait::secs("a leader of C", 30)
        .every(Duration::from_millis(200))
        .until(|| {
            servers.iter().find_map(|s| {
                let (leader, _) = leader_named(s)?;
                (leader == s.name).then_some(leader)
            })
        })
        .await
}

/// What each of `servers` says of C now: its cluster block and pending
/// count (for a failure's message).
fn views(servers: &[NatsServer]) -> String {
    let each = servers.iter().map(|s| {
        let jsz = common::monitor_json(
            &s.monitor_url(),
            "jsz?accounts=true&streams=true&consumers=true",
        );
        let accounts = jsz["account_details"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let streams = accounts
            .iter()
            .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default());
        let c = streams
            .flat_map(|s| s["consumer_detail"].as_array().cloned().unwrap_or_default())
            .find(|c| c["name"] == "C");
        let c = c.unwrap_or_default();
        format!(
            "  {}: cluster {}, pending {}\n",
            s.name, c["cluster"], c["num_pending"]
        )
    });
    each.collect()
}

/// The leader `server` names for C, and the pending count it gives.
fn leader_named(server: &NatsServer) -> Option<(String, u64)> {
    let jsz = common::monitor_json(
        &server.monitor_url(),
        "jsz?accounts=true&streams=true&consumers=true",
    );
    let accounts = jsz["account_details"].as_array()?;
    let streams = accounts
        .iter()
        .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten());
    let mut consumers = streams.flat_map(|s| s["consumer_detail"].as_array().into_iter().flatten());
    let c = consumers.find(|c| c["name"] == "C")?;
    Some((
        c["cluster"]["leader"].as_str()?.to_string(),
        c["num_pending"].as_u64()?,
    ))
}

/// Scrapes until C's pending count is `want` (unmarked: its leader's).
async fn led_at(e: &Exporter, want: f64) {
    Wait::secs(format!("C's leader at {want} pending"), 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let text = common::scrape(e).await;
            let mark = value(&text, MARK, &LABELS);
            if value(&text, PENDING, &LABELS) == Some(want) && mark.is_none() {
                return Ok(());
            }
            let lines = text
                .lines()
                .filter(|l| l.contains("HOLD") && !l.starts_with('#'));
            Err(lines.collect::<Vec<_>>().join("\n"))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_without_a_leader_keeps_its_last_leaders_figures_marked() {
    let servers = nats_test_server::cluster(3, ACCOUNTS);
    let urls: Vec<String> = servers.iter().map(|s| s.client_url()).collect();
    held_stream(&app(&urls).await).await;
    let http = exporter(&servers.iter().collect::<Vec<_>>());
    led_at(&http, 30.0).await;

    // Two of three killed: the survivor lists C with no leader and
    // `num_pending` 0 (after naming a dead leader for a moment).
    servers[1].signal("-KILL");
    servers[2].signal("-KILL");
    let mut marks = Vec::new();
    Wait::secs("C held and marked for 10 scrapes", 90)
        .every(Duration::from_millis(500))
        .until_async(async || {
            let text = common::scrape(&http).await;
            let pending = value(&text, PENDING, &LABELS);
            assert_eq!(pending, Some(30.0), "every scrape after the kill:\n{text}");
            // The stream too: from the survivor if it still leads it, else held.
            let stream = [("account", "APP"), ("stream", "HOLD")];
            let messages = value(&text, "nats_delivery_stream_messages", &stream);
            assert_eq!(messages, Some(30.0), "every scrape after the kill:\n{text}");
            if let Some(mark) = value(&text, MARK, &LABELS) {
                if marks.is_empty() {
                    nats_test_server::reference::assert_documented(&text);
                }
                marks.push(mark);
            }
            (marks.len() >= 10).then_some(())
        })
        .await;
    // Seconds since the last leader's figures: growing, within the bound.
    assert!(marks.windows(2).all(|w| w[0] <= w[1]), "{marks:?}");
    assert!(marks.iter().all(|m| (0.0..=120.0).contains(m)), "{marks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_resumed_never_has_its_stale_claim_taken() {
    let servers = nats_test_server::cluster(3, ACCOUNTS);
    let all: Vec<&NatsServer> = servers.iter().collect();
    let urls: Vec<String> = servers.iter().map(|s| s.client_url()).collect();
    held_stream(&app(&urls).await).await;
    // The exporter polls C's leader first: taking the first claim of a
    // poll would take its stale one.
    let old = consumer_leader(&all).await;
    let frozen = servers.iter().position(|s| s.name == old).unwrap();
    let others: Vec<&NatsServer> = all.iter().copied().filter(|s| s.name != old).collect();
    let first: Vec<&NatsServer> = [&servers[frozen]]
        .into_iter()
        .chain(others.clone())
        .collect();
    let http = exporter(&first);
    led_at(&http, 30.0).await;

    // C's leader frozen; the others elect one of them, which delivers 5.
    servers[frozen].signal("-STOP");
    let new = consumer_leader(&others).await;
    println!("C's leader {old} frozen, {new} elected");
    let to_others: Vec<String> = others.iter().map(|s| s.client_url()).collect();
    let js = app(&to_others).await;
    let c: jetstream::consumer::PullConsumer = Wait::secs("C from the others", 30)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            js.get_stream("HOLD")
                .await
                .ok()?
                .get_consumer("C")
                .await
                .ok()
        })
        .await;
    let mut taken = 0;
    Wait::secs("5 messages delivered", 30)
        .every(Duration::ZERO)
        .until_async(async || {
            let fetch = c
                .fetch()
                .max_messages(5 - taken)
                .expires(Duration::from_secs(1));
            let mut batch = fetch.messages().await.map_err(|e| e.to_string())?;
            while let Some(Ok(m)) = batch.next().await {
                m.double_ack().await.expect("an acknowledgement confirmed");
                taken += 1;
            }
            if taken == 5 {
                Ok(())
            } else {
                Err(format!("{taken} taken"))
            }
        })
        .await;
    led_at(&http, 25.0).await;

    // Resumed during a scrape, the old leader answers the request it held
    // before it hears of the new term: it claims C with its figures of
    // before (30 pending). Every scrape says 25.
    let resume = async {
        // Inside the 2 s the scrape waits for the frozen server.
        tokio::time::sleep(Duration::from_millis(500)).await;
        servers[frozen].signal("-CONT");
        let says = tokio::task::block_in_place(|| leader_named(&servers[frozen]));
        println!("{old} resumed names {says:?} C's leader");
    };
    let (text, ()) = tokio::join!(common::scrape(&http), resume);
    let now = || tokio::task::block_in_place(|| views(&servers));
    let pending = value(&text, PENDING, &LABELS);
    assert_eq!(pending, Some(25.0), "{text}\neach server now:\n{}", now());
    for _ in 0..20 {
        let text = common::scrape(&http).await;
        let pending = value(&text, PENDING, &LABELS);
        assert_eq!(pending, Some(25.0), "{text}\neach server now:\n{}", now());
    }
}
