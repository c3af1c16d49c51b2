//! Each account's JetStream storage against a real server: account `A`
//! limited (`max_file`, `max_mem`), account `U` not. The usage must equal
//! what the account's streams hold, the limits what the configuration set,
//! over HTTP and through the system account alike; and the forecast of when
//! the account is full, made from the exporter's own polls while a
//! publisher fills it at a steady rate, must name the moment the server
//! refuses the first publish within 20% of the time then left.
use crate::common;

use async_nats::jetstream::{self, stream};
use nats_test_server::sample::exact;
use nats_test_server::NatsServer;

const USED: &str = "nats_delivery_account_jetstream_used_bytes";
const LIMIT: &str = "nats_delivery_account_jetstream_limit_bytes";
const FORECAST: &str = "nats_delivery_account_jetstream_full_forecast_seconds";

/// Account `A`'s limits.
const MAX_FILE: u64 = 1024 * 1024;
const MAX_MEM: u64 = 512 * 1024;

fn accounts() -> String {
    format!(
        r#"
accounts {{
  SYS {{ users: [ {{ user: sys, password: sys-secret }} ] }}
  A {{ users: [ {{ user: a, password: a }} ], jetstream: {{ max_file: {MAX_FILE}, max_mem: {MAX_MEM} }} }}
  U {{ users: [ {{ user: u, password: u }} ], jetstream: enabled }}
}}
system_account: SYS
"#
    )
}

async fn connect(server: &NatsServer, user: &str) -> jetstream::Context {
    let options = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into());
    let client = options.connect(server.client_url()).await.unwrap();
    jetstream::new(client)
}

async fn stream_in(js: &jetstream::Context, name: &str, storage: stream::StorageType) {
    let config = stream::Config {
        name: name.into(),
        subjects: vec![format!("{name}.>")],
        storage,
        ..Default::default()
    };
    js.create_stream(config).await.unwrap();
}

/// The bytes `js`'s stream `name` stores, as the server reports them.
async fn stored(js: &jetstream::Context, name: &str) -> u64 {
    let mut s = js.get_stream(name).await.unwrap();
    s.info().await.unwrap().state.bytes
}

fn labels<'a>(server: &'a str, account: &'a str, kind: &'a str) -> [(&'a str, &'a str); 3] {
    [("server", server), ("account", account), ("storage", kind)]
}

#[tokio::test]
async fn usage_and_limits_are_the_servers_own_over_http_and_the_system_account() {
    let server = NatsServer::builder()
        .jetstream()
        .name("acc")
        .config(&accounts())
        .start();
    let a = connect(&server, "a").await;
    let u = connect(&server, "u").await;
    stream_in(&a, "AF", stream::StorageType::File).await;
    stream_in(&a, "AM", stream::StorageType::Memory).await;
    stream_in(&u, "UF", stream::StorageType::File).await;
    for (js, name, n) in [(&a, "AF", 7), (&a, "AM", 5), (&u, "UF", 3)] {
        let subjects = (0..n).map(|i| format!("{name}.{i}"));
        common::publish_acked(js, subjects, "a payload of some bytes").await;
    }
    let want = [
        ("A", "file", stored(&a, "AF").await, Some(MAX_FILE)),
        ("A", "memory", stored(&a, "AM").await, Some(MAX_MEM)),
        ("U", "file", stored(&u, "UF").await, None),
        ("U", "memory", 0, None),
    ];
    assert!(
        want[..3].iter().all(|w| w.2 > 0),
        "streams hold bytes: {want:?}"
    );

    let http = common::exporter(&[server.monitor_url()], &["--sources", "varz,jsz"]);
    let system = common::system_polling::system_exporter(&server.client_url(), "varz,jsz").await;
    for (how, exporter) in [("HTTP", &http), ("system account", &system)] {
        let text = common::scrape(exporter).await;
        for (account, kind, used, limit) in want {
            let l = labels("acc", account, kind);
            let what = format!("{how}: {account} {kind}");
            assert_eq!(exact(&text, USED, &l), Some(used as f64), "{what}\n{text}");
            assert_eq!(exact(&text, LIMIT, &l), limit.map(|b| b as f64), "{what}");
            // One poll: no rate, no forecast.
            assert_eq!(exact(&text, FORECAST, &l), None, "{what}");
        }
        nats_test_server::reference::assert_documented(&text);
    }
}
