//! Helpers for tests of applications using async-nats: numbered payloads,
//! the server's own per-connection and per-subscription counts, a
//! registry's exposition (read it with [`crate::sample`]).

use bytes::Bytes;
use prometheus_client::registry::Registry;

/// Payload of message `seq`: 12 ASCII digits and 1 KiB of padding (1,036
/// bytes), as in the slow-subscriber experiment.
pub fn payload(seq: u64) -> Bytes {
    let mut p = format!("{seq:012}").into_bytes();
    p.resize(12 + 1024, b'.');
    Bytes::from(p)
}

/// Length of every payload [`payload`] builds.
pub const PAYLOAD_LEN: u64 = 1036;

/// The sequence number in a payload built by [`payload`].
pub fn seq_of(payload: &[u8]) -> u64 {
    std::str::from_utf8(&payload[..12])
        .unwrap()
        .parse()
        .unwrap()
}

/// `registry` encoded as OpenMetrics text.
pub fn exposition(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// `out_msgs` the server reports for the connection named `name`: how many
/// messages the server wrote to that client (ground truth for arrivals).
pub fn server_out_msgs(server: &crate::NatsServer, name: &str) -> u64 {
    let body = crate::http_get(&format!("{}/connz", server.monitor_url()));
    let connz: serde_json::Value = serde_json::from_str(&body).unwrap();
    connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no connection named {name} in /connz"))["out_msgs"]
        .as_u64()
        .unwrap()
}

/// Publishes messages `0..n` on `subject` and waits until the server has them.
pub async fn publish_n(client: &async_nats::Client, subject: &str, n: u64) {
    for seq in 0..n {
        client
            .publish(subject.to_string(), payload(seq))
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
}

/// Returns once the server has processed everything `client` sent so far
/// (its subscriptions in particular). `flush` only empties the client's write
/// buffer; a request is a round trip, and the server handles one
/// connection's operations in order. Nobody answers, so the server replies
/// "no responders".
pub async fn sync_with_server(client: &async_nats::Client) {
    let reply = client
        .request("nats_delivery_test.sync", bytes::Bytes::new())
        .await;
    assert!(reply.is_err(), "nobody should answer the sync request");
}

/// Encodes `registry` as classic Prometheus text and asserts that
/// `promtool check metrics` accepts it without remarks.
pub fn assert_promtool_clean(registry: &Registry) {
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry).unwrap();
    crate::promtool::assert_metrics_clean(&text);
}

/// The subscriptions the server lists for the connection named `name`
/// (`/connz?subs=detail`, `subscriptions_list_detail`).
pub fn server_subscriptions(server: &crate::NatsServer, name: &str) -> Vec<serde_json::Value> {
    let body = crate::http_get(&format!("{}/connz?subs=detail", server.monitor_url()));
    let connz: serde_json::Value = serde_json::from_str(&body).unwrap();
    let connection = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no connection named {name} in /connz (cut by the server?)"));
    connection["subscriptions_list_detail"]
        .as_array()
        .unwrap()
        .clone()
}

/// `msgs` the server reports for subscription `sid` of connection `name`:
/// how many messages it sent that subscription (ground truth).
pub fn server_subscription_msgs(server: &crate::NatsServer, name: &str, sid: u64) -> u64 {
    server_subscriptions(server, name)
        .iter()
        .find(|s| s["sid"].as_str().and_then(|v| v.parse().ok()) == Some(sid))
        .unwrap_or_else(|| panic!("no subscription {sid} on {name}"))["msgs"]
        .as_u64()
        .unwrap()
}
