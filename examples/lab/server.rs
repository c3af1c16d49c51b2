//! Loss on the server: a subscriber that stops reading nears
//! `max_pending` (the early warning) and is then cut.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::processes::MAX_PENDING;
use crate::Lab;

const WAIT: Duration = Duration::from_secs(30);
/// Share of `max_pending` the stuck reader is held at: above the early
/// warning's 0.5, well below the 0.75 where the server starts stalling
/// publishers.
const HOLD: f64 = 0.52;

/// A raw NATS client that subscribes to `lab.flood` and then never reads.
async fn stuck_reader(port: u16) -> anyhow::Result<BufReader<TcpStream>> {
    // A fixed, small receive buffer: the kernel would otherwise grow it (up
    // to tcp_rmem, tens of MiB) and absorb an unpredictable share of what
    // the server sends before its pending bytes rise.
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(64 * 1024)?;
    let stream = socket.connect(([127, 0, 0, 1], port).into()).await?;
    let mut conn = BufReader::new(stream);
    let mut line = String::new();
    conn.read_line(&mut line).await?; // INFO
    conn.get_mut()
        .write_all(
            b"CONNECT {\"user\":\"app\",\"pass\":\"app-secret\",\"verbose\":false,\"pedantic\":false,\
              \"name\":\"lab-stuck-reader\",\"protocol\":1}\r\nSUB lab.flood 1\r\nPING\r\n",
        )
        .await?;
    line.clear();
    conn.read_line(&mut line).await?;
    anyhow::ensure!(
        line.starts_with("PONG"),
        "stuck reader: expected PONG, got {line:?}"
    );
    Ok(conn)
}

/// Counts the `MSG` frames in what a client received.
fn count_msgs(bytes: &[u8]) -> u64 {
    let mut n = 0;
    let mut at = 0;
    while let Some(end) = bytes[at..].windows(2).position(|w| w == b"\r\n") {
        let line = &bytes[at..at + end];
        at += end + 2;
        if let Some(rest) = line.strip_prefix(b"MSG ") {
            let size: usize = std::str::from_utf8(rest)
                .ok()
                .and_then(|r| r.split(' ').next_back())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if at + size + 2 > bytes.len() {
                break; // cut in the middle of a message: not received
            }
            at += size + 2;
            n += 1;
        }
    }
    n
}

/// The connection named `name` in /connz (open, or closed with `closed`).
async fn connection(
    lab: &Lab,
    name: &str,
    closed: bool,
) -> anyhow::Result<Option<serde_json::Value>> {
    let state = if closed { "&state=closed" } else { "" };
    let connz = lab.monitor(&format!("connz?limit=1024{state}")).await?;
    Ok(connz["connections"]
        .as_array()
        .context("connections")?
        .iter()
        .find(|c| c["name"] == name)
        .cloned())
}

/// The scenario's state: the reader that stopped reading, the publisher
/// flooding it, and the server's /varz before it started.
struct Flood {
    /// The server's name (its `server` label).
    server: String,
    /// The server's /varz before the scenario.
    before: serde_json::Value,
    /// The raw connection that never reads.
    stuck: BufReader<TcpStream>,
    publisher: async_nats::Client,
    payload: bytes::Bytes,
    /// Messages published to `lab.flood` so far (truth).
    sent: u64,
}

impl Flood {
    /// Reads /varz, then connects the stuck reader and the publisher.
    async fn start(lab: &Lab) -> anyhow::Result<Flood> {
        let server = lab.nats.name.clone();
        let before = lab.monitor("varz").await?;
        let stuck = stuck_reader(lab.nats.client_port).await?;
        let publisher = async_nats::ConnectOptions::new()
            .user_and_password("app".into(), "app-secret".into())
            .name("lab-publisher")
            .connect(lab.nats.client_url())
            .await?;
        Ok(Flood {
            server,
            before,
            stuck,
            publisher,
            payload: bytes::Bytes::from(vec![b'x'; 8 * 1024]),
            sent: 0,
        })
    }

