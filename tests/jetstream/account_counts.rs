//! Every account's streams and consumers, counted from the `/jsz` lists of
//! every polled server (no reply outside an account counts them): on one
//! server whatever the name filters leave out of the export, and on a
//! cluster where no server lists them all.
use crate::account_storage::{accounts, accounts_server, connect, stream_in};
use crate::common;

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use nats_test_server::sample::{exact, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const STREAMS: &str = "nats_delivery_account_jetstream_streams";
const CONSUMERS: &str = "nats_delivery_account_jetstream_consumers";

/// Makes a durable pull consumer `name` on `js`'s stream `stream`.
async fn consumer_on(js: &jetstream::Context, stream: &str, name: &str) {
    let config = async_nats::jetstream::consumer::pull::Config {
        durable_name: Some(name.into()),
        ..Default::default()
    };
    let s = js.get_stream(stream).await.unwrap();
    s.create_consumer(config).await.unwrap();
}

/// Without a NATS connection in the account, every account's streams and
/// consumers are counted from `/jsz`, over HTTP and through the system
/// account, whatever the stream and consumer filters leave out of the
/// export; their limits, which no reply outside the account gives, are
/// absent, and the server (not in operator mode) gets no `/accountz`
/// request for them.
#[tokio::test]
async fn every_accounts_streams_and_consumers_are_counted_from_jsz() {
    let server = accounts_server();
    let a = connect(&server, "a").await;
    let u = connect(&server, "u").await;
    for name in ["S1", "S2"] {
        stream_in(&a, name, stream::StorageType::File).await;
    }
    for name in ["U1", "U2", "U3"] {
        stream_in(&u, name, stream::StorageType::File).await;
    }
    // Consumers named alike on two streams are two consumers.
    for (js, stream, name) in [
        (&a, "S1", "c1"),
        (&a, "S1", "c2"),
        (&u, "U1", "c1"),
        (&u, "U2", "c1"),
        (&u, "U2", "c2"),
    ] {
        consumer_on(js, stream, name).await;
    }
    // (account, streams, consumers)
    let want = [("A", 2.0, 2.0), ("U", 3.0, 3.0)];
    let filters = [
        "--exclude-stream",
        "^S2$|^U3$",
        "--include-consumer",
        "^c1$",
    ];
    let flags: Vec<&str> = ["--sources", "varz,jsz"]
        .into_iter()
        .chain(filters)
        .collect();
    let options =
        async_nats::ConnectOptions::with_user_and_password("sys".into(), "sys-secret".into());
    let watcher = options.connect(server.client_url()).await.unwrap();
    let asked = crate::account_jwts::watch_accountz(&watcher).await;
    let http = common::exporter(&[server.monitor_url()], &flags);
    let url = server.client_url();
    let system = common::system_polling::system_exporter_with(&url, "varz,jsz", &filters).await;
    for (how, exporter) in [("HTTP", &http), ("system account", &system)] {
        let text = common::scrape(exporter).await;
        for (account, streams, consumers) in want {
            let l = [("account", account)];
            let got = [STREAMS, CONSUMERS].map(|name| exact(&text, name, &l));
            assert_eq!(
                got,
                [Some(streams), Some(consumers)],
                "{how}: {account}\n{text}"
            );
            for limit in ["max_streams", "max_consumers"] {
                let name = format!("nats_delivery_account_jetstream_{limit}");
                assert_eq!(exact(&text, &name, &l), None, "{how}: {account} {limit}");
            }
        }
        // The filters did apply to what is exported.
        let bytes = |stream| value(&text, "nats_delivery_stream_bytes", &[("stream", stream)]);
        assert!(bytes("S1").is_some() && bytes("S2").is_none(), "{how}");
        nats_test_server::reference::assert_documented(&text);
        // A second poll takes in what a read beside the first brought.
        let text = common::scrape(exporter).await;
        assert_eq!(
            exact(
                &text,
                "nats_delivery_account_jetstream_max_streams",
                &[("account", "A")]
            ),
            None,
            "{how}"
        );
    }
    // Not in operator mode: the accounts' JWTs are never asked for, through
    // the system account (a round trip first: what the server routed
    // before is delivered) nor over HTTP.
    watcher.flush().await.unwrap();
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0);
    let varz = common::monitor_json(&server.monitor_url(), "varz");
    assert_eq!(
        varz["http_req_stats"]["/accountz"],
        serde_json::Value::Null,
        "{varz}"
    );
}

/// On a cluster each server lists only the streams it holds a replica of:
/// account `U`'s R3 stream and three R2 streams, spread so that each server
/// lacks one, are its four streams only when every server's list is
/// counted; the consumers too.
#[tokio::test]
async fn a_clusters_accounts_count_the_streams_every_server_lists() {
    let servers = nats_test_server::cluster(3, &accounts());
    let u = connect(&servers[0], "u").await;
    let config = |name: &str, replicas| stream::Config {
        name: name.into(),
        subjects: vec![format!("{name}.>")],
        num_replicas: replicas,
        ..Default::default()
    };
    Wait::secs("a JetStream cluster ready for replicated streams", 30)
        .every(Duration::from_millis(200))
        .until_async(|| {
            let (u, config) = (u.clone(), config("R3", 3));
            async move { u.get_or_create_stream(config).await.ok() }
        })
        .await;
    for name in ["TWO0", "TWO1", "TWO2"] {
        u.create_stream(config(name, 2)).await.unwrap();
    }
    for (stream, consumer) in [("R3", "c"), ("TWO1", "c"), ("TWO2", "d")] {
        consumer_on(&u, stream, consumer).await;
    }
    // The premise: no server lists them all. 2.15 balances the R2 streams
    // so; 2.9 may put them all on the same two servers: a server that
    // lists every stream is taken out of one of its R2 streams
    // (`$JS.API.STREAM.PEER.REMOVE`), which goes to the server without it.
    let options = async_nats::ConnectOptions::with_user_and_password("u".into(), "u".into());
    let client = options.connect(servers[0].client_url()).await.unwrap();
    let listed = Wait::secs("no server listing every stream", 60)
        .every(Duration::from_millis(500))
        .until_async(async || {
            let lists: Vec<Vec<String>> = servers.iter().map(listing).collect();
            let Some(full) = lists.iter().position(|l| l.len() == 4) else {
                return Ok(lists.iter().map(Vec::len).collect::<Vec<_>>());
            };
            let two = lists[full].iter().find(|n| n.starts_with("TWO")).unwrap();
            let subject = format!("$JS.API.STREAM.PEER.REMOVE.{two}");
            let body = format!(r#"{{"peer":"n{full}"}}"#);
            // A removal under way is refused: asked again until it is done.
            let _ = client.request(subject, body.into()).await;
            Err(format!("{lists:?}"))
        })
        .await;
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    let exporter = common::exporter(&urls, &["--sources", "varz,jsz"]);
    let text = common::scrape(&exporter).await;
    let l = [("account", "U")];
    let got = [STREAMS, CONSUMERS].map(|name| exact(&text, name, &l));
    assert_eq!(
        got,
        [Some(4.0), Some(3.0)],
        "servers list {listed:?}\n{text}"
    );
}

/// The streams of account `U` that `server` lists.
fn listing(server: &NatsServer) -> Vec<String> {
    let path = "jsz?accounts=true&streams=true&acc=U";
    let jsz = common::monitor_json(&server.monitor_url(), path);
    let streams = jsz["account_details"][0]["stream_detail"]
        .as_array()
        .cloned();
    (streams.unwrap_or_default().iter())
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect()
}
