//! Starting the listeners the way `main` does: from the exporter's flags,
//! into the exporter's registry.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use clap::Parser;
use nats_delivery_exporter::{Config, Listeners};
use prometheus_client::registry::Registry;

/// Flags for advisory listeners of accounts APP and OTHER and the system
/// events listener on the server at `url`.
fn two_accounts_and_system_events(url: &str) -> Config {
    Config::try_parse_from([
        "nats-delivery-exporter",
        "--nats-servers",
        url,
        "--nats-account",
        "APP=user:app:app-secret",
        "--nats-account",
        "OTHER=user:other:other-secret",
        "--advisories",
        "--system-account",
        "user:sys:sys-secret",
    ])
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_start_from_flags_and_stop() {
    let s = server();
    let config = two_accounts_and_system_events(&s.client_url());
    let mut registry = Registry::default();
    let listeners = Listeners::start(&config.nats, &config.advisories, &mut registry).unwrap();
    for account in ["APP", "OTHER"] {
        wait_value(
            &registry,
            "nats_delivery_advisory_listener_up",
            &[("account", account)],
            1.0,
            20,
        )
        .await;
    }
    wait_value(
        &registry,
        "nats_delivery_system_events_listener_up",
        &[],
        1.0,
        20,
    )
    .await;
    let other = client(&s, "other").await;
    other
        .publish(
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C",
            r#"{"type":"io.nats.jetstream.advisory.v1.nak","stream":"S","consumer":"C","consumer_seq":3,"stream_seq":3,"deliveries":1}"#.into(),
        )
        .await
        .unwrap();
    other.flush().await.unwrap();
    let labels = [("account", "OTHER"), ("stream", "S"), ("consumer", "C")];
    wait_value(
        &registry,
        "nats_delivery_jetstream_naks_total",
        &labels,
        1.0,
        10,
    )
    .await;
    let text = encode(&registry);
    assert_eq!(
        exact(
            &text,
            "nats_delivery_advisories_received_total",
            &[("account", "APP")]
        ),
        Some(0.0)
    );
    nats_test_server::reference::assert_documented(&text);
    tokio::time::timeout(Duration::from_secs(15), listeners.stop())
        .await
        .unwrap();
    let text = encode(&registry);
    assert_eq!(
        exact(
            &text,
            "nats_delivery_advisory_listener_up",
            &[("account", "APP")]
        ),
        Some(0.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_system_events_listener_up", &[]),
        Some(0.0)
    );
}

#[tokio::test]
async fn nothing_is_registered_when_everything_is_off() {
    let config = Config::try_parse_from(["nats-delivery-exporter"]).unwrap();
    let mut registry = Registry::default();
    let listeners = Listeners::start(&config.nats, &config.advisories, &mut registry).unwrap();
    assert_eq!(encode(&registry), "# EOF\n");
    listeners.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_names_the_account_of_a_connection() {
    let s = server();
    let app = client(&s, "app").await;
    let version = nats_test_server::version_numbers(&app.server_info().version);
    let got = nats_delivery_exporter::server_account_name(&app).await;
    // $SYS.REQ.USER.INFO answers every user from 2.10 on.
    let want = (version >= vec![2, 10, 0]).then(|| "APP".to_string());
    assert_eq!(got, want);
}
