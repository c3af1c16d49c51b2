//! Priority groups with the `pinned_client` policy (nats-server 2.11+): the
//! exporter says whether a client is pinned to each group exactly when the
//! server's own /jsz does, before the first pull, after a pull pins one and
//! after the pin is lifted.
use crate::common;

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use nats_test_server::sample::{samples, value};
use nats_test_server::{http_get, NatsServer};
use serde_json::{json, Value};

/// The server's priority group entries for consumer `name` of stream WORK.
fn server_groups(server: &NatsServer, name: &str) -> Value {
    let url = format!("{}/jsz?consumers=true&config=true", server.monitor_url());
    let jsz: Value = serde_json::from_str(&http_get(&url)).unwrap();
    let streams = jsz["account_details"][0]["stream_detail"]
        .as_array()
        .unwrap();
    let work = streams.iter().find(|s| s["name"] == "WORK").unwrap();
    let consumers = work["consumer_detail"].as_array().unwrap();
    let c = consumers.iter().find(|c| c["name"] == name).unwrap();
    c["priority_groups"].clone()
}

/// Whether the server says a client is pinned to group `g` of `pinned`.
fn server_pinned(server: &NatsServer) -> bool {
    let groups = server_groups(server, "pinned");
    assert_eq!(groups.as_array().unwrap().len(), 1, "{groups}");
    assert_eq!(groups[0]["group"], "g");
    groups[0]["pinned_client_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty())
}

async fn api(client: &async_nats::Client, subject: String, body: Value) -> Value {
    let reply = client
        .request(subject, body.to_string().into())
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(v.get("error").is_none(), "{v}");
    v
}

/// Stream WORK with 3 messages and two consumers: "pinned" (pinned_client,
/// group g) and "spill" (overflow, group o).
async fn stream_with_two_priority_groups(client: &async_nats::Client) {
    let js = jetstream::new(client.clone());
    js.create_stream(jetstream::stream::Config {
        name: "WORK".into(),
        subjects: vec!["work.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    for (name, policy, group) in [("pinned", "pinned_client", "g"), ("spill", "overflow", "o")] {
        let config = json!({
            "durable_name": name,
            "ack_policy": "explicit",
            "priority_policy": policy,
            "priority_groups": [group],
            "priority_timeout": 60_000_000_000u64,
        });
        let body = json!({"stream_name": "WORK", "config": config});
        api(client, format!("$JS.API.CONSUMER.CREATE.WORK.{name}"), body).await;
    }
    for i in 0..3 {
        js.publish(format!("work.{i}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

/// Pulls one message from "pinned" in group g, which pins this client.
async fn pull_one_in_group_g(client: &async_nats::Client) {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await.unwrap();
    let pull = json!({"batch": 1, "group": "g", "expires": 5_000_000_000u64});
    client
        .publish_with_reply(
            "$JS.API.CONSUMER.MSG.NEXT.WORK.pinned",
            inbox,
            pull.to_string().into(),
        )
        .await
        .unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(5), replies.next())
        .await
        .expect("a message for the pull")
        .unwrap();
    assert_eq!(msg.subject.as_str(), "work.0");
}

#[tokio::test]
async fn the_pinned_gauge_follows_the_server_through_pin_and_unpin() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let version = client.server_info().version;
    if nats_test_server::version_numbers(&version) < vec![2, 11] {
        println!("nats-server {version} has no priority groups (2.11+): skipped");
        return;
    }
    stream_with_two_priority_groups(&client).await;
    // The pinned gauge is opt-in.
    let flags = [
        "--sources",
        "varz,jsz",
        "--consumer-opt-in-metrics",
        "nats_delivery_consumer_priority_group_pinned",
    ];
    let exporter = common::exporter(&[server.monitor_url()], &flags);
    let pinned = |text: &str| {
        let labels = [("stream", "WORK"), ("consumer", "pinned"), ("group", "g")];
        value(
            text,
            "nats_delivery_consumer_priority_group_pinned",
            &labels,
        )
    };

    // Nobody has pulled: the server pins nobody.
    assert!(!server_pinned(&server));
    let text = common::scrape(&exporter).await;
    assert_eq!(pinned(&text), Some(0.0), "{text}");
    // Only the pinned_client consumer has the family; overflow never pins.
    assert_eq!(
        samples(&text, "nats_delivery_consumer_priority_group_pinned", &[]).len(),
        1
    );
    assert_eq!(server_groups(&server, "spill")[0]["group"], "o");
    nats_test_server::reference::assert_documented(&text);
    // Not written by default.
    let default = common::exporter(&[server.monitor_url()], &flags[..2]);
    let default_text = common::scrape(&default).await;
    assert!(samples(
        &default_text,
        "nats_delivery_consumer_priority_group_pinned",
        &[]
    )
    .is_empty());

    // A pull in group g pins this client.
    pull_one_in_group_g(&client).await;
    assert!(server_pinned(&server));
    let text = common::scrape(&exporter).await;
    assert_eq!(pinned(&text), Some(1.0), "{text}");
    // A pin is not a label: still one series.
    assert_eq!(
        samples(&text, "nats_delivery_consumer_priority_group_pinned", &[]).len(),
        1
    );

    // Lifting the pin: nobody pinned again.
    api(
        &client,
        "$JS.API.CONSUMER.UNPIN.WORK.pinned".into(),
        json!({"group": "g"}),
    )
    .await;
    assert!(!server_pinned(&server));
    let text = common::scrape(&exporter).await;
    assert_eq!(pinned(&text), Some(0.0), "{text}");
}
