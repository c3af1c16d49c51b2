//! The JetStream limits of every account, read from its JWT in operator
//! mode (`/accountz?acc=`, or `ACCOUNTZ` through the system account): two
//! accounts with different limits, one flat and one tiered, each exported
//! as its JWT sets it, whether the exporter's NATS connection is in one of
//! them or in none. One request per account, counted by the server.
use crate::common;
use crate::operator_jwts::{Account, Operator};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::json;

const MAX_STREAMS: &str = "nats_delivery_account_jetstream_max_streams";
const MAX_CONSUMERS: &str = "nats_delivery_account_jetstream_max_consumers";

fn account(name: &str) -> Account {
    Account {
        key: nkeys::KeyPair::new_account(),
        name: name.into(),
    }
}

/// A connection to `server` as a new user of `account`, with a stream in
/// it (an account shows in `/jsz` once it uses JetStream).
async fn with_stream(op: &Operator, server: &NatsServer, account: &Account) -> async_nats::Client {
    let options = async_nats::ConnectOptions::with_credentials(&op.user(Some(account))).unwrap();
    let client = options.connect(server.client_url()).await.unwrap();
    let config = stream::Config {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        num_replicas: 1,
        ..Default::default()
    };
    jetstream::new(client.clone())
        .create_stream(config)
        .await
        .unwrap();
    client
}

/// Counts the `ACCOUNTZ` requests sent through the system account, as
/// `system` (a system-account user's connection) sees them.
pub(crate) async fn watch_accountz(system: &async_nats::Client) -> Arc<AtomicUsize> {
    let mut requests = system
        .subscribe("$SYS.REQ.SERVER.*.ACCOUNTZ")
        .await
        .unwrap();
    system.flush().await.unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while requests.next().await.is_some() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    count
}

/// The `/accountz` requests the server has answered over HTTP.
fn accountz_requests(server: &NatsServer) -> u64 {
    let varz = common::monitor_json(&server.monitor_url(), "varz");
    varz["http_req_stats"]["/accountz"].as_u64().unwrap_or(0)
}

/// Scrapes `exporter` until account `B`'s R1 tier limit shows (the reads
/// run beside the scrapes), and checks every limit of `A` and `B`.
async fn check_limits(how: &str, exporter: &nats_delivery_exporter::Exporter) {
    let tier = [("account", "B"), ("tier", "R1")];
    let text = Wait::secs("B's JWT limits", 30)
        .until_async(async || {
            let text = common::scrape(exporter).await;
            let family = "nats_delivery_account_jetstream_tier_max_streams";
            exact(&text, family, &tier).map(|_| text)
        })
        .await;
    let a = [("account", "A")];
    let b = [("account", "B")];
    let got = [
        exact(&text, MAX_STREAMS, &a),
        exact(&text, MAX_CONSUMERS, &a),
        exact(&text, MAX_STREAMS, &b),
        exact(&text, MAX_CONSUMERS, &b),
    ];
    assert_eq!(got, [Some(3.0), Some(4.0), None, None], "{how}\n{text}");
    let tier_family = |name: &str| format!("nats_delivery_account_jetstream_tier_{name}");
    let got = ["max_streams", "max_consumers"].map(|n| exact(&text, &tier_family(n), &tier));
    assert_eq!(got, [Some(6.0), Some(7.0)], "{how}");
    let limit = tier_family("limit_bytes");
    let kind = |k| [("account", "B"), ("tier", "R1"), ("storage", k)];
    assert_eq!(
        exact(&text, &limit, &kind("file")),
        Some(5_000_000.0),
        "{how}"
    );
    assert_eq!(
        exact(&text, &limit, &kind("memory")),
        None,
        "{how}: none allowed"
    );
    // B's usage per tier is only in $JS.API.INFO, within B.
    assert_eq!(
        exact(&text, &tier_family("used_bytes"), &kind("file")),
        None
    );
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test]
async fn every_accounts_jwt_limits_are_exported_as_set() {
    let mut op = Operator::new();
    let (a, b) = (account("A"), account("B"));
    let flat = json!({"mem_storage": 1000, "disk_storage": 2_000_000, "streams": 3, "consumer": 4});
    op.add(&a, flat);
    let r1 = json!({"disk_storage": 5_000_000, "streams": 6, "consumer": 7});
    op.add(&b, json!({"tiered_limits": {"R1": r1}}));
    let server = NatsServer::builder()
        .jetstream()
        .name("op")
        .config(&op.config())
        .start();
    let in_a = with_stream(&op, &server, &a).await;
    let _in_b = with_stream(&op, &server, &b).await;
    let flags = ["--sources", "varz,jsz"];

    // No NATS connection: both from their JWT, one request each.
    let none = common::exporter(&[server.monitor_url()], &flags);
    check_limits("no connection", &none).await;
    assert_eq!(accountz_requests(&server), 2);
    drop(none);

    // A connection in A: A's from $JS.API.INFO, B's from its JWT.
    let mut builder = common::exporter_builder(&[server.monitor_url()], &flags);
    builder.read_timestamps(nats_delivery_exporter::MessageTimestamps::new(
        in_a, "A", 100,
    ));
    check_limits("connection in A", &builder.build()).await;

    // Through the system account: its ACCOUNTZ requests, no HTTP.
    let before = accountz_requests(&server);
    let creds = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(creds.path(), op.user(None)).unwrap();
    let spec = format!("creds:{}", creds.path().display());
    let url = server.client_url();
    let options = async_nats::ConnectOptions::with_credentials(&op.user(None)).unwrap();
    let watcher = options.connect(&url).await.unwrap();
    let asked = watch_accountz(&watcher).await;
    let system = common::system_polling::system_exporter_as(&spec, &url, "varz,jsz", &[]).await;
    check_limits("system account", &system).await;
    assert_eq!(accountz_requests(&server), before);
    Wait::secs("the system account's two ACCOUNTZ requests", 30)
        .until(|| (asked.load(Ordering::SeqCst) >= 2).then_some(()))
        .await;
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}
