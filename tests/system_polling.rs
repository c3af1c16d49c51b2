//! Polling a whole cluster through one system-account connection, against a
//! real 3-node cluster with R3 streams: every server is reported, every
//! stream and consumer once with the values HTTP polling of all three
//! servers gives; a killed server is down for every source, named by the
//! survey's counts, and its consumers come back once from their new leaders.
mod common;

use common::system_polling::{jetstream_samples, system_exporter, work_stream, ACCOUNTS};
use nats_test_server::sample::{samples, value};

const SOURCES: &str = "varz,connz,jsz,accstatz,routez";

fn up(text: &str, server: &str) -> Vec<(String, f64)> {
    samples(text, "nats_delivery_up", &[("server", server)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_system_connection_reports_the_cluster_as_http_polling_does() {
    let mut servers = nats_test_server::cluster(3, ACCOUNTS);
    let _js = work_stream(&servers[0].client_url()).await;
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    let http = common::exporter(
        &urls,
        &["--consumer-status-window", "0s", "--sources", SOURCES],
    );
    let system = system_exporter(&servers[0].client_url(), SOURCES).await;

    // Every server found, every source up, the JetStream series equal to
    // what HTTP polling of all three servers gives (acks settle meanwhile,
    // so both are read until they agree).
    let (via_http, via_system) = common::wait_for_async(30, "the same JetStream series", || {
        let (http, system) = (&http, &system);
        async move {
            let h = common::scrape(http).await;
            let s = common::scrape(system).await;
            let same = jetstream_samples(&h) == jetstream_samples(&s)
                && value(&s, "nats_delivery_survey_servers_answered", &[]) == Some(3.0);
            same.then_some((h, s))
        }
    })
    .await;
    for name in ["n0", "n1", "n2"] {
        let up = up(&via_system, name);
        assert_eq!(up.len(), 5, "{name}: {up:?}");
        assert!(up.iter().all(|(_, v)| *v == 1.0), "{name}: {up:?}");
    }
    let held = [("stream", "WORK"), ("consumer", "slow")];
    let pick = |name| samples(&via_system, name, &held);
    assert_eq!(
        pick("nats_delivery_consumer_ack_pending_messages"),
        samples(
            &via_http,
            "nats_delivery_consumer_ack_pending_messages",
            &held
        )
    );
    let ack_pending = pick("nats_delivery_consumer_ack_pending_messages");
    assert_eq!(ack_pending.len(), 1, "reported once: {ack_pending:?}");
    assert_eq!(ack_pending[0].1, 3.0);
    assert_eq!(
        value(
            &via_system,
            "nats_delivery_consumer_pending_messages",
            &held
        ),
        Some(12.0)
    );
    assert_eq!(
        value(
            &via_system,
            "nats_delivery_stream_messages",
            &[("stream", "WORK")]
        ),
        Some(20.0)
    );
    assert_eq!(
        value(&via_system, "nats_delivery_survey_servers_expected", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(&via_system, "nats_delivery_survey_up", &[]),
        Some(1.0)
    );

    // n2 killed: down for every source, the survey says one is missing,
    // and each consumer is still reported once, from a leader that lives.
    let _ = servers.remove(2);
    let text = common::wait_for_async(60, "every consumer again, once each", || {
        let system = &system;
        async move {
            let text = common::scrape(system).await;
            let once = ["fast", "slow"].iter().all(|c| {
                samples(
                    &text,
                    "nats_delivery_consumer_ack_pending_messages",
                    &[("consumer", c)],
                )
                .len()
                    == 1
            });
            once.then_some(text)
        }
    })
    .await;
    let down = up(&text, "n2");
    assert_eq!(down.len(), 5, "{down:?}");
    assert!(down.iter().all(|(_, v)| *v == 0.0), "{down:?}");
    assert!(
        value(
            &text,
            "nats_delivery_scrape_errors_total",
            &[("server", "n2"), ("source", "jsz"), ("kind", "no_reply")]
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "nats_delivery_survey_servers_expected", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(&text, "nats_delivery_survey_servers_answered", &[]),
        Some(2.0)
    );
    assert_eq!(
        value(&text, "nats_delivery_consumer_ack_pending_messages", &held),
        Some(3.0)
    );
    for name in ["n0", "n1"] {
        assert!(up(&text, name).iter().all(|(_, v)| *v == 1.0), "{name}");
    }
}
