//! An `unsubscribe` given up part-way (a timeout around it) leaves the
//! subscription as it was: still subscribed, its stream going on, and the
//! call can be made again.

use nats_test_server::app as common;
use nats_test_server::wait::Wait;

use std::time::Duration;

use async_nats::connection::State;
use common::*;
use futures::StreamExt;
use nats_delivery_metrics::ClientMetrics;
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsubscribe_given_up_while_it_waits_leaves_the_subscription_working() {
    let mut server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("cancel", &mut registry);
    // A small command channel, so that it fills while the server is away.
    let client = metrics
        .connect_options(async_nats::ConnectOptions::new().client_capacity(8))
        .connect(server.client_url())
        .await
        .unwrap();
    let mut sub = metrics.subscribe(&client, "jobs").await.unwrap();
    sync_with_server(&client).await;

    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        server.kill_and_restart_after(|_| {
            handle.block_on(async {
                Wait::secs("the client to see the server gone", 20)
                    .every(Duration::from_millis(10))
                    .until(|| client.connection_state() != State::Connected)
                    .await;
                // While async-nats reconnects it reads no commands: publish
                // until one waits.
                let mut queued = 0;
                while timeout(
                    Duration::from_millis(200),
                    client.publish("other", "x".into()),
                )
                .await
                .is_ok()
                {
                    queued += 1;
                    assert!(queued < 1_000, "the command channel never filled");
                }
                let given_up = timeout(Duration::from_millis(300), sub.unsubscribe()).await;
                assert!(
                    given_up.is_err(),
                    "unsubscribe finished with a full command channel: {given_up:?}"
                );
            })
        })
    });

    Wait::secs("the client to reconnect", 20)
        .every(Duration::from_millis(10))
        .until(|| client.connection_state() == State::Connected)
        .await;
    sync_with_server(&client).await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    publish_n(&publisher, "jobs", 5).await;
    let mut got = Vec::new();
    for _ in 0..5 {
        let m = timeout(Duration::from_secs(10), sub.next())
            .await
            .expect("the stream stopped after the unsubscribe was given up")
            .expect("the stream ended");
        got.push(seq_of(&m.payload));
    }
    assert_eq!(got, (0..5).collect::<Vec<_>>());
    assert_eq!(sub.delivered_messages(), 5);
    // The call can be made again, and ends the stream this time.
    sub.unsubscribe().await.unwrap();
    let end = timeout(Duration::from_secs(10), sub.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}
