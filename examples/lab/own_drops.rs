//! The exporter's own client drops. The lab's main exporter runs in durable
//! mode, where it cannot drop (an advisory not yet read stays in the
//! stream). A second exporter, as a team might run one for account BURST,
//! listens live with a subscription buffer of 8 advisories; a burst of NAK
//! advisories overflows it. The truth: what the lab published and what the
//! server says it delivered to that exporter's connection. Every advisory
//! must be either counted or counted as dropped, and the drop alert must
//! fire. The second exporter then leaves Prometheus' configuration and
//! stops, so that later scenarios see one exporter again.

use std::time::{Duration, Instant};

use crate::processes::{self, LIVE_EXPORTER_NAME};
use crate::Lab;

const WAIT: Duration = Duration::from_secs(30);
/// Advisories in the burst.
const BURST: u64 = 20_000;
/// Advisories published between round trips: at most this many wait in the
/// server for the exporter (about 250 KB, a quarter of the lab's
/// `max_pending`), so the server never cuts it; its 8-message buffer still
/// overflows.
const BATCH: u64 = 1_000;

/// What the server delivered to the live exporter's advisory connection.
async fn delivered_by_server(lab: &Lab) -> anyhow::Result<Option<u64>> {
    let connz = lab.monitor("connz?auth=true&limit=1024").await?;
    let name = format!("{LIVE_EXPORTER_NAME} advisories");
    Ok(connz["connections"].as_array().and_then(|list| {
        list.iter()
            .find(|c| c["name"] == name.as_str())
            .and_then(|c| c["out_msgs"].as_u64())
    }))
}

/// The second exporter, live-mode, of account BURST.
struct LiveExporter {
    process: processes::Guard,
    /// Its `instance` label in Prometheus.
    instance: String,
    /// The selector of its series of account BURST.
    sel: String,
}

impl LiveExporter {
    /// Starts it, adds it to Prometheus' configuration, and waits until its
    /// listener is up and its drop counter scraped at 0 (so that increase()
    /// sees it rise).
    async fn start(lab: &mut Lab) -> anyhow::Result<LiveExporter> {
        let port = nats_test_server::free_port();
        let process = processes::start_live_exporter(&lab.nats, port, lab.dir())?;
        let url = format!("http://127.0.0.1:{port}/metrics");
        processes::wait_http(&lab.http, &url, &process).await?;
        let both =
            processes::prometheus_config(&[lab.exporter_port, port], lab.app_port, &lab.rules_dir);
        lab.prometheus.reload(&both)?;
        let instance = format!("127.0.0.1:{port}");
        let sel = format!("{{instance=\"{instance}\",account=\"BURST\"}}");
        lab.wait_series(&format!("nats_delivery_advisory_listener_up{sel} == 1"))
            .await?;
        lab.wait_series(&format!(
            "nats_delivery_exporter_dropped_messages_total{sel} == 0"
        ))
        .await?;
        lab.report.note(&format!(
            "second exporter {instance}: live advisories of account BURST, --advisories-buffer 8"
        ));
        Ok(LiveExporter {
            process,
            instance,
            sel,
        })
    }

    /// Out of Prometheus' configuration first (its series end), then
    /// stopped: stopping it first would be an exporter down.
    async fn remove(mut self, lab: &mut Lab) -> anyhow::Result<()> {
        let one = processes::prometheus_config(&[lab.exporter_port], lab.app_port, &lab.rules_dir);
        lab.prometheus.reload(&one)?;
        let up = format!("up{{instance=\"{}\"}}", self.instance);
        let start = Instant::now();
        while !lab.prom.query(&up).await?.is_empty() {
            if start.elapsed() > WAIT {
                lab.report
                    .check(false, "the second exporter left Prometheus within 30 s");
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.process.kill();
        lab.report
            .note("the second exporter left Prometheus' configuration and was stopped");
        Ok(())
    }
}

/// Publishes [`BURST`] NAK advisories in account BURST, with a round trip
/// every [`BATCH`].
async fn publish_burst(lab: &Lab) -> anyhow::Result<()> {
    let burst = async_nats::ConnectOptions::new()
        .user_and_password("burst".into(), "burst-secret".into())
        .name("lab-burst")
        .connect(lab.nats.client_url())
        .await?;
    let started = Instant::now();
    for seq in 1..=BURST {
        let payload = format!(
            r#"{{"type":"io.nats.jetstream.advisory.v1.nak","id":"lab-{seq}","timestamp":"2026-01-01T00:00:00Z","stream":"LAB_BURST","consumer":"worker","consumer_seq":{seq},"stream_seq":{seq},"deliveries":1}}"#
        );
        burst
            .publish(
                "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.LAB_BURST.worker",
                payload.into(),
            )
            .await?;
        if seq % BATCH == 0 {
            // A request nobody answers is a round trip: the server has
            // routed everything published before it.
            let _ = burst.request("lab.burst.sync", "".into()).await;
        }
    }
    lab.report.note(&format!(
        "published {BURST} NAK advisories in account BURST in {:.2} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Every advisory the server delivered to the live exporter is counted or
/// counted as dropped, and some were dropped.
async fn check_counted_or_dropped(lab: &mut Lab, live: &LiveExporter) -> anyhow::Result<()> {
    let counted_q = format!(
        "sum(nats_delivery_jetstream_naks_total{{instance=\"{}\",account=\"BURST\"}})",
        live.instance
    );
    let dropped_q = format!(
        "sum(nats_delivery_exporter_dropped_messages_total{})",
        live.sel
    );
    let both_q = format!("{counted_q} + {dropped_q}");
    let got = lab.prom.settle(&both_q, BURST as f64, WAIT).await?;
    let server = delivered_by_server(lab).await?;
    // Beside the burst the connection carries the API audits of the
    // exporter's own JetStream requests and its start-up echo: at least the
    // burst, all of it delivered, so every drop is the exporter's.
    lab.report.check(
        server.is_some_and(|n| n >= BURST),
        &format!(
            "the server delivered {server:?} messages to the live exporter's connection, \
             the {BURST} advisories among them"
        ),
    );
    lab.report.count(
        "advisories counted + dropped by the exporter",
        BURST as f64,
        &both_q,
        got,
    );
    let dropped = lab.prom.value(&dropped_q).await?.unwrap_or(0.0);
    let counted = lab.prom.value(&counted_q).await?.unwrap_or(0.0);
    lab.report.check(
        dropped > 0.0,
        &format!(
            "the burst overflowed the 8-advisory buffer: {counted} counted, {dropped} dropped"
        ),
    );
    lab.report.fact(
        "advisories the live exporter dropped itself",
        dropped,
        "its JetStream counts are short by exactly this much",
    );
    Ok(())
}

/// A live-mode exporter with an 8-advisory buffer under a burst of 20,000
/// NAK advisories.
pub async fn exporter_drops(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsDeliveryExporterDroppedMessages";
    lab.report.scenario(
        "the exporter's own drops: a live-mode exporter with an 8-advisory buffer under a burst",
        &[alert],
    );
    let live = LiveExporter::start(lab).await?;
    publish_burst(lab).await?;
    check_counted_or_dropped(lab, &live).await?;
    let labels = [("instance", live.instance.as_str()), ("account", "BURST")];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    live.remove(lab).await
}
