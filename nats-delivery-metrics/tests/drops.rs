//! Exact drop accounting against a real nats-server: published N, received by
//! the application R, dropped D, pending P, with D == N - R - P and the
//! crate's counter equal to D.

use nats_test_server::app as common;
use nats_test_server::sample;
use nats_test_server::wait::{Later, Wait};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use nats_delivery_metrics::{ClientMetrics, PendingLimits, SubscribeOptions, Subscription};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

const N: u64 = 5_000;

async fn connect(server: &NatsServer, metrics: &ClientMetrics, name: &str) -> async_nats::Client {
    metrics
        .connect_options(async_nats::ConnectOptions::new().name(name))
        .connect(server.client_url())
        .await
        .unwrap()
}

/// Waits until the forwarding task has accounted every published message.
async fn all_accounted(
    sub: &Subscription,
    n: u64,
    client: &async_nats::Client,
    server: &NatsServer,
) {
    Wait::secs(format!("all {n} accounted"), 20)
        .every(Duration::from_millis(10))
        .until(|| {
            let counts = (
                sub.delivered_messages(),
                sub.dropped_messages(),
                sub.pending_messages(),
            );
            if counts.0 + counts.1 + counts.2 == n {
                return Ok(());
            }
            Err(Later(move || {
                format!(
                    "delivered, dropped, pending {counts:?}; client read {}, server wrote {}",
                    client.statistics().in_messages.load(Ordering::SeqCst),
                    server_out_msgs(server, "subscriber")
                )
            }))
        })
        .await;
}

