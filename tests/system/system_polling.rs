//! Polling a whole cluster through one system-account connection, against a
//! real 3-node cluster with R3 streams: every server is reported, every
//! stream and consumer once with the values HTTP polling of all three
//! servers gives; a killed server is down for every source, named by the
//! survey's counts, and its consumers come back once from their new leaders.
use crate::common;

use async_nats::jetstream::{self, stream};
use clap::Parser;
use common::system_polling::{jetstream_samples, work_stream};
use nats_delivery_exporter::{Config, Exporter, ExporterBuilder};
use nats_test_server::sample::{samples, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// The exporter's user holds only the permissions docs/operators.md gives.
const ACCOUNTS: &str = r#"
accounts {
  SYS { users: [ { user: watcher, password: watcher-secret, permissions: {
    publish: { allow: [
      "$SYS.REQ.SERVER.PING.VARZ",
      "$SYS.REQ.SERVER.*.VARZ", "$SYS.REQ.SERVER.*.CONNZ", "$SYS.REQ.SERVER.*.JSZ",
      "$SYS.REQ.SERVER.*.ROUTEZ", "$SYS.REQ.SERVER.*.GATEWAYZ",
      "$SYS.REQ.ACCOUNT.PING.STATZ"
    ] },
    subscribe: { allow: [ "_INBOX.>", "$SYS.ACCOUNT.*.DISCONNECT",
                          "$JS.EVENT.ADVISORY.API.LIMIT_REACHED" ] }
  } } ] }
  APP { users: [ { user: app, password: app-secret } ], jetstream: enabled }
  OPS { users: [ { user: ops, password: ops-secret } ], jetstream: enabled }
}
system_account: SYS
"#;

const SOURCES: &str = "varz,connz,jsz,accstatz,routez";

async fn system_exporter(server: &NatsServer, extra: &[&str]) -> Exporter {
    let url = server.client_url();
    let mut args = vec![
        "nats-delivery-exporter",
        "--system-account-polling",
        "--system-account",
        "user:watcher:watcher-secret",
        "--nats-servers",
        &url,
        "--system-survey-gap",
        "300ms",
        "--consumer-status-window",
        "0s",
        // One account per JSZ request: paging over NATS too.
        "--jsz-page-size",
        "1",
    ];
    if !extra.contains(&"--sources") {
        args.extend(["--sources", SOURCES]);
    }
    args.extend(extra);
    let config = Config::try_parse_from(args).expect("valid flags");
    let polling = nats_delivery_exporter::connect_system_polling(config.system_poll_settings())
        .await
        .expect("system polling");
    // The connection comes up in the background; until it does, a scrape
    // reports the survey down, which is not what these tests look at.
    Wait::secs("the system-account connection", 20)
        .until(|| polling.is_connected().then_some(()))
        .await;
    let mut exporter = ExporterBuilder::new(config.scrape_settings()).expect("exporter");
    exporter.poll_through_system_account(polling);
    exporter.build()
}

fn up(text: &str, server: &str) -> Vec<(String, f64)> {
    samples(text, "nats_delivery_up", &[("server", server)])
}

/// A stream AUDIT of 3 messages in account OPS, created on the server at
/// `url`.
async fn audit_stream_of_ops(url: &str) {
    let ops = async_nats::ConnectOptions::with_user_and_password("ops".into(), "ops-secret".into())
        .connect(url)
        .await
        .unwrap();
    let ops = jetstream::new(ops);
    ops.create_stream(stream::Config {
        name: "AUDIT".into(),
        subjects: vec!["audit.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    common::publish_acked(&ops, (0..3).map(|i| format!("audit.{i}")), "m").await;
}

/// Every server up for every source, and the WORK consumer "slow" and the
/// streams of both accounts as HTTP polling reports them, each consumer once.
fn assert_cluster_as_http_reports_it(via_system: &str, via_http: &str) {
    for name in ["n0", "n1", "n2"] {
        let up = up(via_system, name);
        assert_eq!(up.len(), 5, "{name}: {up:?}");
        assert!(up.iter().all(|(_, v)| *v == 1.0), "{name}: {up:?}");
    }
    let held = [("stream", "WORK"), ("consumer", "slow")];
    let pick = |name| samples(via_system, name, &held);
    assert_eq!(
        pick("nats_delivery_consumer_ack_pending_messages"),
        samples(
            via_http,
            "nats_delivery_consumer_ack_pending_messages",
            &held
        )
    );
    let ack_pending = pick("nats_delivery_consumer_ack_pending_messages");
    assert_eq!(ack_pending.len(), 1, "reported once: {ack_pending:?}");
    assert_eq!(ack_pending[0].1, 3.0);
    assert_eq!(
        value(via_system, "nats_delivery_consumer_pending_messages", &held),
        Some(12.0)
    );
    assert_eq!(
        value(
            via_system,
            "nats_delivery_stream_messages",
            &[("stream", "WORK")]
        ),
        Some(20.0)
    );
    let audit = [("account", "OPS"), ("stream", "AUDIT")];
    assert_eq!(
        value(via_system, "nats_delivery_stream_messages", &audit),
        Some(3.0)
    );
    assert_eq!(
        value(via_system, "nats_delivery_survey_servers_expected", &[]),
        Some(3.0)
    );
    assert_eq!(value(via_system, "nats_delivery_survey_up", &[]), Some(1.0));
}

/// The servers' own filters: a name filter leaves two servers out, never
/// expected, never reported; a cluster filter keeps all three, or none when
/// it names another cluster. Without /varz the survey still names each
/// server, so each stream and consumer is taken from its leader.
async fn servers_own_filters_apply(server: &NatsServer, via_http: &str) {
    let only_n1 = system_exporter(server, &["--system-server-name", "n1"]).await;
    let text = common::scrape(&only_n1).await;
    assert_eq!(up(&text, "n0").len() + up(&text, "n2").len(), 0, "{text}");
    assert_eq!(up(&text, "n1").len(), 5, "{text}");
    for gauge in ["expected", "answered"] {
        let name = format!("nats_delivery_survey_servers_{gauge}");
        assert_eq!(value(&text, &name, &[]), Some(1.0), "{gauge}");
    }
    let cluster = system_exporter(server, &["--system-cluster", "C"]).await;
    let text = common::scrape(&cluster).await;
    assert_eq!(
        value(&text, "nats_delivery_survey_servers_answered", &[]),
        Some(3.0)
    );
    // Without /varz the survey still names each server, so each stream
    // and consumer is taken from its leader.
    let jsz_only = system_exporter(server, &["--sources", "jsz"]).await;
    let text = common::scrape(&jsz_only).await;
    assert_eq!(jetstream_samples(&text), jetstream_samples(via_http));
    let elsewhere = system_exporter(server, &["--system-cluster", "EAST"]).await;
    let text = common::scrape(&elsewhere).await;
    assert_eq!(
        value(&text, "nats_delivery_survey_servers_answered", &[]),
        Some(0.0)
    );
    assert!(!text.contains("nats_delivery_up{"), "{text}");
}

/// n2 down for every source and missing from the survey; the consumer "slow"
/// reported from a leader that lives.
fn assert_n2_missing_and_leaders_alive(text: &str) {
    let held = [("stream", "WORK"), ("consumer", "slow")];
    let down = up(text, "n2");
    assert_eq!(down.len(), 5, "{down:?}");
    assert!(down.iter().all(|(_, v)| *v == 0.0), "{down:?}");
    assert!(
        value(
            text,
            "nats_delivery_scrape_errors_total",
            &[("server", "n2"), ("source", "jsz"), ("kind", "no_reply")]
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(
        value(text, "nats_delivery_survey_servers_expected", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(text, "nats_delivery_survey_servers_answered", &[]),
        Some(2.0)
    );
    for (name, answered) in [("n0", 1.0), ("n1", 1.0), ("n2", 0.0)] {
        let labels = [("server", name)];
        let v = value(text, "nats_delivery_survey_server_answered", &labels);
        assert_eq!(v, Some(answered), "{name}");
    }
    assert_eq!(
        value(text, "nats_delivery_consumer_ack_pending_messages", &held),
        Some(3.0)
    );
    for name in ["n0", "n1"] {
        assert!(up(text, name).iter().all(|(_, v)| *v == 1.0), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_system_connection_reports_the_cluster_as_http_polling_does() {
    let mut servers = nats_test_server::cluster(3, ACCOUNTS);
    let _js = work_stream(&servers[0].client_url()).await;
    audit_stream_of_ops(&servers[1].client_url()).await;
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    let http = common::exporter(
        &urls,
        &["--consumer-status-window", "0s", "--sources", SOURCES],
    );
    let system = system_exporter(&servers[0], &[]).await;

    // Every server found, every source up, the JetStream series equal to
    // what HTTP polling of all three servers gives (acks settle meanwhile,
    // so both are read until they agree).
    let (via_http, via_system) = Wait::secs("the same JetStream series", 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| {
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
    nats_test_server::reference::assert_documented(&via_system);
    nats_test_server::promtool::assert_metrics_clean(&via_system);
    assert_cluster_as_http_reports_it(&via_system, &via_http);

    servers_own_filters_apply(&servers[0], &via_http).await;

    // n2 killed: down for every source, the survey says one is missing,
    // and each consumer is still reported once, from a leader that lives.
    let _ = servers.remove(2);
    let first = common::scrape(&system).await;
    let down = up(&first, "n2");
    assert_eq!(down.len(), 5, "within one scrape: {down:?}");
    assert!(down.iter().all(|(_, v)| *v == 0.0), "{down:?}");
    assert_eq!(
        value(&first, "nats_delivery_survey_servers_answered", &[]),
        Some(2.0)
    );
    let text = Wait::secs("every consumer again, once each", 60)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| {
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
    assert_n2_missing_and_leaders_alive(&text);
}

/// The binary itself: `--system-account-polling` connects, surveys and
/// polls with no `--monitor-url` at all.
#[tokio::test]
async fn the_binary_polls_through_the_system_account() {
    let server = NatsServer::builder()
        .name("solo")
        .jetstream()
        .config(ACCOUNTS)
        .start();
    let port = nats_test_server::free_port();
    let child = common::KilledOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args([
                "--system-account-polling",
                "--nats-servers",
                &server.client_url(),
            ])
            .args(["--system-account", "user:watcher:watcher-secret"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("NATS_DELIVERY_LOG", "warn")
            .env_remove("NATS_DELIVERY_MONITOR_URL")
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = Wait::secs("solo polled through the system account", 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| {
            let url = url.clone();
            async move {
                let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
                let jsz = value(
                    &text,
                    "nats_delivery_up",
                    &[("server", "solo"), ("source", "jsz")],
                );
                (jsz == Some(1.0)).then_some(text)
            }
        })
        .await;
    assert_eq!(up(&text, "solo").len(), 4, "{text}");
    assert!(up(&text, "solo").iter().all(|(_, v)| *v == 1.0), "{text}");
    assert_eq!(
        value(&text, "nats_delivery_survey_servers_answered", &[]),
        Some(1.0)
    );
    assert!(!text.contains("127.0.0.1:8222"), "{text}");

    // The exporter cut off: the survey is down, not every server missing.
    drop(server);
    let text = Wait::secs("the survey down", 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| {
            let url = url.clone();
            async move {
                let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
                let survey = value(&text, "nats_delivery_survey_up", &[]);
                (survey == Some(0.0)).then_some(text)
            }
        })
        .await;
    drop(child);
    assert!(up(&text, "solo").iter().all(|(_, v)| *v == 0.0), "{text}");
    let nats = [("server", "solo"), ("source", "jsz"), ("kind", "nats")];
    assert!(
        value(&text, "nats_delivery_scrape_errors_total", &nats).is_some_and(|n| n >= 1.0),
        "{text}"
    );
}
