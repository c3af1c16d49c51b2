//! /jsz across pages of accounts, and across the servers of a cluster where
//! every replica reports its own view: each stream and consumer exactly once,
//! with exact values.
use crate::common;

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use nats_test_server::sample::{samples, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

#[tokio::test]
async fn accounts_beyond_one_page_are_all_read() {
    let accounts: Vec<String> = (1..=5).map(|i| format!("A{i}")).collect();
    let mut conf = String::from("accounts {\n");
    for a in &accounts {
        conf.push_str(&format!(
            "  {a}: {{ jetstream: enabled, users: [{{user: u{a}, password: p}}] }}\n"
        ));
    }
    conf.push_str("}\n");
    let server = NatsServer::builder().jetstream().config(&conf).start();
    for (i, a) in accounts.iter().enumerate() {
        let client =
            async_nats::ConnectOptions::with_user_and_password(format!("u{a}"), "p".into())
                .connect(server.client_url())
                .await
                .unwrap();
        let js = jetstream::new(client);
        let st = js
            .create_stream(stream::Config {
                name: format!("S{a}"),
                subjects: vec![format!("{a}.>")],
                ..Default::default()
            })
            .await
            .unwrap();
        st.create_consumer(pull::Config {
            durable_name: Some("c".into()),
            ..Default::default()
        })
        .await
        .unwrap();
        common::publish_acked(&js, (0..=i).map(|_| format!("{a}.x")), "m").await;
    }
    // Pages of two accounts: three requests for five.
    let exporter = common::exporter(
        &[server.monitor_url()],
        &["--sources", "jsz", "--jsz-page-size", "2"],
    );
    // nats-server 2.9 pages over its accounts in a new order each time: a
    // few scrapes, so that overlapping pages are all but sure to show up.
    for _ in 0..3 {
        let text = common::scrape(&exporter).await;
        assert_eq!(
            value(&text, "nats_delivery_up", &[("source", "jsz")]),
            Some(1.0)
        );
        for (i, a) in accounts.iter().enumerate() {
            let c = [
                ("account", a.as_str()),
                ("stream", &format!("S{a}")),
                ("consumer", "c"),
            ];
            assert_eq!(
                value(&text, "nats_delivery_consumer_pending_messages", &c),
                Some(i as f64 + 1.0),
                "{a}"
            );
        }
        assert_eq!(
            samples(&text, "nats_delivery_consumer_pending_messages", &[]).len(),
            5
        );
    }
}

#[tokio::test]
async fn a_replicated_consumer_is_reported_once_from_its_leader() {
    let servers = nats_test_server::cluster(3, "");
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    deliver_five_ack_two(&servers[0]).await;
    let flags = [
        "--sources",
        "varz,jsz",
        "--consumer-opt-in-metrics",
        "nats_delivery_consumer_ack_floor_stream_sequence",
    ];
    let exporter = common::exporter(&urls, &flags);
    let c = [("account", "$G"), ("stream", "R3"), ("consumer", "c")];
    // Followers apply the leader's state a moment later; the leader's view is exact at once.
    let text = common::scrape(&exporter).await;
    for s in &servers {
        assert_eq!(
            value(
                &text,
                "nats_delivery_up",
                &[("server", &s.name), ("source", "jsz")]
            ),
            Some(1.0)
        );
    }
    assert_eq!(
        samples(&text, "nats_delivery_consumer_ack_pending_messages", &c).len(),
        1,
        "{text}"
    );
    assert_eq!(
        value(&text, "nats_delivery_consumer_ack_pending_messages", &c),
        Some(3.0)
    );
    assert_eq!(
        value(
            &text,
            "nats_delivery_consumer_ack_floor_stream_sequence",
            &c
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &text,
            "nats_delivery_consumer_delivered_stream_sequence",
            &c
        ),
        Some(5.0)
    );
    assert_eq!(
        samples(&text, "nats_delivery_stream_messages", &[("stream", "R3")]).len(),
        1
    );
    assert_eq!(
        value(&text, "nats_delivery_stream_messages", &[("stream", "R3")]),
        Some(5.0)
    );
}

/// An R3 stream of 5 messages and a consumer that delivered all 5 and had
/// 2 acknowledged.
async fn deliver_five_ack_two(server: &NatsServer) {
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    // The meta group needs a leader before streams can be created.
    let st = Wait::secs("a JetStream cluster ready for an R3 stream", 30)
        .every(Duration::from_millis(200))
        .until_async(|| {
            let js = js.clone();
            async move {
                js.get_or_create_stream(stream::Config {
                    name: "R3".into(),
                    subjects: vec!["r3.>".into()],
                    num_replicas: 3,
                    ..Default::default()
                })
                .await
                .ok()
            }
        })
        .await;
    let consumer = st
        .create_consumer(pull::Config {
            durable_name: Some("c".into()),
            ack_wait: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .unwrap();
    common::publish_acked(&js, (0..5).map(|i| format!("r3.{i}")), "m").await;
    // A fetch hands out what the consumer has at that moment: on a loaded
    // machine that was 1 of the 5 just stored, so fetch until all 5 came.
    let mut n = 0;
    Wait::secs("5 messages delivered", 30)
        .every(Duration::ZERO)
        .until_async(async || {
            if n >= 5 {
                return Ok(());
            }
            let mut batch = consumer
                .fetch()
                .max_messages(5 - n)
                .messages()
                .await
                .unwrap();
            while let Some(m) = batch.next().await {
                n += 1;
                if n <= 2 {
                    m.unwrap().double_ack().await.unwrap();
                }
            }
            Err(n)
        })
        .await;
    assert_eq!(n, 5);
}
