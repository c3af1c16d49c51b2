//! The exporter's receiving side of application reports, tried as a hostile
//! or careless publisher would against a real server: everything a report
//! can make the exporter hold is bounded, re-exported counters never go
//! backwards, duplicates are merged, expiry frees memory on its own
//! (the listener itself: client_report_listener.rs).

use std::time::Duration;

use nats_delivery_exporter::ReportLimits;
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::json;

use crate::client_reports_support;
use crate::common;

use client_reports_support::*;
use common::{assert_promtool_clean, exposition};

const LONG: Duration = Duration::from_secs(600);

/// The 474 KB report: two 202 KB names and 1,500 subscriptions. With the
/// default limits it is rejected unread; with a limit that lets it in, the
/// long names and the subscriptions past 32 are summed under __overflow__,
/// and the scrape stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_report_is_rejected_or_folded() {
    let server = NatsServer::builder().start();
    let mut subs: Vec<serde_json::Value> = (0..2)
        .map(|i| json!({"subscription": format!("{i}").repeat(202_400), "dropped_messages": 1}))
        .collect();
    subs.extend(
        (0..1_500).map(|i| json!({"subscription": format!("s{i:04}"), "dropped_messages": 1})),
    );
    let body = report("big", "pod-1", 1, json!(subs));
    assert!(
        body.len() > 470_000 && body.len() < 480_000,
        "{}",
        body.len()
    );

    let (registry, reports) = exporter(&server, SUBJECT, LONG).await;
    send(&server, [body.clone()]).await;
    Wait::secs("the report", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(1.0))
        .await;
    let text = exposition(&registry);
    assert_eq!(rejected(&text, "too_large"), Some(1.0));
    assert_eq!(reports.instances(), 0);
    assert!(text.len() < 10_000, "scrape of {} bytes", text.len());

    let limits = ReportLimits {
        max_report_bytes: 1 << 20,
        ..ReportLimits::default()
    };
    let (registry, _) = exporter_with(&server, "bounds.big", LONG, limits).await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    publisher
        .publish(on("bounds.big", &body), body)
        .await
        .unwrap();
    publisher.flush().await.unwrap();
    Wait::secs("the report", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(1.0))
        .await;
    let text = exposition(&registry);
    assert_eq!(folded(&text, "label"), Some(2.0));
    // s0000..s0031 kept, s0032..s1499 folded: 1,468 entries.
    assert_eq!(folded(&text, "subscription"), Some(1_468.0));
    assert_eq!(dropped(&text, "big", "pod-1", "s0031"), Some(1.0));
    assert_eq!(dropped(&text, "big", "pod-1", "s0032"), None);
    assert_eq!(
        dropped(&text, "big", "pod-1", "__overflow__"),
        Some(1_470.0)
    );
    assert_eq!(
        count_samples(&text, "nats_delivery_app_dropped_messages_total"),
        33
    );
    assert!(text.len() < 20_000, "scrape of {} bytes", text.len());
    assert_promtool_clean(&registry);
}

/// 30 reports whose names are 1 MB each: all rejected, nothing kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_with_megabyte_names_are_rejected() {
    let server = NatsServer::builder().start();
    let (registry, reports) = exporter(&server, SUBJECT, LONG).await;
    let bodies = (0..30).map(|i| report(&format!("{i:02}").repeat(500_000), "pod", 1, json!([])));
    send(&server, bodies).await;
    Wait::secs("30 reports", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(30.0))
        .await;
    let text = exposition(&registry);
    assert_eq!(rejected(&text, "too_large"), Some(30.0));
    assert_eq!(reports.instances(), 0);
    assert!(text.len() < 10_000, "scrape of {} bytes", text.len());

    // Under the size limit, an over-long client name is rejected too.
    send(&server, [report(&"c".repeat(129), "pod", 1, json!([]))]).await;
    Wait::secs("31 reports", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(31.0))
        .await;
    assert_eq!(
        rejected(&exposition(&registry), "label_too_long"),
        Some(1.0)
    );
    assert_eq!(reports.instances(), 0);
}

