//! The series budget per consumer, counted on a real server: a consumer
//! with every limit set, paused, with a pinned_client priority group and
//! a removal forecast
//! (2.11+) has at most the number of series METRICS.md's sizing table
//! states for default flags, exactly; one like the scrape benchmark's has
//! fewer; and with every opt-in family and the whole status state set,
//! both have every series the families can write.
use crate::common;

use std::time::Duration;

use async_nats::jetstream;
use nats_test_server::NatsServer;
use serde_json::{json, Value};

/// The per-consumer series of `stream`/`consumer` in an exposition, by family.
fn series_of(text: &str, stream: &str, consumer: &str) -> Vec<String> {
    let has = |s: &nats_test_server::sample::Sample, k: &str, v: &str| {
        s.labels.iter().any(|(lk, lv)| lk == k && lv == v)
    };
    nats_test_server::sample::all(text)
        .into_iter()
        .filter(|s| has(s, "stream", stream) && has(s, "consumer", consumer))
        .map(|s| s.name)
        .collect()
}

/// "at most N series per consumer with default flags", as METRICS.md's
/// sizing table states it.
fn documented_budget() -> usize {
    let path = nats_test_server::workspace_root().join("METRICS.md");
    let text = std::fs::read_to_string(path).unwrap();
    let phrase = " series per consumer with default flags";
    let at = text
        .find(phrase)
        .expect("METRICS.md states the series budget");
    let number = text[..at].rsplit("at most ").next().unwrap();
    number.trim_matches('*').trim().parse().unwrap()
}

async fn api(client: &async_nats::Client, subject: String, body: Value) {
    let reply = client
        .request(subject, body.to_string().into())
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(v.get("error").is_none(), "{v}");
}

/// Stream S with 3 messages, a consumer "plain" with the defaults and a
/// consumer "full" with every limit (paused, with a pinned_client group, on
/// 2.11 and later).
async fn stream_with_plain_and_full_consumers(client: &async_nats::Client, since_2_11: bool) {
    let js = jetstream::new(client.clone());
    js.create_stream(jetstream::stream::Config {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        // A limit that removes: each consumer has a removal forecast.
        max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    // As the scrape benchmark's: defaults (max_ack_pending 1,000 set by
    // the server, max_deliver unlimited).
    api(
        client,
        "$JS.API.CONSUMER.CREATE.S.plain".into(),
        json!({"stream_name": "S", "config": {"durable_name": "plain", "ack_policy": "explicit"}}),
    )
    .await;
    // Every limit; paused with a pinned_client group where the server has them.
    let mut config = json!({
        "durable_name": "full",
        "ack_policy": "explicit",
        "max_deliver": 5,
        "max_ack_pending": 100,
        "ack_wait": 30_000_000_000u64,
    });
    if since_2_11 {
        let until = time::OffsetDateTime::now_utc() + Duration::from_secs(3600);
        let until = until
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        config["pause_until"] = json!(until);
        config["priority_policy"] = json!("pinned_client");
        config["priority_groups"] = json!(["g"]);
        config["priority_timeout"] = json!(60_000_000_000u64);
    }
    api(
        client,
        "$JS.API.CONSUMER.CREATE.S.full".into(),
        json!({"stream_name": "S", "config": config}),
    )
    .await;
    // Stored messages, so that the stream has times to estimate lag from.
    common::publish_acked(&js, (0..3).map(|i| format!("s.{i}")), "x").await;
}

#[tokio::test]
async fn a_consumer_costs_at_most_the_documented_series() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let version = client.server_info().version;
    let since_2_11 = nats_test_server::version_numbers(&version) >= vec![2, 11];
    stream_with_plain_and_full_consumers(&client, since_2_11).await;

    let url = [server.monitor_url()];
    let default = common::exporter(&url, &["--sources", "varz,jsz"]);
    let everything = common::exporter(
        &url,
        &[
            "--sources",
            "varz,jsz",
            "--consumer-status-series",
            "all",
            "--consumer-opt-in-metrics",
            "all",
        ],
    );
    // A first scrape reads /varz, which tells whether pausing is reported.
    common::scrape(&default).await;
    common::scrape(&everything).await;
    let text = common::scrape(&default).await;
    let all_text = common::scrape(&everything).await;

    let budget = documented_budget();
    let full = series_of(&text, "S", "full");
    // 5 levels and positions, max_ack_pending, paused (2.11+), status,
    // delivery lag, oldest unacknowledged age, removed before delivery,
    // removal forecast; max_deliver is opt-in, so both consumers cost the same.
    let paused = usize::from(since_2_11);
    assert_eq!(full.len(), budget - 1 + paused, "{version}: {full:?}");
    let plain = series_of(&text, "S", "plain");
    assert_eq!(plain.len(), budget - 1 + paused, "{version}: {plain:?}");
    for family in [
        "nats_delivery_consumer_status",
        "nats_delivery_consumer_delivery_lag_seconds",
        "nats_delivery_consumer_removal_forecast_seconds",
    ] {
        assert!(full.iter().any(|f| f == family), "{family}: {full:?}");
    }

    // Everything: the six other statuses at 0, deliveries_total, ack_wait,
    // the three _exact gauges, the ack floor, max_deliver (full only), and on 2.11+
    // pause_remaining and the pinned gauge; never delivered, so neither
    // last_*_age.
    let all_full = series_of(&all_text, "S", "full");
    assert_eq!(
        all_full.len(),
        full.len() + 6 + 7 + 2 * paused,
        "{version}: {all_full:?}"
    );
    let all_plain = series_of(&all_text, "S", "plain");
    assert_eq!(
        all_plain.len(),
        plain.len() + 6 + 6,
        "{version}: {all_plain:?}"
    );
    nats_test_server::reference::assert_documented(&text);
    nats_test_server::reference::assert_documented(&all_text);
}
