//! Non-zero pending bytes on real links: the receiving server is stopped
//! (SIGSTOP), so the sender's route or gateway connection fills and stays
//! full; one scrape then equals the server's own reply read before and
//! after it.
use crate::common;
use crate::link_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use link_support::*;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::{free_port, NatsServer};

/// Non-zero pending bytes from a real route: the receiving server is
/// stopped, so the sender's route fills and stays full; one scrape then
/// equals the server's /routez read before and after it.
#[tokio::test]
async fn a_route_to_a_stopped_server_holds_pending_bytes_as_the_server_reports() {
    let pids = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port()];
    let routes = ports.map(|p| format!("\"nats-route://127.0.0.1:{p}\""));
    let nodes: Vec<NatsServer> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let pid_file = pids.path().join(format!("n{i}.pid"));
            NatsServer::builder()
                .name(&format!("n{i}"))
                // Long enough that the stopped server's route is not cut
                // while the test reads it.
                .write_deadline("60s")
                .config(&format!(
                    "pid_file: \"{}\"\ncluster {{ name: C, listen: \"127.0.0.1:{port}\", routes: [{}] }}",
                    pid_file.display(),
                    routes.join(", ")
                ))
                .start()
        })
        .collect();
    let (n0, n1) = (&nodes[0], &nodes[1]);
    let n1_pid = pids.path().join("n1.pid");
    // Interest on n1, known to n0.
    let sub = async_nats::connect(n1.client_url()).await.unwrap();
    let _s = sub.subscribe("burst").await.unwrap();
    sub.flush().await.unwrap();
    let publisher = async_nats::connect(n0.client_url()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    // n0 sends `burst` on the route that lists n1's subscription to it
    // (one of a pool from 2.10): once listed, the burst takes that route.
    Wait::before("n1's interest in burst on one of n0's routes", deadline)
        .every(Duration::from_millis(100))
        .until(|| {
            json(n0, "routez?subs=1")["routes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| {
                    r["subscriptions_list"]
                        .as_array()
                        .is_some_and(|subs| subs.iter().any(|s| s == "burst"))
                })
        })
        .await;

    signal(&n1_pid, "-STOP");
    burst(&publisher).await;
    let exporter = common::exporter(&[n0.monitor_url()], LINKS);
    if !fills_pending_size(n0) {
        // The route holds most of the burst, and the server says 0: the
        // exporter shows nothing rather than that 0.
        Wait::before("the burst to reach the route", deadline)
            .every(Duration::from_millis(100))
            .until(|| {
                let out = json(n0, "varz")["out_msgs"].as_u64();
                (out >= Some(512)).then_some(()).ok_or(out)
            })
            .await;
        let said: Vec<i64> = routes_of(n0).iter().map(|r| r.2).collect();
        let text = common::scrape(&exporter).await;
        signal(&n1_pid, "-CONT");
        assert_eq!(said, [0], "pending_size");
        assert_eq!(exported_routes(&text, "n0"), BTreeSet::new(), "{text}");
        return;
    }
    let result = holding(&exporter, || routes_of(n0), |r| r.2).await;
    signal(&n1_pid, "-CONT");
    let (server_view, text) = result.expect("the route kept changing");
    println!("n0's routes while n1 is stopped: {server_view:?}");
    assert_eq!(exported_routes(&text, "n0"), server_view, "{text}");
    let max_pending = json(n0, "varz")["max_pending"].as_f64().unwrap();
    let (_, rid, pending) = server_view.iter().max_by_key(|r| r.2).unwrap();
    assert!(*pending > 1024 * 1024, "{server_view:?}");
    assert_eq!(
        value(
            &text,
            "nats_delivery_route_pending_ratio",
            &[("server", "n0"), ("rid", rid)]
        ),
        Some(*pending as f64 / max_pending)
    );
}

/// Non-zero pending bytes from a real gateway connection: the other
/// cluster's server is stopped while this one sends to its subscriber.
#[tokio::test]
async fn a_gateway_to_a_stopped_server_holds_pending_bytes_as_the_server_reports() {
    let pids = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port()];
    let gateways = format!(
        "gateways: [ {{ name: A, url: \"nats://127.0.0.1:{}\" }}, {{ name: B, url: \"nats://127.0.0.1:{}\" }} ]",
        ports[0], ports[1]
    );
    let start = |name: &str, gateway: &str, port: u16| {
        let pid_file = pids.path().join(format!("{name}.pid"));
        NatsServer::builder()
            .name(name)
            .write_deadline("60s")
            .config(&format!(
                "pid_file: \"{}\"\ngateway {{ name: {gateway}, listen: \"127.0.0.1:{port}\", {gateways} }}",
                pid_file.display()
            ))
            .start()
    };
    let a = start("a0", "A", ports[0]);
    let b = start("b0", "B", ports[1]);
    let sub = async_nats::connect(b.client_url()).await.unwrap();
    let _s = sub.subscribe("burst").await.unwrap();
    sub.flush().await.unwrap();
    let publisher = async_nats::connect(a.client_url()).await.unwrap();
    // a lists its outbound gateway once it is registered, and from then
    // on sends it everything (optimistic mode: b said no "no interest").
    Wait::secs("the gateways to come up", 20)
        .every(Duration::from_millis(100))
        .until(|| {
            let counts = (gateways_of(&a).len(), gateways_of(&b).len());
            (counts.0 >= 2 && counts.1 >= 2).then_some(()).ok_or(counts)
        })
        .await;

    signal(&pids.path().join("b0.pid"), "-STOP");
    burst(&publisher).await;
    let exporter = common::exporter(&[a.monitor_url()], LINKS);
    let result = holding(&exporter, || gateways_of(&a), |g| g.3).await;
    signal(&pids.path().join("b0.pid"), "-CONT");
    let (server_view, text) = result.expect("the gateway kept changing");
    println!("a0's gateways while b0 is stopped: {server_view:?}");
    assert_eq!(exported_gateways(&text, "a0"), server_view, "{text}");
    let (_, direction, cid, pending) = server_view.iter().max_by_key(|g| g.3).unwrap();
    assert_eq!(direction, "outbound");
    assert!(*pending > 1024 * 1024, "{server_view:?}");
    let max_pending = json(&a, "varz")["max_pending"].as_f64().unwrap();
    assert_eq!(
        value(
            &text,
            "nats_delivery_gateway_pending_ratio",
            &[("server", "a0"), ("cid", cid)]
        ),
        Some(*pending as f64 / max_pending)
    );
}
