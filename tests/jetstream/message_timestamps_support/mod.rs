//! Shared by the message timestamp tests: requests, streams with known
//! contents, the server's stored times, requests counted by the server.
#![allow(dead_code)]

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use nats_delivery_exporter::{is_2_10_or_later, MessageTimestamps, TimestampRequest};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// Time allowed for reads a server answers.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// A request for the first message at or after `from_seq` matching `filters`.
pub fn request(account: &str, stream: &str, from_seq: u64, filters: &[&str]) -> TimestampRequest {
    TimestampRequest {
        account: account.into(),
        stream: stream.into(),
        from_seq,
        filters: filters.iter().map(|f| f.to_string()).collect(),
    }
}

/// Creates `name` capturing `<name>.>` and stores `subjects` in order (seq 1, 2, ...).
pub async fn stream_with(
    js: &jetstream::Context,
    name: &str,
    allow_direct: bool,
    subjects: &[&str],
) {
    js.create_stream(stream::Config {
        name: name.into(),
        subjects: vec![format!("{name}.>")],
        allow_direct,
        ..Default::default()
    })
    .await
    .unwrap();
    for s in subjects {
        js.publish(format!("{name}.{s}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

/// The server's stored time of `seq`, as the reader reports it.
pub async fn stored_time(js: &jetstream::Context, stream: &str, seq: u64) -> f64 {
    let m = js
        .get_stream(stream)
        .await
        .unwrap()
        .get_raw_message(seq)
        .await
        .unwrap();
    m.time.unix_timestamp_nanos() as f64 / 1e9
}

/// Counts the messages the server received from one named connection
/// (`in_msgs` in /connz): the reader publishes nothing but its requests.
/// A subscriber on the request subjects would count them too, but would
/// also be a responder, and a direct get it takes is never answered.
pub struct RequestCounter {
    connz: String,
    name: String,
    reader: MessageTimestamps,
    seen: u64,
    reader_seen: u64,
}

impl RequestCounter {
    /// Counts what `reader`'s connection, named `name`, sends to `server`.
    pub fn new(server: &NatsServer, name: &str, reader: &MessageTimestamps) -> RequestCounter {
        RequestCounter {
            connz: format!("{}/connz?limit=1024", server.monitor_url()),
            name: name.into(),
            reader: reader.clone(),
            seen: 0,
            reader_seen: 0,
        }
    }

    fn in_msgs(&self) -> u64 {
        let body = nats_test_server::http_get(&self.connz);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == self.name.as_str())
            .and_then(|c| c["in_msgs"].as_u64())
            .expect("the reader's connection in /connz")
    }

    /// Requests received from the connection since the last call.
    ///
    /// The server adds a read's messages to `in_msgs` only after it has
    /// parsed the whole read, and a request can be answered before that
    /// (async-nats' flush makes no round trip to wait on). So a marker is
    /// published on the reader's connection after its requests, and the
    /// count read until it holds more than the reader says it sent (20 s at
    /// most): a connection's reads are counted in order, so the marker is
    /// counted last, after everything the reader sent before it; what the
    /// count then says, less the marker, is returned.
    pub async fn take(&mut self) -> u64 {
        let (direct, msg_get) = self.reader.requests_sent();
        let reader_delta = direct + msg_get - self.reader_seen;
        self.reader_seen = direct + msg_get;
        let client = self.reader.client();
        client
            .publish("request-counter.marker", bytes::Bytes::new())
            .await
            .unwrap();
        client.flush().await.unwrap();
        // Short of it after 20 s: what arrived is returned, for the caller to check.
        let _ = Wait::secs("the server's count of the reader's requests and marker", 20)
            .every(Duration::from_millis(20))
            .try_until_async(async || {
                let arrived = self.in_msgs() - self.seen;
                (arrived > reader_delta).then_some(()).ok_or(arrived)
            })
            .await;
        let total = self.in_msgs();
        let delta = (total - self.seen).saturating_sub(1);
        self.seen = total;
        delta
    }
}

/// Whether the reader uses direct gets on this server (2.10 and later).
pub fn uses_direct_gets(client: &async_nats::Client) -> bool {
    is_2_10_or_later(&client.server_info().version)
}

/// A connection named `name` (as /connz shows it).
pub async fn named(server: &NatsServer, name: &str, user: Option<&str>) -> async_nats::Client {
    let opts = match user {
        Some(u) => async_nats::ConnectOptions::with_user_and_password(u.into(), u.into()),
        None => async_nats::ConnectOptions::new(),
    };
    opts.name(name).connect(server.client_url()).await.unwrap()
}
