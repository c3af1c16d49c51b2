//! Connection events, unsubscribing without losing count, and the JetStream
//! helpers, against real servers with exact numbers.

use nats_test_server::app as common;
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use common::*;
use futures::StreamExt;
use nats_delivery_metrics::{
    Acknowledgement, ClientMetrics, PendingLimits, SubscribeOptions, Subscription,
};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_events_are_counted_and_the_app_callback_still_runs() {
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("events", &mut registry);
    let app_seen = Arc::new(AtomicU64::new(0));
    let options = metrics.connect_options_with_callback(async_nats::ConnectOptions::new(), {
        let app_seen = app_seen.clone();
        move |event| {
            let app_seen = app_seen.clone();
            async move {
                if event == async_nats::Event::Connected {
                    app_seen.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    });
    let _client = options.connect(server.client_url()).await.unwrap();
    let event = |registry: &Registry, e| {
        let l = [("client", "events"), ("event", e)];
        exact(
            &exposition(registry),
            "nats_delivery_client_connection_events_total",
            &l,
        )
    };
    Wait::secs("connected event", 20)
        .every(Duration::from_millis(10))
        .until(|| event(&registry, "connected") == Some(1.0))
        .await;
    Wait::secs("the application's own callback", 20)
        .every(Duration::from_millis(10))
        .until(|| app_seen.load(Ordering::SeqCst) == 1)
        .await;
    assert_eq!(event(&registry, "disconnected"), Some(0.0));
    drop(server);
    Wait::secs("disconnected event", 20)
        .every(Duration::from_millis(10))
        .until(|| event(&registry, "disconnected") == Some(1.0))
        .await;
    assert_eq!(event(&registry, "connected"), Some(1.0));
    assert_eq!(event(&registry, "lame_duck"), Some(0.0));
    nats_test_server::reference::assert_documented(&exposition(&registry));
}

/// The pid of the nats-server started with `server`'s configuration file.
fn server_pid(server: &NatsServer) -> String {
    let conf = server.dir().join("server.conf");
    let conf = conf.to_string_lossy();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&*conf))
                .unwrap_or(false)
        })
        .expect("the nats-server process")
        .file_name()
        .to_string_lossy()
        .into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lame_duck_mode_is_counted() {
    let server = NatsServer::builder()
        .config("lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"10s\"")
        .start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("ldm", &mut registry);
    let _client = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let event = |registry: &Registry, e| {
        let l = [("client", "ldm"), ("event", e)];
        exact(
            &exposition(registry),
            "nats_delivery_client_connection_events_total",
            &l,
        )
    };
    Wait::secs("connected event", 20)
        .every(Duration::from_millis(10))
        .until(|| event(&registry, "connected") == Some(1.0))
        .await;
    assert_eq!(event(&registry, "lame_duck"), Some(0.0));
    // SIGUSR2 puts nats-server into lame duck mode; it tells its clients.
    // `kill` as the shell builtin: no procps needed.
    let status = std::process::Command::new("sh")
        .args(["-c", &format!("kill -USR2 {}", server_pid(&server))])
        .status()
        .unwrap();
    assert!(status.success());
    Wait::secs("lame duck event", 20)
        .every(Duration::from_millis(10))
        .until(|| event(&registry, "lame_duck") == Some(1.0))
        .await;
}

/// A subscription to `jobs` that holds `limit` messages, after `published`
/// were sent to it: the rest dropped, every one accounted for.
struct Overflowed {
    _server: NatsServer,
    registry: Registry,
    client: async_nats::Client,
    publisher: async_nats::Client,
    sub: Subscription,
}