/// 10,000 instances: 256 kept under their own labels, the next 4,096
/// (16 x 256) summed under __overflow__, the rest rejected and counted
/// (exact sums of what was folded: client_report_overflow.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_capped() {
    let server = NatsServer::builder().start();
    // One client's instances, past the cap of one client's (32): the caps
    // of all instances are the ones under test.
    let limits = ReportLimits {
        max_instances_per_client: usize::MAX,
        ..ReportLimits::default()
    };
    let (registry, reports) = exporter_with(&server, SUBJECT, LONG, limits).await;
    let sub = json!([{"subscription": "orders", "dropped_messages": 5}]);
    send(
        &server,
        (0..5_000).map(|i| report("app", &format!("pod-{i}"), 1, sub.clone())),
    )
    .await;
    // Each look encodes every instance under the lock the listener takes
    // for each report: looked at rarely, so that looking does not starve it.
    // 5,000 is past both caps (256 kept, 4,096 folded); a loaded machine
    // takes minutes over them in a debug build.
    Wait::secs("5,000 reports", 240)
        .every(Duration::from_millis(500))
        .until(|| received(&exposition(&registry)) == Some(5_000.0))
        .await;
    let text = exposition(&registry);
    assert_eq!(reports.instances(), 256);
    assert_eq!(reports.folded_instances(), 4_096);
    assert_eq!(rejected(&text, "too_many_instances"), Some(648.0));
    assert_eq!(
        exact(&text, "nats_delivery_app_reports_folded_total", &[]),
        Some(4_096.0)
    );
    assert_eq!(
        dropped(&text, "__overflow__", "__overflow__", "__overflow__"),
        Some(4_096.0 * 5.0)
    );
    assert_eq!(dropped(&text, "app", "pod-255", "orders"), Some(5.0));
    assert_eq!(dropped(&text, "app", "pod-256", "orders"), None);
    assert_eq!(
        count_samples(&text, "nats_delivery_app_dropped_messages_total"),
        257
    );
    assert_eq!(
        exact(&text, "nats_delivery_app_report_instances", &[]),
        Some(256.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_app_report_folded_instances", &[]),
        Some(4_096.0)
    );
    assert_eq!(
        exact(
            &text,
            "nats_delivery_app_report_folded_instances_limit",
            &[]
        ),
        Some(4_096.0)
    );
    // 74 KB for the 256 kept instances; the 4,096 folded ones add one set
    // of series, not 4,096.
    assert!(text.len() < 100_000, "scrape of {} bytes", text.len());
    // A kept instance still reports.
    let sub = json!([{"subscription": "orders", "dropped_messages": 7}]);
    send(&server, [report("app", "pod-0", 2, sub)]).await;
    Wait::secs("the update", 20)
        .every(Duration::from_millis(10))
        .until(|| dropped(&exposition(&registry), "app", "pod-0", "orders") == Some(7.0))
        .await;
}

/// Totals 100, then 50 (a restart), then 100: the series reads 100, 150, 200,
/// so `increase()` is the 200 drops that happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_stay_monotonic_across_a_restart() {
    let server = NatsServer::builder().start();
    let (registry, _) = exporter(&server, SUBJECT, LONG).await;
    let mut seen = Vec::new();
    for (n, (sequence, total)) in [(7, 100), (1, 50), (2, 100)].into_iter().enumerate() {
        let sub = json!([{"subscription": "orders", "dropped_messages": total}]);
        send(&server, [report("app", "pod-1", sequence, sub)]).await;
        let want = (n + 1) as f64;
        Wait::secs("the report", 20)
            .every(Duration::from_millis(10))
            .until(|| received(&exposition(&registry)) == Some(want))
            .await;
        seen.push(dropped(&exposition(&registry), "app", "pod-1", "orders").unwrap());
    }
    assert_eq!(seen, [100.0, 150.0, 200.0]);
    let l = [("client", "app"), ("instance", "pod-1")];
    let text = exposition(&registry);
    assert_eq!(
        exact(&text, "nats_delivery_app_instance_restarts_total", &l),
        Some(1.0)
    );

    // A restart seen only in the sequence (the new process already counted
    // more than the old one had): its whole total is added.
    let sub = json!([{"subscription": "orders", "dropped_messages": 300}]);
    send(&server, [report("app", "pod-1", 1, sub)]).await;
    Wait::secs("the report", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(4.0))
        .await;
    assert_eq!(
        dropped(&exposition(&registry), "app", "pod-1", "orders"),
        Some(500.0)
    );
}

/// A subscription named twice in one report becomes one series with the sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_names_are_merged() {
    let server = NatsServer::builder().start();
    let (registry, _) = exporter(&server, SUBJECT, LONG).await;
    let subs = json!([
        {"subscription": "orders", "dropped_messages": 3, "pending_messages": 1, "pending_messages_high_water": 9},
        {"subscription": "orders", "dropped_messages": 4, "pending_messages": 2, "pending_messages_high_water": 5},
    ]);
    send(&server, [report("app", "pod-1", 1, subs)]).await;
    Wait::secs("the report", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(1.0))
        .await;
    let text = exposition(&registry);
    assert_eq!(
        count_samples(&text, "nats_delivery_app_dropped_messages_total"),
        1
    );
    assert_eq!(dropped(&text, "app", "pod-1", "orders"), Some(7.0));
    let l = [
        ("client", "app"),
        ("instance", "pod-1"),
        ("subscription", "orders"),
    ];
    assert_eq!(
        exact(&text, "nats_delivery_app_pending_messages", &l),
        Some(3.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_app_pending_messages_high_water", &l),
        Some(9.0)
    );
    assert_eq!(folded(&text, "duplicate"), Some(1.0));
    assert_promtool_clean(&registry);
}

/// A silent instance is removed by the expiry timer, without another report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_frees_memory_without_another_report() {
    let server = NatsServer::builder().start();
    let (registry, reports) = exporter(&server, SUBJECT, Duration::from_secs(2)).await;
    send(
        &server,
        [report(
            "app",
            "pod-1",
            1,
            json!([{"subscription": "a", "dropped_messages": 1}]),
        )],
    )
    .await;
    Wait::secs("the report", 20)
        .every(Duration::from_millis(10))
        .until(|| reports.instances() == 1)
        .await;
    // Nobody scrapes or reports: only the timer can remove it.
    Wait::secs("the expiry", 20)
        .every(Duration::from_millis(10))
        .until(|| reports.instances() == 0)
        .await;
    assert_eq!(received(&exposition(&registry)), Some(1.0));
}
