//! The real binary in durable mode: stop the exporter (SIGTERM), let N
//! messages die, start it again: its counter goes on from the stored total
//! and adds exactly N.
use crate::advisories_support;

use std::time::Duration;

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
    Wait::secs("the first exporter to count 4", 20)
        .every(Duration::from_millis(100))
        .until(|| {
            let got = tokio::task::block_in_place(|| exporter.value(name, &labels));
            (got == Some(4.0)).then_some(()).ok_or(got)
        })
        .await;
    tokio::task::block_in_place(|| exporter.stop());

    // Down: 25 messages die.
    let_die(&js, &c, 0, 25, 29).await;

    let exporter = tokio::task::block_in_place(|| Exporter::start(&s, &[]));
    // It starts from the stored 4 and adds the 25.
    Wait::secs("the restarted exporter to count 4 + 25", 30)
        .every(Duration::from_millis(100))
        .until(|| {
            let got = tokio::task::block_in_place(|| exporter.value(name, &labels));
            (got == Some(29.0)).then_some(()).ok_or(got)
        })
        .await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = tokio::task::block_in_place(|| exporter.scrape()).unwrap();
    assert_eq!(exact(&text, name, &labels), Some(29.0));
    assert_eq!(
        exact(
            &text,
            "nats_delivery_advisories_received_total",
            &[("account", "APP")]
        ),
        Some(29.0)
    );
    nats_test_server::reference::assert_documented(&text);
    tokio::task::block_in_place(|| exporter.stop());
}
