//! Situations the tests (and the fixture capture) drive a real server into.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

/// A raw NATS client that subscribes to `subject` and then never reads again.
/// Its receive buffer is small so that the server's queue, not the kernel,
/// holds what it does not read.
pub async fn stuck_reader(port: u16, name: &str, subject: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("INFO"), "{line}");
    let connect = format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"name\":\"{name}\",\"lang\":\"raw\",\"version\":\"0\",\"protocol\":1}}\r\nSUB {subject} 1\r\nPING\r\n"
    );
    reader
        .get_mut()
        .write_all(connect.as_bytes())
        .await
        .unwrap();
    line.clear();
    reader.read_line(&mut line).await.unwrap();
    assert_eq!(line.trim(), "PONG");
    // Every server sends a client its first PING 2 to 2.4 s after it
    // connects, the next ones minutes later. Answered here, it cannot land in
    // the queue of a test that has waited for the queue to stay put.
    // Newer servers send an updated INFO after CONNECT first.
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        if !line.starts_with("INFO") {
            break;
        }
    }
    assert_eq!(line.trim(), "PING");
    reader.get_mut().write_all(b"PONG\r\n").await.unwrap();
    reader.into_inner()
}

/// The server's running total of slow consumers.
pub fn varz_slow_consumers(server: &NatsServer) -> u64 {
    super::monitor_json(&server.monitor_url(), "varz")["slow_consumers"]
        .as_u64()
        .unwrap()
}

/// Publishes 1 KiB messages to `subject` until the server's slow-consumer
/// total rises; returns how many were sent.
pub async fn publish_until_cut(
    server: &NatsServer,
    publisher: &async_nats::Client,
    subject: &str,
) -> u64 {
    let before = varz_slow_consumers(server);
    let payload = bytes::Bytes::from(vec![b'x'; 1024]);
    let mut sent = 0;
    while varz_slow_consumers(server) == before {
        for _ in 0..256 {
            publisher
                .publish(subject.to_string(), payload.clone())
                .await
                .unwrap();
        }
        publisher.flush().await.unwrap();
        sent += 256;
        assert!(sent < 1_000_000, "the server never cut the stuck reader");
    }
    sent
}

/// Waits until the server lists the closed connection `name` and returns the
/// reason it recorded: the truth the exporter must repeat.
pub async fn closed_reason(server: &NatsServer, name: &str) -> String {
    Wait::secs("the cut connection in the closed list", 20)
        .until(|| {
            let closed = super::monitor_json(&server.monitor_url(), "connz?state=closed");
            let conns = closed["connections"].as_array()?.clone();
            let c = conns.iter().find(|c| c["name"] == name)?;
            Some(c["reason"].as_str().unwrap().to_string())
        })
        .await
}

/// Stream ORDERS (limits: 1000 messages, 1 MiB, 1 h) with consumer `billing`
/// (ack_wait 1 s, max_deliver 5, max_ack_pending 100): 10 messages published
/// and delivered, the first 3 acknowledged, the other 7 delivered again after
/// ack_wait and left unacknowledged.
pub async fn orders_with_redeliveries(js: &jetstream::Context) {
    let stream = js
        .create_stream(stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            max_messages: 1000,
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(3600),
            ..Default::default()
        })
        .await
        .unwrap();
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("billing".into()),
            ack_wait: Duration::from_secs(1),
            max_deliver: 5,
            max_ack_pending: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    super::publish_acked(js, (0..10).map(|i| format!("orders.{i}")), "x").await;
    let mut batch = consumer
        .fetch()
        .max_messages(10)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    let mut got = 0;
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        got += 1;
        if got <= 3 {
            m.double_ack().await.unwrap();
        }
    }
    assert_eq!(got, 10);
    // The 7 come back once ack_wait has passed; the pull waits for them.
    let mut batch = consumer
        .fetch()
        .max_messages(7)
        .expires(Duration::from_secs(30))
        .messages()
        .await
        .unwrap();
    let mut redelivered = 0;
    while let Some(m) = batch.next().await {
        assert_eq!(m.unwrap().info().unwrap().delivered, 2);
        redelivered += 1;
    }
    assert_eq!(redelivered, 7);
    // The server agrees: the 3 acknowledged stay so, the 7 wait for an ack.
    let mut consumer = consumer;
    let info = consumer.info().await.unwrap();
    let state = (info.num_ack_pending, info.num_redelivered, info.num_pending);
    assert_eq!(state, (7, 7, 0));
}
