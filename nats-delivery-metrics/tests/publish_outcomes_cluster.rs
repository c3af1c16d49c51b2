//! JetStream publish refusals in a 3-node cluster with an R3 stream: the
//! stream leader refuses as a single server does, and a stream that lost
//! its quorum answers nothing.

use std::time::Duration;

use async_nats::jetstream::stream::{Config, DiscardPolicy};
use nats_delivery_metrics::ClientMetrics;
use nats_test_server::app::exposition;
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;
use prometheus_client::registry::Registry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_r3_stream_refuses_by_limit_and_without_quorum_answers_nothing() {
    let v = nats_test_server::version_under_test();
    let mut servers = nats_test_server::cluster(3, "");
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("app", &mut registry);
    let options = async_nats::ConnectOptions::new();
    let client = metrics.connect(options, servers[0].client_url()).await;
    let client = client.unwrap();
    let context = async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(client.client().clone());
    let jetstream = metrics.jetstream_publisher(context).unwrap();
    let js = jetstream.context();
    let config = Config {
        name: "R3".into(),
        subjects: vec!["r3".into()],
        num_replicas: 3,
        max_messages: 5,
        discard: DiscardPolicy::New,
        ..Default::default()
    };
    let mut stream = created(js, config, &v).await;
    // A stream without limits for the publishes without quorum.
    let unlimited = Config {
        name: "R3_OPEN".into(),
        subjects: vec!["r3open".into()],
        num_replicas: 3,
        ..Default::default()
    };
    let mut open = created(js, unlimited, &v).await;
    let open_info = open.info().await.unwrap();
    let leader = open_info.cluster.as_ref().and_then(|c| c.leader.clone());
    let text = || exposition(&registry);
    let failures = |reason: &str| {
        let labels = [("client", "app"), ("reason", reason)];
        let name = "nats_delivery_client_jetstream_publish_failures_total";
        exact(&text(), name, &labels).unwrap() as u64
    };
    let stored = || {
        let name = "nats_delivery_client_jetstream_published_messages_total";
        exact(&text(), name, &[("client", "app")]).unwrap() as u64
    };
    let mut acked = 0;
    for _ in 0..12 {
        let answer = jetstream.publish("r3", "x".into()).await.unwrap().await;
        acked += u64::from(answer.is_ok());
    }
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!(
        (acked, state.messages, state.last_sequence),
        (5, 5, 5),
        "{v}"
    );
    assert_eq!((stored(), failures("max_messages")), (5, 7), "{v}");

    // Two of three servers gone: no leader can be elected. Where another
    // server led the stream, nothing on the client's server listens on its
    // subjects: no responders. Where the client's server led it, it takes
    // the publish and cannot replicate it: no answer (seen for every
    // publish, on every version; once it steps down, nothing listens).
    servers.truncate(1);
    // Until n0 has seen its routes close it still forwards to them.
    let routez = format!("{}/routez", servers[0].monitor_url());
    let routes = || {
        let body = nats_test_server::http_get(&routez);
        let routez: serde_json::Value = serde_json::from_str(&body).unwrap();
        routez["num_routes"].as_u64().unwrap()
    };
    Wait::secs("n0 without routes", 20)
        .every(Duration::from_millis(10))
        .until(|| routes() == 0)
        .await;
    for _ in 0..3 {
        let pending = jetstream.publish("r3open", "x".into()).await.unwrap();
        let answer = pending.await;
        eprintln!("{v}: {answer:?}");
        assert!(answer.is_err(), "{v}");
    }
    let (none, late) = (failures("no_responders"), failures("timed_out"));
    eprintln!("{v}: without quorum: {none} no_responders, {late} timed_out");
    eprintln!("{v}: the stream's leader was {leader:?}, the client's server n0");
    assert_eq!(none + late, 3, "{v}");
    if leader.as_deref() == Some("n0") {
        assert!(late >= 1, "{v}");
    } else {
        assert_eq!(none, 3, "{v}");
    }
    assert_eq!(stored(), 5, "{v}");
    assert_eq!(failures("other"), 0, "{v}");
}

/// The R3 stream of `config`, asked for again until the cluster makes it,
/// for up to 30 s: the meta group may still be electing its leader, and
/// under load a creation takes longer than the context's 2 s (kept short
/// for the publishes that must time out), though it may still happen.
async fn created(
    js: &async_nats::jetstream::Context,
    config: Config,
    v: &str,
) -> async_nats::jetstream::stream::Stream {
    Wait::secs(format!("{v}: the R3 stream"), 30)
        .every(Duration::from_millis(200))
        .until_async(async || js.get_or_create_stream(config.clone()).await)
        .await
}
