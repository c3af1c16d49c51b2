//! Shared by the tests of polling through the system account: the
//! accounts, the exporter, the JetStream scenario and the series compared
//! with HTTP polling.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use clap::Parser;
use futures::StreamExt;
use nats_delivery_exporter::{Config, Exporter, ExporterBuilder};
use nats_test_server::wait::Wait;

/// A system account `SYS` and a JetStream account `APP`, one user each.
pub const ACCOUNTS: &str = r#"
accounts {
  SYS { users: [ { user: sys, password: sys-secret } ] }
  APP { users: [ { user: app, password: app-secret } ], jetstream: enabled }
}
system_account: SYS
"#;

/// A JetStream server with [`ACCOUNTS`], and a client of its user `app`.
pub async fn server_and_app() -> (nats_test_server::NatsServer, async_nats::Client) {
    let server = nats_test_server::NatsServer::builder()
        .jetstream()
        .config(ACCOUNTS)
        .start();
    let app = async_nats::ConnectOptions::with_user_and_password("app".into(), "app-secret".into())
        .connect(server.client_url())
        .await
        .unwrap();
    (server, app)
}

/// An exporter polling every server it finds through the system account
/// of `client_url`'s server, with `--sources sources` and no monitoring URL.
pub async fn system_exporter(client_url: &str, sources: &str) -> Exporter {
    system_exporter_with(client_url, sources, &[]).await
}

/// [`system_exporter`] with more flags.
pub async fn system_exporter_with(client_url: &str, sources: &str, extra: &[&str]) -> Exporter {
    system_exporter_as("user:sys:sys-secret", client_url, sources, extra).await
}

/// [`system_exporter_with`] as the system-account user `credentials`
/// (a `--system-account` value).
pub async fn system_exporter_as(
    credentials: &str,
    client_url: &str,
    sources: &str,
    extra: &[&str],
) -> Exporter {
    let flags = [
        "nats-delivery-exporter",
        "--system-account-polling",
        "--system-account",
        credentials,
        "--nats-servers",
        client_url,
        "--system-survey-gap",
        "300ms",
        "--consumer-status-window",
        "0s",
        "--sources",
        sources,
    ];
    let config = Config::try_parse_from(flags.iter().chain(extra)).expect("valid flags");
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

/// Every sample of the stream and consumer families, by series.
pub fn jetstream_samples(text: &str) -> BTreeMap<String, f64> {
    nats_test_server::sample::all(text)
        .into_iter()
        .filter(|s| {
            s.name.starts_with("nats_delivery_stream_")
                || s.name.starts_with("nats_delivery_consumer_")
        })
        // Ages move between two scrapes.
        .filter(|s| !s.name.contains("_age_seconds"))
        .map(|s| (format!("{}{:?}", s.name, s.labels), s.value))
        .collect()
}

/// As the `APP` user on `client_url`'s server: an R3 stream `WORK` of 20
/// messages with two durable pull consumers, `fast` (nothing taken) and
/// `slow` (eight taken: five acknowledged, three held for 120 s).
pub async fn work_stream(client_url: &str) -> jetstream::Context {
    let app = async_nats::ConnectOptions::with_user_and_password("app".into(), "app-secret".into())
        .connect(client_url)
        .await
        .unwrap();
    let js = jetstream::new(app);
    let st = Wait::secs("a JetStream cluster ready for R3 streams", 30)
        .every(Duration::from_millis(200))
        .until_async(|| {
            let js = js.clone();
            async move {
                js.get_or_create_stream(stream::Config {
                    name: "WORK".into(),
                    subjects: vec!["work.>".into()],
                    num_replicas: 3,
                    ..Default::default()
                })
                .await
                .ok()
            }
        })
        .await;
    for name in ["fast", "slow"] {
        st.create_consumer(pull::Config {
            durable_name: Some(name.into()),
            ack_wait: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    super::publish_acked(&js, (0..20).map(|i| format!("work.{i}")), "m").await;
    let slow: jetstream::consumer::PullConsumer = st.get_consumer("slow").await.unwrap();
    let mut taken = 0;
    Wait::secs("8 messages to come", 30)
        .every(Duration::ZERO)
        .until_async(async || {
            if taken >= 8 {
                return Ok(());
            }
            let mut batch = slow
                .fetch()
                .max_messages(8 - taken)
                .expires(Duration::from_secs(1))
                .messages()
                .await
                .unwrap();
            while let Some(m) = batch.next().await {
                let m = m.unwrap();
                if taken < 5 {
                    m.ack().await.unwrap();
                }
                taken += 1;
            }
            Err(taken)
        })
        .await;
    js
}
