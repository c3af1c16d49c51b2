//! A client that stops reading while another publishes: the server cuts it
//! when its pending bytes pass `max_pending`. The exporter shows it coming
//! (pending bytes and ratio) and names it once cut.
use crate::common;

use std::time::Duration;

use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

use common::scenarios::{closed_reason, publish_until_cut, stuck_reader, varz_slow_consumers};

/// A scrape during which the server's slow-consumer total did not move, and that total.
async fn scrape_matching_varz(
    exporter: &nats_delivery_exporter::Exporter,
    server: &NatsServer,
) -> (String, u64) {
    for _ in 0..20 {
        let before = varz_slow_consumers(server);
        let text = common::scrape(exporter).await;
        if varz_slow_consumers(server) == before {
            return (text, before);
        }
    }
    panic!("the server's slow-consumer total kept moving");
}

async fn cut_scenario(version: &str) {
    let server = NatsServer::builder()
        .version(version)
        .max_pending(512 * 1024)
        .config("max_payload: 65536")
        .start();
    let exporter = common::exporter(&[server.monitor_url()], &["--sources", "varz,connz"]);
    let before = common::scrape(&exporter).await;
    assert_eq!(
        value(&before, "nats_delivery_server_slow_consumers_total", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &before,
            "nats_delivery_slow_consumer_closed_connections_total",
            &[]
        ),
        None
    );

    let _stuck = stuck_reader(server.client_port, "stuck-reader", "cut.test").await;
    let publisher = async_nats::ConnectOptions::new()
        .name("publisher")
        .connect(server.client_url())
        .await
        .unwrap();
    publish_until_cut(&server, &publisher, "cut.test").await;
    // The server counts detections, not connections: one cut connection can
    // be detected twice (pending bytes, then the write deadline). The
    // exporter must repeat the server's count exactly, and name one connection.
    // The server counts the detection before it has closed the connection:
    // the scrape that must name it comes once the server lists it closed.
    closed_reason(&server, "stuck-reader").await;
    let (after, detections) = scrape_matching_varz(&exporter, &server).await;
    check_detections(&after, detections, version);
    check_the_cut_connection(&after, &server).await;

    // The publisher's own clean disconnect is not a slow consumer, and a
    // second poll counts nothing twice.
    drop(publisher);
    assert_eq!(closed_reason(&server, "publisher").await, "Client Closed");
    let (again, detections) = scrape_matching_varz(&exporter, &server).await;
    assert_eq!(
        value(
            &again,
            "nats_delivery_slow_consumer_closed_connections_total",
            &[]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&again, "nats_delivery_server_slow_consumers_total", &[]),
        Some(detections as f64)
    );
    nats_test_server::reference::assert_documented(&again);
}

/// The server's slow-consumer detections, in total and by kind.
fn check_detections(after: &str, detections: u64, version: &str) {
    assert!(detections >= 1);
    assert_eq!(
        value(after, "nats_delivery_server_slow_consumers_total", &[]),
        Some(detections as f64)
    );
    let by_kind = |kind| {
        value(
            after,
            "nats_delivery_server_slow_consumers_by_kind_total",
            &[("kind", kind)],
        )
    };
    if version == "debian" {
        // 2.9 has no slow_consumer_stats: absent, never 0.
        assert_eq!(by_kind("client"), None);
    } else {
        assert_eq!(by_kind("client"), Some(detections as f64));
        assert_eq!(by_kind("route"), Some(0.0));
    }
}

/// One cut connection, named, with the reason the server recorded.
async fn check_the_cut_connection(after: &str, server: &NatsServer) {
    // The server's own record of why it closed the connection is the truth
    // the exporter must repeat (2.15 may close by write deadline first).
    let reason = closed_reason(server, "stuck-reader").await;
    let reason_label = match reason.as_str() {
        "Slow Consumer (Pending Bytes)" => "pending_bytes",
        "Slow Consumer (Write Deadline)" => "write_deadline",
        other => panic!("the stuck reader was closed for another reason: {other}"),
    };
    let closed = [
        ("client_name", "stuck-reader"),
        ("account", "$G"),
        ("reason", reason_label),
    ];
    let name = [("server", server.name.as_str())];
    for labels in [&closed[..], &name[..]] {
        assert_eq!(
            value(
                after,
                "nats_delivery_slow_consumer_closed_connections_total",
                labels
            ),
            Some(1.0),
            "{labels:?}"
        );
    }
}

/// Runs on the version under test (`scripts/test.sh` runs it on each).
#[tokio::test]
async fn a_cut_connection_is_counted_once_and_named() {
    cut_scenario(&nats_test_server::version_under_test()).await;
}

