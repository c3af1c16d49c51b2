//! The failures a replicated group tolerates by its size, on a real 3-node
//! cluster: an R2 stream tolerates none (its margin of 0 is its design), an
//! R3 one tolerates 1; per stream, its consumers' fewest (0 with an R2
//! consumer, whose margin of 0 is its design too).
use crate::common;

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;

use common::system_polling::ACCOUNTS;

/// (replicas, margin, failures tolerated, consumers' smallest margin,
/// consumers' fewest failures tolerated) of `stream` in account APP.
type Figures = [Option<f64>; 5];

fn figures(text: &str, stream: &str) -> Figures {
    let s = [("account", "APP"), ("stream", stream)];
    [
        "nats_delivery_stream_replicas",
        "nats_delivery_stream_replica_margin",
        "nats_delivery_stream_replica_failures_tolerated",
        "nats_delivery_stream_consumer_replica_margin_min",
        "nats_delivery_stream_consumer_replica_failures_tolerated_min",
    ]
    .map(|name| value(text, name, &s))
}

#[tokio::test]
async fn an_r2_group_tolerates_no_failure_and_an_r3_group_one() {
    let servers = nats_test_server::cluster(3, ACCOUNTS);
    let app = async_nats::ConnectOptions::with_user_and_password("app".into(), "app-secret".into())
        .connect(servers[0].client_url())
        .await
        .unwrap();
    let js = jetstream::new(app);
    // (stream, its replicas, its consumers' replicas)
    let made = [("PAIR", 2, vec![2]), ("TRIO", 3, vec![3, 2])];
    for (name, replicas, consumers) in &made {
        let st = Wait::secs("a JetStream cluster ready for replicated streams", 30)
            .every(Duration::from_millis(200))
            .until_async(|| {
                let js = js.clone();
                async move {
                    js.get_or_create_stream(stream::Config {
                        name: name.to_string(),
                        subjects: vec![format!("{}.>", name.to_lowercase())],
                        num_replicas: *replicas,
                        ..Default::default()
                    })
                    .await
                    .ok()
                }
            })
            .await;
        for r in consumers {
            st.create_consumer(pull::Config {
                durable_name: Some(format!("r{r}")),
                num_replicas: *r,
                ..Default::default()
            })
            .await
            .unwrap();
        }
    }
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    let exporter = common::exporter(&urls, &["--sources", "varz,jsz", "--timeout", "1s"]);
    // Every replica current: each margin equals what its size tolerates.
    let pair = [Some(2.0), Some(0.0), Some(0.0), Some(0.0), Some(0.0)];
    let trio = [Some(3.0), Some(1.0), Some(1.0), Some(0.0), Some(0.0)];
    // Gives up with the figures last seen.
    let text = Wait::secs("every replica current", 30)
        .every(Duration::from_millis(200))
        .until_async(|| async {
            let text = common::scrape(&exporter).await;
            let seen = (figures(&text, "PAIR"), figures(&text, "TRIO"));
            if seen == (pair, trio) {
                Ok(text)
            } else {
                Err(seen)
            }
        })
        .await;
    nats_test_server::reference::assert_documented(&text);
}
