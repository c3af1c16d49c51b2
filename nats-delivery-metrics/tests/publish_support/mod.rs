//! A publisher on a real server and what its registry says, shared by the
//! publishing tests.

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{Config, State};
use async_nats::jetstream::Context;
use bytes::Bytes;
use nats_delivery_metrics::{ClientMetrics, InstrumentedClient, InstrumentedJetStream};
use nats_test_server::app::exposition;
use nats_test_server::sample::exact;
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

/// One instrumented connection with its registry.
pub struct Publisher {
    pub registry: Registry,
    pub metrics: ClientMetrics,
    pub client: InstrumentedClient,
    pub jetstream: InstrumentedJetStream,
}

impl Publisher {
    pub async fn connect(server: &NatsServer) -> Self {
        let mut registry = Registry::default();
        let metrics = ClientMetrics::new("app", &mut registry);
        let client = metrics
            .connect(async_nats::ConnectOptions::new(), server.client_url())
            .await
            .unwrap();
        let jetstream = client.jetstream();
        Publisher {
            registry,
            metrics,
            client,
            jetstream,
        }
    }

    pub fn text(&self) -> String {
        exposition(&self.registry)
    }

    pub fn failures(&self, reason: &str) -> u64 {
        let labels = [("client", "app"), ("reason", reason)];
        let name = "nats_delivery_client_jetstream_publish_failures_total";
        exact(&self.text(), name, &labels).expect(reason) as u64
    }

    pub fn counter(&self, name: &str) -> u64 {
        exact(&self.text(), name, &[("client", "app")]).expect(name) as u64
    }

    pub fn stored(&self) -> u64 {
        self.counter("nats_delivery_client_jetstream_published_messages_total")
    }

    /// Every reason but those in `expected` is 0, and those are as given.
    pub fn assert_failures(&self, expected: &[(&str, u64)], context: &str) {
        let reasons = [
            "max_messages",
            "max_bytes",
            "max_messages_per_subject",
            "wrong_last_sequence",
            "wrong_last_msg_id",
            "no_responders",
            "timed_out",
            "abandoned",
            "other",
        ];
        for reason in reasons {
            let want = expected
                .iter()
                .find(|(r, _)| *r == reason)
                .map_or(0, |(_, n)| *n);
            assert_eq!(self.failures(reason), want, "{context}: {reason}");
        }
    }

    /// Publishes `message` to `subject` and waits for the answer; true when
    /// the server acknowledged it.
    pub async fn publish(&self, subject: &str, message: PublishMessage) -> bool {
        let pending = self.jetstream.send_publish(subject.to_string(), message);
        match pending.await {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        }
    }
}

pub fn body(len: usize) -> PublishMessage {
    PublishMessage::build().payload(Bytes::from(vec![b'x'; len]))
}

pub async fn stream_state(js: &Context, stream: &str) -> State {
    let mut stream = js.get_stream(stream).await.unwrap();
    stream.info().await.unwrap().state.clone()
}

pub fn version() -> String {
    nats_test_server::version_under_test()
}

/// Creates the stream of `config` through `app`'s context.
pub async fn create(app: &Publisher, config: Config) {
    app.jetstream.context().create_stream(config).await.unwrap();
}

/// Publishes `n` messages of `len` bytes to `subject`; how many were
/// acknowledged.
pub async fn publish_n(app: &Publisher, subject: &str, n: u64, len: usize) -> u64 {
    let mut acked = 0;
    for _ in 0..n {
        acked += u64::from(app.publish(subject, body(len)).await);
    }
    acked
}
