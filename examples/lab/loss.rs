//! Core NATS loss: an application's client library drops (the link-in
//! crate counts it), and a subscriber that stops reading is cut by the
//! server (after the early warning of its pending bytes).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::processes::MAX_PENDING;
use crate::{Lab, APP_CLIENT, APP_INSTANCE, APP_SUBJECT, PLAIN_CLIENT};

const WAIT: Duration = Duration::from_secs(30);

/// The application's handler pauses while 1,000 messages arrive; its
/// subscription holds 100 and drops the rest. The truth: messages the
/// application published minus messages its handler received.
pub async fn client_drops(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "client library drops: a handler pauses, its subscription buffer (100) overflows",
        &["NatsClientDroppedMessages"],
    );
    let n = 1000u64;
    for i in 0..n {
        lab.app.publish(APP_SUBJECT, i.to_string().into()).await?;
    }
    // Same connection: when the flush returns, the server has sent every
    // message to the application.
    lab.app.flush().await?;
    lab.app_published += n;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let handled = lab.handle_pending().await;
    let dropped = (lab.app_published - lab.app_handled) as f64;
    lab.report.note(&format!(
        "published {n} while the handler paused; it then received {handled}"
    ));
    let sel = format!("{{client=\"{APP_CLIENT}\",subscription=\"{APP_SUBJECT}\"}}");
    for (what, metric, truth) in [
        (
            "messages dropped by the client",
            "nats_delivery_client_dropped_messages_total",
            dropped,
        ),
        (
            "same, re-exported from the app's reports",
            "nats_delivery_app_dropped_messages_total",
            dropped,
        ),
        (
            "messages handed to the application",
            "nats_delivery_client_delivered_messages_total",
            lab.app_handled as f64,
        ),
    ] {
        let q = format!("sum({metric}{sel})");
        let got = lab.prom.settle(&q, truth, WAIT).await?;
        lab.report.count(what, truth, &q, got);
    }
    // Once from the application's own /metrics, once from its reports
    // re-exported by the exporter (`instance` kept by honor_labels).
    let own = [
        ("client", APP_CLIENT),
        ("subscription", APP_SUBJECT),
        ("job", "lab-app"),
    ];
    let reported = [
        ("client", APP_CLIENT),
        ("subscription", APP_SUBJECT),
        ("job", "nats-delivery-exporter"),
        ("instance", APP_INSTANCE),
    ];
    for labels in [&own[..], &reported[..]] {
        let found = lab
            .prom
            .wait_firing("NatsClientDroppedMessages", labels, WAIT)
            .await?;
        lab.report.alert("NatsClientDroppedMessages", labels, found);
    }
    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);
    Ok(())
}

/// A plain async-nats subscriber on a connection with `subscription_capacity`
/// 16, named through the crate so that async-nats' slow-consumer events are
/// attributed to it: 100 messages arrive while nobody reads, async-nats
/// itself drops what does not fit, in waves until Prometheus has seen the
/// events' series (born with the first event) before a wave that drops
/// more. The truth: published minus received. The events are a
/// lower bound (async-nats loses events when its queue of 128 is full), so
/// Prometheus must hold at least one and at most the truth.
pub async fn library_drops(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsClientLibraryDroppedMessages";
    lab.report.scenario(
        "async-nats itself drops: a plain subscriber's channel (16) overflows",
        &[alert],
    );
    let subject = "lab.plain.events";
    let mut subscriber = lab.plain.subscribe(subject).await?;
    lab.plain_metrics.name_subscriber(&subscriber, subject);
    let q = format!(
        "sum(nats_delivery_client_slow_consumer_events_total{{client=\"{PLAIN_CLIENT}\",subscription=\"{subject}\"}})"
    );
    let (mut published, mut received) = (0u64, 0u64);
    let mut events = None;
    // Waves until one drops while Prometheus already holds the series.
    let mut series_seen = false;
    for _wave in 0..6 {
        for i in 0..100u32 {
            lab.plain.publish(subject, i.to_string().into()).await?;
        }
        lab.plain.flush().await?;
        published += 100;
        let before = received;
        while let Ok(Some(_)) = tokio::time::timeout(
            Duration::from_secs(1),
            futures::StreamExt::next(&mut subscriber),
        )
        .await
        {
            received += 1;
        }
        if received - before == 100 {
            continue; // nothing dropped in this wave
        }
        // Settles on the truth if no event was lost; otherwise on less.
        let truth = (published - received) as f64;
        events = lab.prom.settle(&q, truth, Duration::from_secs(10)).await?;
        if series_seen {
            break;
        }
        series_seen = events.is_some();
    }
    let dropped = published - received;
    lab.report.note(&format!(
        "published {published} while nobody read; the subscriber then received {received}"
    ));
    lab.report.fact(
        "messages async-nats dropped",
        dropped as f64,
        &format!(
            "{} slow-consumer events (a lower bound)",
            events.map_or("no".to_string(), |e| e.to_string())
        ),
    );
    let bounded = events.is_some_and(|e| e >= 1.0 && e <= dropped as f64);
    lab.report.check(
        bounded,
        &format!("slow-consumer events {events:?} are between 1 and the {dropped} drops  [{q}]"),
    );
    let labels = [
        ("client", PLAIN_CLIENT),
        ("subscription", subject),
        ("job", "lab-app"),
    ];
    let found = lab.prom.wait_firing(alert, &labels, WAIT).await?;
    lab.report.alert(alert, &labels, found);
    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);
    Ok(())
}

