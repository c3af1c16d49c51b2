//! A server whose `/jsz` times out keeps what the exporter remembered of
//! its streams' and consumers' configuration: the first poll that answers
//! again asks for none of it, and its consumers still have their
//! configuration's series.
use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::fake_endpoint::{self, Reply};
use nats_test_server::sample::value;

/// One account, one stream, one consumer (`max_ack_pending` 7), its
/// configuration only when asked for.
fn jsz_reply(config: bool) -> String {
    let (stream_config, consumer_config) = if config {
        (
            r#""config":{"max_msgs":-1,"max_bytes":-1,"max_age":0,"discard":"old"},"#,
            r#""config":{"durable_name":"c","max_ack_pending":7,"ack_policy":"explicit"},"#,
        )
    } else {
        ("", "")
    };
    format!(
        r#"{{"now":"2026-01-01T00:00:10Z","account_details":[{{"name":"A","stream_detail":[{{"name":"S",{stream_config}"state":{{"messages":3,"first_seq":1,"last_seq":3}},"consumer_detail":[{{"name":"c",{consumer_config}"num_pending":3}}]}}]}}]}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_jsz_is_not_followed_by_a_full_configuration_read() {
    let hang = Arc::new(AtomicBool::new(false));
    let config_reads = Arc::new(AtomicUsize::new(0));
    let (hangs, reads) = (hang.clone(), config_reads.clone());
    let endpoint = fake_endpoint::start(move |path| {
        if hangs.load(Ordering::SeqCst) {
            return Reply::Hang;
        }
        let config = path.contains("config=true");
        reads.fetch_add(usize::from(config), Ordering::SeqCst);
        Reply::Fixed("200 OK", jsz_reply(config))
    })
    .await;
    let flags = [
        "--sources",
        "jsz",
        "--timeout",
        "1s",
        "--jsz-config-interval",
        "1h",
    ];
    let exporter = common::exporter(std::slice::from_ref(&endpoint.url), &flags);
    let consumer = [("stream", "S"), ("consumer", "c")];
    let max_ack_pending =
        |text: &str| value(text, "nats_delivery_consumer_max_ack_pending", &consumer);
    let up = |text: &str| value(text, "nats_delivery_up", &[("source", "jsz")]);
    let config_read = |text: &str| value(text, "nats_delivery_jsz_config_read", &[]);

    // Read once with the configuration, then kept.
    for read in [1.0, 0.0] {
        let text = common::scrape(&exporter).await;
        assert_eq!(config_read(&text), Some(read), "{text}");
        assert_eq!(max_ack_pending(&text), Some(7.0), "{text}");
    }
    assert_eq!(config_reads.load(Ordering::SeqCst), 1);

    hang.store(true, Ordering::SeqCst);
    let text = common::scrape(&exporter).await;
    assert_eq!(up(&text), Some(0.0), "{text}");
    hang.store(false, Ordering::SeqCst);

    let text = common::scrape(&exporter).await;
    assert_eq!(up(&text), Some(1.0), "{text}");
    assert_eq!(config_read(&text), Some(0.0), "{text}");
    assert_eq!(max_ack_pending(&text), Some(7.0), "{text}");
    assert_eq!(config_reads.load(Ordering::SeqCst), 1);
}
