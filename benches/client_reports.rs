//! Cost of application reports in the exporter, in process (no server: the
//! listener only hands each message body to `ClientReports::record`):
//! time per report for kept instances, for instances summed under
//! `__overflow__`, and for reports rejected past both instance limits; the
//! memory each folded instance holds, from the process's resident set.
//!
//! `cargo bench --bench client_reports`; `BENCH_MAX_INSTANCES` (default
//! 256) sets the instance limit (16 times as many are folded),
//! `BENCH_REPORTS` the reports per measurement (default 200,000).

use std::time::{Duration, Instant};

use nats_delivery_exporter::{ClientReports, ReportLimits};
use serde_json::json;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A report as the link-in crate sends it: four subscriptions, one
/// consumer, two connection events.
fn body(instance: usize, sequence: u64) -> Vec<u8> {
    let subs: Vec<_> = (0..4)
        .map(|s| {
            json!({"subscription": format!("orders.{s}"), "delivered_messages": sequence * 100,
                "dropped_messages": sequence, "dropped_bytes": sequence * 64,
                "slow_consumer_events": 0, "pending_messages": 3, "pending_bytes": 192,
                "pending_messages_high_water": 40})
        })
        .collect();
    serde_json::to_vec(&json!({
        "version": 1, "client": "orders-service", "instance": format!("host-{instance:06}:4242"),
        "sequence": sequence, "timestamp_ms": 0, "subscriptions": subs,
        "connection_events": {"connected": 1, "disconnected": 0},
        "jetstream_consumers": [{"stream": "ORDERS", "consumer": "worker",
            "received_messages": sequence * 50, "redelivered_messages": 0,
            "acknowledgements": {"ack": sequence * 50}}],
    }))
    .unwrap()
}

/// Resident set of this process in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Records `bodies` round-robin until `n` reports; nanoseconds per report.
fn per_report(reports: &ClientReports, bodies: &[Vec<u8>], n: usize, ok: bool) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        let result = reports.record(Some("orders-service"), &bodies[i % bodies.len()]);
        assert_eq!(result.is_ok(), ok, "{result:?}");
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let max_instances = env_or("BENCH_MAX_INSTANCES", 256);
    let n = env_or("BENCH_REPORTS", 200_000);
    let limits = ReportLimits {
        max_instances,
        // One client's instances: the bench measures the instance limits.
        max_instances_per_client: usize::MAX,
        max_series: usize::MAX,
        ..ReportLimits::default()
    };
    let folded = limits.max_folded_instances();
    let reports = ClientReports::with_limits(Duration::from_secs(3_600), limits);

    let kept: Vec<_> = (0..max_instances).map(|i| body(i, 2)).collect();
    for b in &kept {
        reports.record(Some("orders-service"), b).unwrap();
    }
    let folded_bodies: Vec<_> = (max_instances..max_instances + folded)
        .map(|i| body(i, 1))
        .collect();
    let before = rss();
    for b in &folded_bodies {
        reports.record(Some("orders-service"), b).unwrap();
    }
    let after = rss();
    assert_eq!(reports.instances(), max_instances);
    assert_eq!(reports.folded_instances(), folded);
    let rejected: Vec<_> = (0..1_000)
        .map(|i| body(max_instances + folded + i, 1))
        .collect();
    let folded_again: Vec<_> = (max_instances..max_instances + folded)
        .map(|i| body(i, 2))
        .collect();

    println!("{max_instances} kept and {folded} folded instances, {n} reports per line");
    println!(
        "kept instance, update:      {:>8.0} ns/report",
        per_report(&reports, &kept, n, true)
    );
    println!(
        "folded instance, update:    {:>8.0} ns/report",
        per_report(&reports, &folded_again, n, true)
    );
    println!(
        "new instance past limits:   {:>8.0} ns/report (rejected)",
        per_report(&reports, &rejected, n, false)
    );
    println!(
        "resident memory per folded instance: {} bytes ({} KiB for {folded})",
        (after - before) / folded as u64,
        (after - before) / 1024
    );
}