/// The application does not read while N messages arrive: exactly the first
/// `limit` fit, exactly N - limit are dropped and counted.
async fn paused_application(limits: PendingLimits, expected_admitted: u64) {
    eprintln!("case {limits:?}");
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("paused", &mut registry);
    let subscriber = connect(&server, &metrics, "subscriber").await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    let options = SubscribeOptions::new().name("work").pending_limits(limits);
    let mut sub = metrics
        .subscribe_with(&subscriber, "work.>", options)
        .await
        .unwrap();
    sync_with_server(&subscriber).await;

    publish_n(&publisher, "work.items", N).await;
    all_accounted(&sub, N, &subscriber, &server).await;
    // Ground truth from the server: it wrote all N to the subscriber, so
    // async-nats received all N and the forwarding task saw all N.
    assert_eq!(server_out_msgs(&server, "subscriber"), N);
    assert_eq!(sub.pending_messages(), expected_admitted);
    assert_eq!(sub.pending_bytes(), expected_admitted * PAYLOAD_LEN);
    assert_eq!(sub.dropped_messages(), N - expected_admitted);

    // The application now reads everything that was kept: the oldest ones.
    let mut received = Vec::new();
    while sub.pending_messages() > 0 {
        received.push(seq_of(&sub.next().await.unwrap().payload));
    }
    let r = received.len() as u64;
    assert_eq!(received, (0..expected_admitted).collect::<Vec<_>>());
    let d = N - r - sub.pending_messages();

    let text = exposition(&registry);
    let labels = [("client", "paused"), ("subscription", "work")];
    let value = |name| sample::exact(&text, name, &labels);
    assert_eq!(
        value("nats_delivery_client_dropped_messages_total"),
        Some(d as f64)
    );
    assert_eq!(
        value("nats_delivery_client_dropped_bytes_total"),
        Some((d * PAYLOAD_LEN) as f64)
    );
    assert_eq!(
        value("nats_delivery_client_delivered_messages_total"),
        Some(r as f64)
    );
    assert_eq!(value("nats_delivery_client_pending_messages"), Some(0.0));
    assert_eq!(value("nats_delivery_client_pending_bytes"), Some(0.0));
    assert_eq!(
        value("nats_delivery_client_pending_messages_high_water"),
        Some(expected_admitted as f64)
    );
    assert_eq!(
        value("nats_delivery_client_pending_messages_limit"),
        limits.message_limit().map(|v| v as f64)
    );
    assert_eq!(
        value("nats_delivery_client_pending_bytes_limit"),
        limits.byte_limit().map(|v| v as f64)
    );
    assert_eq!(
        value("nats_delivery_client_slow_consumer_events_total"),
        Some(0.0)
    );
    nats_test_server::reference::assert_documented(&text);
    assert_promtool_clean(&registry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_limits_drop_exactly_the_excess() {
    for limit in [1, 10, 100, 1_000, 4_999] {
        paused_application(PendingLimits::new(limit, u64::MAX), limit).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_limits_drop_exactly_the_excess() {
    // k whole messages fit; 500 spare bytes do not make room for one more.
    for k in [1, 7, 250, 3_000] {
        paused_application(PendingLimits::new(u64::MAX, k * PAYLOAD_LEN + 500), k).await;
    }
    // The smaller of the two limits decides.
    paused_application(PendingLimits::new(40, 100 * PAYLOAD_LEN), 40).await;
    paused_application(PendingLimits::new(400, 100 * PAYLOAD_LEN), 100).await;
}

/// A slow application processes while another client publishes; at the end
/// D == N - R exactly. A plain async-nats subscriber with the same buffer in
/// the same run shows how far slow-consumer events alone are off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_subscriber_counts_match_ground_truth_and_events_do_not() {
    const LIMIT: u64 = 100;
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("slow", &mut registry);
    let plain_metrics = ClientMetrics::new("plain", &mut registry);
    let subscriber = connect(&server, &metrics, "instrumented").await;
    let plain_client = plain_metrics
        .connect_options(async_nats::ConnectOptions::new().name("plain"))
        // Set after connect_options, which would otherwise size it.
        .subscription_capacity(LIMIT as usize)
        .connect(server.client_url())
        .await
        .unwrap();
    let publisher = async_nats::connect(server.client_url()).await.unwrap();

    let limits = PendingLimits::new(LIMIT, u64::MAX);
    let mut sub = metrics
        .subscribe_with(
            &subscriber,
            "work.>",
            SubscribeOptions::new().name("work").pending_limits(limits),
        )
        .await
        .unwrap();
    let mut plain = plain_client.subscribe("work.>").await.unwrap();
    plain_metrics
        .name_subscriber(&plain, "work")
        .expect("the sid of a real Subscriber is readable");
    sync_with_server(&subscriber).await;
    sync_with_server(&plain_client).await;
    // The sync reply is a message too; count only what follows it.
    let plain_stats = plain_client.statistics();
    let plain_baseline = plain_stats.in_messages.load(Ordering::SeqCst);

    // Both applications take 1 ms per message.
    let plain_received = Arc::new(AtomicU64::new(0));
    let plain_task = tokio::spawn({
        let plain_received = plain_received.clone();
        async move {
            while let Some(_m) = plain.next().await {
                plain_received.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    let publish = tokio::spawn({
        let publisher = publisher.clone();
        async move { publish_n(&publisher, "work.items", N).await }
    });
    let mut seen = std::collections::BTreeSet::new();
    while !(publish.is_finished()
        && sub.delivered_messages() + sub.dropped_messages() + sub.pending_messages() == N
        && sub.pending_messages() == 0)
    {
        match tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            Ok(Some(m)) => {
                assert!(seen.insert(seq_of(&m.payload)), "a message arrived twice");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(None) => panic!("subscription ended"),
            Err(_) => {}
        }
    }
    let r = seen.len() as u64;
    let p = sub.pending_messages();
    let d = N - r - p;
    assert_eq!(p, 0);
    assert!(
        d > 0,
        "the experiment must drop something (received {r} of {N})"
    );
    assert_eq!(sub.dropped_messages(), d);
    assert_eq!(server_out_msgs(&server, "instrumented"), N);

    // The plain subscriber: wait until the connection has read all N, then
    // until its buffer is empty; its ground truth is N - received.
    Wait::secs("plain client read all N", 20)
        .every(Duration::from_millis(10))
        .until(|| plain_stats.in_messages.load(Ordering::SeqCst) == plain_baseline + N)
        .await;
    let mut last = u64::MAX;
    Wait::secs("the plain subscriber's buffer to empty", 20)
        .every(Duration::from_millis(300))
        .until(|| {
            let received = plain_received.load(Ordering::SeqCst);
            let unchanged = received == last;
            last = received;
            unchanged.then_some(()).ok_or(received)
        })
        .await;
    plain_task.abort();
    let plain_dropped = N - plain_received.load(Ordering::SeqCst);

    let text = exposition(&registry);
    let exact = sample::exact(
        &text,
        "nats_delivery_client_dropped_messages_total",
        &[("client", "slow"), ("subscription", "work")],
    );
    assert_eq!(exact, Some(d as f64));
    let events = sample::exact(
        &text,
        "nats_delivery_client_slow_consumer_events_total",
        &[("client", "plain"), ("subscription", "work")],
    )
    .unwrap() as u64;
    eprintln!(
        "N={N} instrumented: received={r} dropped={d} counter={d}; plain async-nats: dropped={plain_dropped} slow-consumer events={events}"
    );
    assert!(
        events <= plain_dropped,
        "more events ({events}) than drops ({plain_dropped})"
    );
    // The plain subscriber is not instrumented: no exact counters for it.
    assert_eq!(
        sample::exact(
            &text,
            "nats_delivery_client_dropped_messages_total",
            &[("client", "plain"), ("subscription", "work")]
        ),
        None
    );
    nats_test_server::reference::assert_documented(&text);
}

/// Events of a subscriber the crate does not know land under
/// `subscription="unattributed"`: at least the first one (the event queue is
/// empty then), never more than the real drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_unknown_subscribers_are_unattributed() {
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("other", &mut registry);
    let client = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .subscription_capacity(10)
        .connect(server.client_url())
        .await
        .unwrap();
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    let mut plain = client.subscribe("work.>").await.unwrap();
    sync_with_server(&client).await;
    let baseline = client.statistics().in_messages.load(Ordering::SeqCst);
    publish_n(&publisher, "work.items", 1_000).await;
    let stats = client.statistics();
    Wait::secs("all 1,000 read", 20)
        .every(Duration::from_millis(10))
        .until(|| stats.in_messages.load(Ordering::SeqCst) == baseline + 1_000)
        .await;
    // async-nats kept exactly its capacity, 10, and dropped the rest.
    let mut kept = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), plain.next()).await {
        kept += 1;
    }
    assert_eq!(kept, 10);
    let labels = [("client", "other"), ("subscription", "unattributed")];
    let events = || {
        sample::exact(
            &exposition(&registry),
            "nats_delivery_client_slow_consumer_events_total",
            &labels,
        )
        .unwrap_or(0.0)
    };
    Wait::secs("the first slow-consumer event", 20)
        .every(Duration::from_millis(10))
        .until(|| events() >= 1.0)
        .await;
    assert!(events() <= 990.0);
}