async fn overflowed(name: &str, limit: u64, published: u64) -> Overflowed {
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new(name, &mut registry);
    let client = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    let options = SubscribeOptions::new().pending_limits(PendingLimits::new(limit, u64::MAX));
    let sub = metrics
        .subscribe_with(&client, "jobs", options)
        .await
        .unwrap();
    sync_with_server(&client).await;
    publish_n(&publisher, "jobs", published).await;
    Wait::secs("every message accounted", 20)
        .every(Duration::from_millis(10))
        .until(|| sub.dropped_messages() + sub.pending_messages() == published)
        .await;
    Overflowed {
        _server: server,
        registry,
        client,
        publisher,
        sub,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_keeps_what_was_received_and_counts_the_rest() {
    let Overflowed {
        _server,
        registry,
        client,
        publisher,
        mut sub,
    } = overflowed("unsub", 10, 100).await;
    sub.unsubscribe().await.unwrap();
    let mut got = Vec::new();
    while let Some(m) = sub.next().await {
        got.push(seq_of(&m.payload));
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    // The server no longer sends: nothing more arrives or is counted.
    sync_with_server(&client).await;
    publish_n(&publisher, "jobs", 5).await;
    sync_with_server(&client).await;
    assert_eq!(sub.dropped_messages(), 90);
    assert_eq!(sub.delivered_messages(), 10);
    drop(sub);
    // Counters of an ended subscription stay; its gauges go.
    let text = exposition(&registry);
    let l = [("client", "unsub"), ("subscription", "jobs")];
    assert_eq!(
        exact(&text, "nats_delivery_client_dropped_messages_total", &l),
        Some(90.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_client_delivered_messages_total", &l),
        Some(10.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_client_pending_messages", &l),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_delivers_what_fits_and_counts_the_rest() {
    // Bound whole: the server and connections must outlive the drain.
    let mut overflowed = overflowed("drain", 5, 20).await;
    let sub = &mut overflowed.sub;
    sub.drain().await.unwrap();
    let mut got = Vec::new();
    while let Some(m) = sub.next().await {
        got.push(seq_of(&m.payload));
    }
    assert_eq!(got, (0..5).collect::<Vec<_>>());
    assert_eq!((sub.delivered_messages(), sub.dropped_messages()), (5, 15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_redeliveries_and_acknowledgements_are_counted() {
    let server = NatsServer::builder().jetstream().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("worker", &mut registry);
    let client = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let js = jetstream::new(client.clone());
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("billing".into()),
            ack_wait: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..5 {
        js.publish("orders.new", format!("{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let counters = metrics.jetstream_consumer("ORDERS", "billing");
    assert!(counters.check_pull_batch(100, 65_536));
    let fetch = |n| {
        consumer
            .batch()
            .max_messages(n)
            .expires(Duration::from_secs(5))
            .messages()
    };
    let mut first = fetch(5).await.unwrap();
    for i in 0..5 {
        let m = first.next().await.unwrap().unwrap();
        assert!(!counters.received(&m), "first delivery");
        let ack = if i < 3 {
            Acknowledgement::Ack
        } else {
            Acknowledgement::Nak(None)
        };
        if i == 0 {
            counters
                .acknowledge(&m, Acknowledgement::InProgress)
                .await
                .unwrap();
        }
        counters.acknowledge(&m, ack).await.unwrap();
    }
    let mut second = fetch(2).await.unwrap();
    for i in 0..2 {
        let m = second.next().await.unwrap().unwrap();
        assert!(
            counters.received(&m),
            "a NAKed message comes back as a redelivery"
        );
        let ack = if i == 0 {
            Acknowledgement::Term
        } else {
            Acknowledgement::Ack
        };
        counters.acknowledge(&m, ack).await.unwrap();
    }
    // 50,000 in a batch cannot be buffered safely by 65,536 slots.
    assert!(!counters.check_pull_batch(50_000, 65_536));

    let text = exposition(&registry);
    let l = [
        ("client", "worker"),
        ("stream", "ORDERS"),
        ("consumer", "billing"),
    ];
    let v = |name| exact(&text, name, &l);
    assert_eq!(
        v("nats_delivery_client_jetstream_received_messages_total"),
        Some(7.0)
    );
    assert_eq!(
        v("nats_delivery_client_jetstream_redelivered_messages_total"),
        Some(2.0)
    );
    assert_eq!(
        v("nats_delivery_client_jetstream_acknowledgement_errors_total"),
        Some(0.0)
    );
    assert_eq!(
        v("nats_delivery_client_jetstream_pull_batch_ratio"),
        Some(50_000.0 / 65_536.0)
    );
    for (kind, n) in [
        ("ack", 4.0),
        ("nak", 2.0),
        ("term", 1.0),
        ("in_progress", 1.0),
    ] {
        let l = [l[0], l[1], l[2], ("kind", kind)];
        assert_eq!(
            exact(
                &text,
                "nats_delivery_client_jetstream_acknowledgements_total",
                &l
            ),
            Some(n),
            "{kind}"
        );
    }
    // The same numbers without parsing the exposition.
    use Acknowledgement::*;
    let by_kind = [Ack, Nak(None), Term, InProgress].map(|k| counters.acknowledgements(k));
    assert_eq!(by_kind, [4, 2, 1, 1]);
    assert_eq!(
        (
            counters.received_messages(),
            counters.redelivered_messages()
        ),
        (7, 2)
    );
    assert_eq!(counters.acknowledgement_errors(), 0);
    nats_test_server::reference::assert_documented(&text);
    assert_promtool_clean(&registry);
    // The server agrees: nothing is left pending or unacknowledged.
    let info = js
        .get_consumer_from_stream::<jetstream::consumer::pull::Config, _, _>("billing", "ORDERS")
        .await;
    let mut info = info.unwrap();
    let info = info.info().await.unwrap();
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(info.num_pending, 0);
}

/// Two queue-group members under one name: each message goes to one of
/// them, and the series of that name add both up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_group_members_sharing_a_name_add_up() {
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("workers", &mut registry);
    let client = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    let options = SubscribeOptions::new()
        .name("jobs")
        .queue_group("q")
        .pending_limits(PendingLimits::new(1_000, u64::MAX));
    let a = metrics
        .subscribe_with(&client, "jobs.*", options.clone())
        .await
        .unwrap();
    let mut b = metrics
        .subscribe_with(&client, "jobs.*", options)
        .await
        .unwrap();
    sync_with_server(&client).await;
    publish_n(&publisher, "jobs.new", 100).await;
    Wait::secs("100 pending in total", 20)
        .every(Duration::from_millis(10))
        .until(|| a.pending_messages() + b.pending_messages() == 100)
        .await;
    let from_b = b.pending_messages();
    for _ in 0..from_b {
        b.next().await.unwrap();
    }
    let text = exposition(&registry);
    let l = [("client", "workers"), ("subscription", "jobs")];
    let v = |name| exact(&text, name, &l);
    assert_eq!(
        v("nats_delivery_client_pending_messages"),
        Some((100 - from_b) as f64)
    );
    assert_eq!(
        v("nats_delivery_client_delivered_messages_total"),
        Some(from_b as f64)
    );
    assert_eq!(v("nats_delivery_client_dropped_messages_total"), Some(0.0));
    assert_eq!(
        v("nats_delivery_client_pending_messages_limit"),
        Some(2_000.0)
    );
    // When one member ends, its counters stay in the name's totals.
    drop(b);
    let text = exposition(&registry);
    let v = |name| exact(&text, name, &l);
    assert_eq!(
        v("nats_delivery_client_delivered_messages_total"),
        Some(from_b as f64)
    );
    assert_eq!(
        v("nats_delivery_client_pending_messages_limit"),
        Some(1_000.0)
    );
}