    /// Publishes `n` messages of 8 KiB to `lab.flood` and flushes.
    async fn publish(&mut self, n: u64) -> anyhow::Result<()> {
        for _ in 0..n {
            self.publisher
                .publish("lab.flood", self.payload.clone())
                .await?;
        }
        self.publisher.flush().await?;
        self.sent += n;
        Ok(())
    }
}

/// A connection's pending bytes in /connz.
fn pending(c: &serde_json::Value) -> u64 {
    c["pending_bytes"].as_u64().unwrap_or(0)
}

/// The slow consumers /varz has counted.
fn slow_consumers(varz: &serde_json::Value) -> u64 {
    varz["slow_consumers"].as_u64().unwrap_or(0)
}

/// Publishes until the server holds [`HOLD`] of `max_pending` for the
/// reader (the kernel's socket buffers fill first); its /connz entry then.
async fn hold_near_max_pending(lab: &Lab, flood: &mut Flood) -> anyhow::Result<serde_json::Value> {
    let start = Instant::now();
    let held = loop {
        let Some(c) = connection(lab, "lab-stuck-reader", false).await? else {
            let closed = connection(lab, "lab-stuck-reader", true).await?;
            let closed = closed.as_ref().map(|c| (&c["reason"], &c["pending_bytes"]));
            bail!("the stuck reader was closed before it held {HOLD} of max_pending: {closed:?}");
        };
        if pending(&c) as f64 >= HOLD * MAX_PENDING as f64 {
            break c;
        }
        if start.elapsed() > WAIT {
            bail!("the stuck reader's pending bytes stay at {}", pending(&c));
        }
        flood.publish(4).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    lab.report.note(&format!(
        "{} messages of 8 KiB published; the server holds {} bytes for the reader",
        flood.sent,
        pending(&held)
    ));
    Ok(held)
}

/// The server's own pending bytes against what Prometheus holds, read
/// together until they agree (the kernel may still take a few bytes).
async fn check_pending_ratio(lab: &mut Lab, held: &serde_json::Value) -> anyhow::Result<()> {
    let q = "max(nats_delivery_connection_pending_ratio{client_name=\"lab-stuck-reader\"})";
    let start = Instant::now();
    let (ratio, got) = loop {
        let got = lab.prom.value(q).await?;
        let now = connection(lab, "lab-stuck-reader", false)
            .await?
            .unwrap_or(held.clone());
        let ratio = pending(&now) as f64 / MAX_PENDING as f64;
        if got == Some(ratio) || start.elapsed() > WAIT {
            break (ratio, got);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    lab.report.count(
        "pending / max_pending of the reader (server's /connz)",
        ratio,
        q,
        got,
    );
    Ok(())
}

/// The early warning for the held reader, with its connection's labels.
async fn expect_near_max_pending(
    lab: &mut Lab,
    server: &str,
    held: &serde_json::Value,
) -> anyhow::Result<()> {
    let cid = held["cid"].to_string();
    let labels = [
        ("client_name", "lab-stuck-reader"),
        ("account", "APP"),
        ("cid", cid.as_str()),
        ("server", server),
    ];
    lab.expect_firing("NatsConnectionNearMaxPending", &labels, WAIT)
        .await?;
    Ok(())
}

/// Publishes until /varz counts one more slow consumer than before.
async fn publish_until_cut(lab: &Lab, flood: &mut Flood, start: Instant) -> anyhow::Result<()> {
    while slow_consumers(&lab.monitor("varz").await?) == slow_consumers(&flood.before) {
        if start.elapsed() > WAIT {
            bail!("the server did not cut the stuck reader");
        }
        flood.publish(8).await?;
    }
    Ok(())
}

/// Reads what the cut reader still gets to its end; the messages in it.
async fn received_by_cut_reader(stuck: &mut BufReader<TcpStream>) -> anyhow::Result<u64> {
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stuck.read_to_end(&mut received))
        .await
        .context("the cut connection did not end")??;
    Ok(count_msgs(&received))
}

/// The reason the server gives for closing the reader (empty if it does not
/// list it as closed by `WAIT` after `since`).
async fn closed_reason(lab: &Lab, since: Instant) -> anyhow::Result<String> {
    let mut closed = None;
    while closed.is_none() && since.elapsed() < WAIT {
        closed = connection(lab, "lab-stuck-reader", true).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(closed
        .as_ref()
        .and_then(|c| c["reason"].as_str())
        .unwrap_or("")
        .to_string())
}

/// The cut against the server's records: the reader's closed reason, the
/// messages it never got, the cut and slow-consumer counts, the cut alert.
async fn check_cut(
    lab: &mut Lab,
    flood: &Flood,
    (got_msgs, reason): (u64, &str),
    after: &serde_json::Value,
) -> anyhow::Result<()> {
    let (server, sent) = (flood.server.as_str(), flood.sent);
    lab.report.note(&format!(
        "cut after {sent} messages, reason {reason:?}; it had received {got_msgs}"
    ));
    let cut = if reason.starts_with("Slow Consumer") {
        1.0
    } else {
        0.0
    };
    lab.report.check(
        cut == 1.0,
        "the server's /connz?state=closed lists the reader as a slow consumer",
    );
    lab.report.fact(
        "messages published to the reader that never reached it",
        (sent - got_msgs) as f64,
        "(no metric: a cut is counted per connection)",
    );
    let counts = [
        ("connections cut, by name (closed /connz)", "sum(nats_delivery_slow_consumer_closed_connections_total{client_name=\"lab-stuck-reader\"})".to_string(), cut),
        ("connections cut, by name (system events)", "sum(nats_delivery_server_slow_consumer_disconnects_total{client_name=\"lab-stuck-reader\"})".to_string(), cut),
        ("slow-consumer detections (server's /varz)", format!("max(nats_delivery_server_slow_consumers_total{{server=\"{server}\"}})"), after["slow_consumers"].as_f64().unwrap_or(f64::NAN)),
    ];
    for (what, q, truth) in counts {
        let got = lab.prom.settle(&q, truth, WAIT).await?;
        lab.report.count(what, truth, &q, got);
    }
    let server_labels = [("server", server)];
    lab.expect_firing("NatsServerSlowConsumerCut", &server_labels, WAIT)
        .await?;
    Ok(())
}

/// Publishers were stalled if the server says so (2.12+): its count, and
/// the stall alert if it rose.
async fn check_stalls(
    lab: &mut Lab,
    flood: &Flood,
    after: &serde_json::Value,
) -> anyhow::Result<()> {
    let server = flood.server.as_str();
    let Some(stalls) = after["stalled_clients"].as_f64() else {
        return Ok(());
    };
    let q = format!("max(nats_delivery_server_stalled_clients_total{{server=\"{server}\"}})");
    let got = lab.prom.settle(&q, stalls, WAIT).await?;
    lab.report
        .count("publisher stalls (server's /varz)", stalls, &q, got);
    if stalls > flood.before["stalled_clients"].as_f64().unwrap_or(0.0) {
        let server_labels = [("server", server)];
        lab.report.allow("NatsProducerStallsRising");
        lab.expect_firing("NatsProducerStallsRising", &server_labels, WAIT)
            .await?;
    }
    Ok(())
}

/// A subscriber stops reading. First it holds 52 % of `max_pending` (early
/// warning), then publishing goes on until the server cuts it.
pub async fn server_cut(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "server cut: a subscriber stops reading, nears max_pending, is cut",
        &["NatsConnectionNearMaxPending", "NatsServerSlowConsumerCut"],
    );
    let mut flood = Flood::start(lab).await?;
    // 1. Fill its buffer to HOLD of max_pending and hold it there.
    let held = hold_near_max_pending(lab, &mut flood).await?;
    check_pending_ratio(lab, &held).await?;
    expect_near_max_pending(lab, &flood.server, &held).await?;

    // 2. Publish on until the server counts a slow consumer. It then stops
    // writing to the reader; what the reader still gets is what was already
    // on its way (read to the end, which lets the server close the socket).
    let cutting = Instant::now();
    publish_until_cut(lab, &mut flood, cutting).await?;
    let got_msgs = received_by_cut_reader(&mut flood.stuck).await?;
    let after = lab.monitor("varz").await?;
    let reason = closed_reason(lab, cutting).await?;
    check_cut(lab, &flood, (got_msgs, &reason), &after).await?;
    check_stalls(lab, &flood, &after).await?;
    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);
    Ok(())
}
