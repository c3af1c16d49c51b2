//! The real binary in durable mode: stop the exporter (SIGTERM), let N
//! messages die, start it again: its counter goes on from the stored total
//! and adds exactly N.
use crate::advisories_support;

use std::time::{Duration, Instant};

use advisories_support::binary::Exporter;
use advisories_support::*;
use async_nats::jetstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_survive_an_exporter_restart_exactly() {
    let s = server();
    let labels = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";

    let exporter = tokio::task::block_in_place(|| Exporter::start(&s, &[]));
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let c = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    let_die(&js, &c, 0, 4, 4).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::task::block_in_place(|| exporter.value(name, &labels)) != Some(4.0) {
        assert!(Instant::now() < deadline, "first exporter did not count 4");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::task::block_in_place(|| exporter.stop());

    // Down: 25 messages die.
    let_die(&js, &c, 0, 25, 29).await;

    let exporter = tokio::task::block_in_place(|| Exporter::start(&s, &[]));
    let deadline = Instant::now() + Duration::from_secs(30);
    // It starts from the stored 4 and adds the 25.
    while tokio::task::block_in_place(|| exporter.value(name, &labels)) != Some(29.0) {
        assert!(
            Instant::now() < deadline,
            "restarted exporter did not count 4 + 25"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = tokio::task::block_in_place(|| exporter.scrape()).unwrap();
    assert_eq!(sample(&text, name, &labels), Some(29.0));
    assert_eq!(
        sample(
            &text,
            "nats_delivery_advisories_received_total",
            &[("account", "APP")]
        ),
        Some(29.0)
    );
    nats_test_server::reference::assert_documented(&text);
    tokio::task::block_in_place(|| exporter.stop());
}
