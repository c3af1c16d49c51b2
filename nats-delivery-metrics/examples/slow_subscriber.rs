//! The slow-subscriber experiment: a subscriber that needs 1 ms per message
//! while another client publishes 200,000 messages of 1,036 bytes (a 12-digit
//! sequence number and 1 KiB of padding), pending limits 65,536 messages and
//! 64 MiB. Prints the ground truth next to the metric, and next to what
//! slow-consumer events alone show for a plain async-nats subscriber in the
//! same run.
//!
//! ```text
//! cargo run --release -p nats-delivery-metrics --example slow_subscriber -- [messages] [seconds]
//! ```
//!
//! Starts its own nats-server (see `scripts/install-deps.sh`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nats_delivery_metrics::{ClientMetrics, PendingLimits, SubscribeOptions};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

fn payload(seq: u64) -> bytes::Bytes {
    let mut p = format!("{seq:012}").into_bytes();
    p.resize(12 + 1024, b'.');
    p.into()
}

fn sample(text: &str, prefix: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or(" (absent)")
        .trim()
        .to_string()
}

/// 1 ms of simulated work per message without blocking the runtime. Sleeps
/// are scheduled from a fixed start, so timer granularity cannot make the
/// application faster or slower than 1,000 messages per second on average.
struct Work {
    next: tokio::time::Instant,
}

impl Work {
    fn new() -> Self {
        Work {
            next: tokio::time::Instant::now(),
        }
    }

    async fn one_message(&mut self) {
        self.next += Duration::from_millis(1);
        tokio::time::sleep_until(self.next).await;
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(200_000, |a| a.parse().expect("messages"));
    let seconds: u64 = args.next().map_or(25, |a| a.parse().expect("seconds"));
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("slow-subscriber", &mut registry);
    let plain_metrics = ClientMetrics::new("plain-subscriber", &mut registry);

    let client = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let limits = PendingLimits::new(65_536, 64 * 1024 * 1024);
    let mut sub = metrics
        .subscribe_with(
            &client,
            "test",
            SubscribeOptions::new().pending_limits(limits),
        )
        .await
        .unwrap();
    // The same experiment without the crate: async-nats' own 65,536-message
    // buffer, drops visible only as SlowConsumer events.
    let plain_client = plain_metrics
        .connect_options(async_nats::ConnectOptions::new())
        .subscription_capacity(65_536)
        .connect(server.client_url())
        .await
        .unwrap();
    let mut plain = plain_client.subscribe("test").await.unwrap();
    plain_metrics
        .name_subscriber(&plain, "test")
        .expect("async-nats shows the sid in its Debug output");
    for c in [&client, &plain_client] {
        // A round trip, so the server has the subscription before publishing.
        let _ = c.request("sync", bytes::Bytes::new()).await;
    }
    let plain_baseline = plain_client.statistics().in_messages.load(Ordering::SeqCst);

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let plain_received = Arc::new(AtomicU64::new(0));
    // Set at the deadline: the plain subscriber then empties its buffer
    // without working, so that its drops can be known exactly.
    let hurry = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn({
        let plain_received = plain_received.clone();
        let hurry = hurry.clone();
        async move {
            let mut work = Work::new();
            while let Some(_m) = plain.next().await {
                plain_received.fetch_add(1, Ordering::SeqCst);
                if !hurry.load(Ordering::SeqCst) {
                    work.one_message().await;
                }
            }
        }
    });
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    let started = Instant::now();
    tokio::spawn(async move {
        for seq in 0..n {
            publisher.publish("test", payload(seq)).await.unwrap();
        }
        publisher.flush().await.unwrap();
        println!(
            "published {n} messages in {:.2} s",
            started.elapsed().as_secs_f64()
        );
    });

    // The seed's time limit: what is still pending then is neither received
    // nor dropped.
    let mut received = std::collections::HashSet::new();
    let mut work = Work::new();
    // `timeout_at` alone would not stop the loop: it returns a ready message
    // even after the deadline, so the deadline is checked first.
    while Instant::now() < deadline {
        let Ok(Some(m)) = tokio::time::timeout_at(deadline.into(), sub.next()).await else {
            break;
        };
        let seq: u64 = std::str::from_utf8(&m.payload[..12])
            .unwrap()
            .parse()
            .unwrap();
        received.insert(seq);
        work.one_message().await;
    }
    // The application stops reading at the deadline; let the rest of the
    // messages arrive (the subscription keeps accounting them) before counting.
    let accounted = || sub.delivered_messages() + sub.dropped_messages() + sub.pending_messages();
    let wait_until = Instant::now() + Duration::from_secs(60);
    while accounted() < n && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let arrived = accounted();
    let plain_stats = plain_client.statistics();
    let plain_read = || plain_stats.in_messages.load(Ordering::SeqCst) - plain_baseline;
    while plain_read() < n && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let plain_arrived = plain_read();
    let r = received.len() as u64;
    let p = sub.pending_messages();
    let plain_r = plain_received.load(Ordering::SeqCst);
    hurry.store(true, Ordering::SeqCst);
    let mut plain_total = u64::MAX;
    while plain_received.load(Ordering::SeqCst) != plain_total {
        plain_total = plain_received.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let text = {
        let mut t = String::new();
        prometheus_client::encoding::text::encode(&mut t, &registry).unwrap();
        t
    };
    println!(
        "after {seconds} s, subscriber taking 1 ms per message ({:.0} messages/s):",
        r as f64 / seconds as f64
    );
    println!("  published                   {n}");
    println!("  arrived at the client       {arrived}");
    println!("  received by the app         {r}");
    println!("  still pending               {p}");
    println!(
        "  dropped (ground truth)      {}   = arrived - received - pending",
        arrived - r - p
    );
    let metric = sample(
        &text,
        "nats_delivery_client_dropped_messages_total{client=\"slow-subscriber\",subscription=\"test\"}",
    );
    println!("  nats_delivery_client_dropped_messages_total  {metric}");
    println!(
        "  nats_delivery_client_pending_messages_high_water  {}",
        sample(&text, "nats_delivery_client_pending_messages_high_water{client=\"slow-subscriber\",subscription=\"test\"}")
    );
    println!("plain async-nats subscriber, same run (65,536 messages, no byte limit):");
    println!("  arrived at the client       {plain_arrived}");
    println!("  received by the app         {plain_r}");
    println!(
        "  still buffered              {}   (read after the deadline to count them)",
        plain_total - plain_r
    );
    println!(
        "  dropped (ground truth)      {}   = arrived - received - buffered",
        plain_arrived - plain_total
    );
    println!(
        "  SlowConsumer events seen    {}",
        sample(&text, "nats_delivery_client_slow_consumer_events_total{client=\"plain-subscriber\",subscription=\"test\"}")
    );
    // The example doubles as a check: the metric is the ground truth.
    assert_eq!(arrived, n, "not every published message reached the client");
    assert_eq!(
        metric,
        (arrived - r - p).to_string(),
        "metric differs from ground truth"
    );
}
