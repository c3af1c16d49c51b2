//! The losses the deployed exporter must count, provoked on a real server:
//! a subscriber cut as a slow consumer, and JetStream messages that run out
//! of `max_deliver`.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

use crate::common::scenarios::{closed_reason, publish_until_cut, stuck_reader};

/// The connection name of the subscriber that stops reading.
pub const STUCK_CLIENT: &str = "deploy-stuck-reader";

/// Stream and consumer whose messages die.
pub const STREAM: &str = "DEPLOY";
pub const CONSUMER: &str = "worker";

/// A server that cuts a slow connection early (512 KiB pending), with
/// JetStream; the TLS settings, if any, are added to its configuration.
pub fn server(extra_config: &str) -> NatsServer {
    NatsServer::builder()
        .jetstream()
        .max_pending(512 * 1024)
        .config("max_payload: 65536")
        .config(extra_config)
        .start()
}

pub use crate::common::scenarios::varz_slow_consumers;

/// Makes the server cut one subscriber ([`STUCK_CLIENT`], which stops
/// reading) as a slow consumer, and returns the reason label the exporter
/// must give it: the server's own record of why it closed the connection.
pub async fn cut_a_slow_consumer(server: &NatsServer) -> &'static str {
    let _stuck = stuck_reader(server.client_port, STUCK_CLIENT, "deploy.flood").await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    publish_until_cut(server, &publisher, "deploy.flood").await;
    match closed_reason(server, STUCK_CLIENT).await.as_str() {
        "Slow Consumer (Pending Bytes)" => "pending_bytes",
        "Slow Consumer (Write Deadline)" => "write_deadline",
        other => panic!("the stuck reader was closed for another reason: {other}"),
    }
}

/// Publishes `n` messages to a stream whose consumer (max_deliver 2, ack
/// wait 300 ms) never acknowledges, and pulls until the server holds none
/// of them for delivery or acknowledgement: each of the `n` died.
pub async fn let_messages_die(server: &NatsServer, n: usize) {
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    let stream = js
        .create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["deploy.work".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.into()),
            max_deliver: 2,
            ack_wait: Duration::from_millis(300),
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..n {
        js.publish("deploy.work", format!("job {i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut delivered = 0;
    Wait::secs("the messages to die", 30)
        .every(Duration::ZERO)
        .until_async(async || {
            let mut batch = consumer
                .fetch()
                .max_messages(100)
                .expires(Duration::from_millis(400))
                .messages()
                .await
                .unwrap();
            while let Some(m) = batch.next().await {
                m.unwrap();
                delivered += 1;
            }
            let info = consumer.get_info().await.unwrap();
            match delivered >= 2 * n && info.num_pending == 0 && info.num_ack_pending == 0 {
                true => Ok(()),
                false => Err(format!("{delivered} delivered; {info:?}")),
            }
        })
        .await;
    assert_eq!(
        delivered,
        2 * n,
        "each message is delivered max_deliver times"
    );
}