#[tokio::test]
async fn pending_bytes_warn_before_the_cut() {
    let max_pending: u64 = 16 * 1024 * 1024;
    let server = NatsServer::builder().max_pending(max_pending).start();
    let _stuck = stuck_reader(server.client_port, "lagging", "warn.test").await;
    let publisher = async_nats::ConnectOptions::new()
        .name("publisher")
        .connect(server.client_url())
        .await
        .unwrap();
    // 4 MiB: well under max_pending, well over what the kernel buffers.
    let payload = bytes::Bytes::from(vec![b'x'; 1024]);
    for _ in 0..4096 {
        publisher
            .publish("warn.test", payload.clone())
            .await
            .unwrap();
    }
    publisher.flush().await.unwrap();
    let pending = || -> Option<i64> {
        let connz = common::monitor_json(&server.monitor_url(), "connz?sort=pending&limit=1");
        let c = &connz["connections"][0];
        (c["name"] == "lagging").then(|| c["pending_bytes"].as_i64().unwrap())
    };
    // Wait until the server has written all the kernel takes: then the queue stays put.
    let mut last = -1;
    let stable = Wait::secs("a stable pending queue", 20)
        .every(Duration::from_millis(200))
        .until(|| {
            let now = pending()?;
            let was = std::mem::replace(&mut last, now);
            (now > 0 && now == was).then_some(now)
        })
        .await;
    let exporter = common::exporter(
        &[server.monitor_url()],
        &["--sources", "varz,connz", "--connz-top", "1"],
    );
    let text = common::scrape(&exporter).await;
    assert_eq!(pending(), Some(stable), "the queue moved during the scrape");
    let c = [("client_name", "lagging"), ("account", "$G")];
    assert_eq!(
        value(&text, "nats_delivery_connection_pending_bytes", &c),
        Some(stable as f64)
    );
    assert_eq!(
        value(&text, "nats_delivery_connection_pending_ratio", &c),
        Some(stable as f64 / max_pending as f64)
    );
    // --connz-top 1: only the most pending connection is listed.
    assert_eq!(
        nats_test_server::sample::samples(&text, "nats_delivery_connection_pending_bytes", &[])
            .len(),
        1
    );
    assert_eq!(
        value(&text, "nats_delivery_server_max_pending_bytes", &[]),
        Some(max_pending as f64)
    );
    assert_eq!(
        value(&text, "nats_delivery_server_slow_consumers_total", &[]),
        Some(0.0)
    );
}

/// The exporter's count of connections cut as slow consumers, all series together.
fn cut_connections(text: &str) -> Option<f64> {
    value(
        text,
        "nats_delivery_slow_consumer_closed_connections_total",
        &[],
    )
}

/// Opens and closes `n` ordinary connections.
async fn churn(port: u16, n: usize) {
    for i in 0..n {
        let c = async_nats::ConnectOptions::new()
            .name(format!("short-lived-{i}"))
            .connect(format!("nats://127.0.0.1:{port}"))
            .await
            .unwrap();
        c.flush().await.unwrap();
        drop(c);
    }
}

#[tokio::test]
async fn a_cut_behind_many_closed_connections_is_found_once() {
    let server = NatsServer::builder()
        .max_pending(512 * 1024)
        .config("max_payload: 65536")
        .start();
    let exporter = common::exporter(&[server.monitor_url()], &["--sources", "varz,connz"]);
    churn(server.client_port, 3).await;
    let text = common::scrape(&exporter).await;
    assert_eq!(cut_connections(&text), None);

    let stuck = stuck_reader(server.client_port, "stuck-reader", "cut.test").await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    publish_until_cut(&server, &publisher, "cut.test").await;
    drop(publisher);
    drop(stuck);
    // 120 more closed connections stop after the cut: the first request of a
    // poll (50) does not reach it, the poll must page on to find it.
    churn(server.client_port, 120).await;
    let closed_total = || {
        let closed = common::monitor_json(&server.monitor_url(), "connz?state=closed&limit=10000");
        closed["connections"].as_array().unwrap().len()
    };
    Wait::secs("every connection in the closed list", 20)
        .until(|| (closed_total() >= 125).then_some(()))
        .await;
    let text = common::scrape(&exporter).await;
    assert_eq!(cut_connections(&text), Some(1.0));
    churn(server.client_port, 60).await;
    let text = common::scrape(&exporter).await;
    assert_eq!(cut_connections(&text), Some(1.0));

    // A fresh exporter counts what the ring holds: the same one cut.
    let fresh = common::exporter(&[server.monitor_url()], &["--sources", "connz"]);
    let text = common::scrape(&fresh).await;
    assert_eq!(cut_connections(&text), Some(1.0));
}
