//! Removed before delivery across a restart of the exporter binary,
//! against a real server: the new process starts at 0, leaves out a gap
//! already open (counted by the old process) and counts on exactly.
use crate::common::KilledOnDrop;
use crate::removed_before_delivery::limited;
use crate::removed_before_delivery_support::{assert_exact, Acks, Expect, Lab, Reader, EXACT};

use std::time::Duration;

use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const ACK_WAIT: Duration = Duration::from_secs(60);

/// The exporter binary polling `server` at each scrape; killed when
/// dropped.
struct Running {
    _child: KilledOnDrop,
    url: String,
}

impl Running {
    async fn start(server: &NatsServer) -> Running {
        let port = nats_test_server::free_port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args(["--monitor-url", &server.monitor_url()])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--sources", "varz,jsz", "--consumer-status-window", "3s"])
            .args(["--consumer-opt-in-metrics", EXACT])
            .env("NATS_DELIVERY_LOG", "warn")
            .env_remove("NATS_DELIVERY_NATS_SERVERS")
            .spawn()
            .unwrap();
        let child = KilledOnDrop(child);
        Wait::secs("the exporter to listen", 20)
            .until_async(async || {
                let connected = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
                connected.map_err(|e| e.kind())
            })
            .await;
        Running {
            _child: child,
            url: format!("http://127.0.0.1:{port}/metrics"),
        }
    }

    async fn scrape(&self) -> String {
        let answer = reqwest::get(&self.url).await.unwrap();
        answer.error_for_status().unwrap().text().await.unwrap()
    }
}

/// Each reader counted from `since` (removed before the exporter's first
/// poll), its gauge 1.
fn since(readers: [&Reader; 2], since: u64) -> [Expect<'_>; 2] {
    readers.map(|reader| Expect {
        reader,
        since,
        exact: Some(true),
    })
}

#[tokio::test]
async fn a_restarted_exporter_starts_at_zero_and_counts_on_exactly() {
    let server = NatsServer::builder().jetstream().start();
    let mut lab = Lab::new(&server, limited("restart", 10)).await;
    let mut acked = Reader::new(&lab, "acked", None, Acks::Explicit, ACK_WAIT).await;
    let mut no_ack = Reader::new(&lab, "no_ack", None, Acks::None, ACK_WAIT).await;
    let old = Running::start(&server).await;
    lab.scrape_with(|| old.scrape()).await;
    lab.publish("restart", 10).await;
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(3).await, [1, 2, 3]);
    }
    let step = lab.scrape_with(|| old.scrape()).await;
    let both = since([&acked, &no_ack], 0);
    assert_eq!(assert_exact(&step, &lab, &both, "old: read 3"), [0, 0]);
    // 5 more: the stream keeps 6..=15, so 4 and 5 went unseen; the gap is
    // still open when the exporter is killed and started again.
    lab.publish("restart", 5).await;
    let step = lab.scrape_with(|| old.scrape()).await;
    let both = since([&acked, &no_ack], 0);
    assert_eq!(assert_exact(&step, &lab, &both, "old: gap open"), [2, 2]);
    drop(old);
    let new = Running::start(&server).await;
    let step = lab.scrape_with(|| new.scrape()).await;
    let both = since([&acked, &no_ack], 2);
    assert_eq!(
        assert_exact(&step, &lab, &both, "new: first scrape"),
        [0, 0]
    );
    // Each jumps the gap that was open at the start: not counted again.
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(3).await, [6, 7, 8]);
    }
    let step = lab.scrape_with(|| new.scrape()).await;
    let both = since([&acked, &no_ack], 2);
    assert_eq!(assert_exact(&step, &lab, &both, "new: gap jumped"), [0, 0]);
    // 10 more: the stream keeps 16..=25, 9..=15 go unseen.
    lab.publish("restart", 10).await;
    let step = lab.scrape_with(|| new.scrape()).await;
    let both = since([&acked, &no_ack], 2);
    assert_eq!(assert_exact(&step, &lab, &both, "new: removed"), [7, 7]);
    for r in [&mut acked, &mut no_ack] {
        assert_eq!(r.read(2).await, [16, 17]);
    }
    let step = lab.scrape_with(|| new.scrape()).await;
    let both = since([&acked, &no_ack], 2);
    assert_eq!(assert_exact(&step, &lab, &both, "new: jumped"), [7, 7]);
}