/// A raw NATS client that subscribes to `lab.flood` and then never reads.
async fn stuck_reader(port: u16) -> anyhow::Result<BufReader<TcpStream>> {
    let mut conn = BufReader::new(TcpStream::connect(("127.0.0.1", port)).await?);
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

/// A subscriber stops reading. First it holds 60 % of `max_pending` (early
/// warning), then publishing goes on until the server cuts it.
pub async fn server_cut(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "server cut: a subscriber stops reading, nears max_pending, is cut",
        &["NatsConnectionNearMaxPending", "NatsServerSlowConsumerCut"],
    );
    let server = lab.nats.name.clone();
    let before = lab.monitor("varz").await?;
    let mut stuck = stuck_reader(lab.nats.client_port).await?;
    let publisher = async_nats::ConnectOptions::new()
        .user_and_password("app".into(), "app-secret".into())
        .name("lab-publisher")
        .connect(lab.nats.client_url())
        .await?;
    let payload = bytes::Bytes::from(vec![b'x'; 8 * 1024]);
    let mut sent = 0u64;
    let pending = |c: &serde_json::Value| c["pending_bytes"].as_u64().unwrap_or(0);
    // 1. Fill its buffer to 60 % of max_pending (the kernel's socket buffers
    // fill first) and hold it there.
    let start = Instant::now();
    let held = loop {
        let c = connection(lab, "lab-stuck-reader", false)
            .await?
            .context("stuck reader not in /connz")?;
        if pending(&c) as f64 >= 0.6 * MAX_PENDING as f64 {
            break c;
        }
        if start.elapsed() > WAIT {
            bail!("the stuck reader's pending bytes stay at {}", pending(&c));
        }
        for _ in 0..4 {
            publisher.publish("lab.flood", payload.clone()).await?;
        }
        publisher.flush().await?;
        sent += 4;
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    lab.report.note(&format!(
        "{sent} messages of 8 KiB published; the server holds {} bytes for the reader",
        pending(&held)
    ));
    // The server's own pending bytes against what Prometheus holds, read
    // together until they agree (the kernel may still take a few bytes).
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
    let cid = held["cid"].to_string();
    let labels = [
        ("client_name", "lab-stuck-reader"),
        ("account", "APP"),
        ("cid", cid.as_str()),
        ("server", server.as_str()),
    ];
    let found = lab
        .prom
        .wait_firing("NatsConnectionNearMaxPending", &labels, WAIT)
        .await?;
    lab.report
        .alert("NatsConnectionNearMaxPending", &labels, found);

    // 2. Publish on until the server counts a slow consumer. It then stops
    // writing to the reader; what the reader still gets is what was already
    // on its way (read to the end, which lets the server close the socket).
    let slow = |v: &serde_json::Value| v["slow_consumers"].as_u64().unwrap_or(0);
    let start = Instant::now();
    while slow(&lab.monitor("varz").await?) == slow(&before) {
        if start.elapsed() > WAIT {
            bail!("the server did not cut the stuck reader");
        }
        for _ in 0..8 {
            publisher.publish("lab.flood", payload.clone()).await?;
        }
        publisher.flush().await?;
        sent += 8;
    }
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stuck.read_to_end(&mut received))
        .await
        .context("the cut connection did not end")??;
    let got_msgs = count_msgs(&received);
    let after = lab.monitor("varz").await?;
    let mut closed = None;
    while closed.is_none() && start.elapsed() < WAIT {
        closed = connection(lab, "lab-stuck-reader", true).await?;
    }
    let reason = closed
        .as_ref()
        .and_then(|c| c["reason"].as_str())
        .unwrap_or("");
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
    let server_labels = [("server", server.as_str())];
    let found = lab
        .prom
        .wait_firing("NatsServerSlowConsumerCut", &server_labels, WAIT)
        .await?;
    lab.report
        .alert("NatsServerSlowConsumerCut", &server_labels, found);
    // Publishers were stalled if the server says so (2.12+).
    if let Some(stalls) = after["stalled_clients"].as_f64() {
        let q = format!("max(nats_delivery_server_stalled_clients_total{{server=\"{server}\"}})");
        let got = lab.prom.settle(&q, stalls, WAIT).await?;
        lab.report
            .count("publisher stalls (server's /varz)", stalls, &q, got);
        if stalls > before["stalled_clients"].as_f64().unwrap_or(0.0) {
            lab.report.allow("NatsProducerStallsRising");
            let found = lab
                .prom
                .wait_firing("NatsProducerStallsRising", &server_labels, WAIT)
                .await?;
            lab.report
                .alert("NatsProducerStallsRising", &server_labels, found);
        }
    }
    let firing = lab.prom.firing().await?;
    lab.report.only_expected(&firing);
    Ok(())
}
