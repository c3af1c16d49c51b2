//! The losses the deployed exporter must count, provoked on a real server:
//! a subscriber cut as a slow consumer, and JetStream messages that run out
//! of `max_deliver`.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use nats_test_server::NatsServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

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

/// The server's own /varz slow-consumer total (every detection counted).
pub fn varz_slow_consumers(server: &NatsServer) -> u64 {
    let body = nats_test_server::http_get(&format!("{}/varz", server.monitor_url()));
    let varz: serde_json::Value = serde_json::from_str(&body).expect("/varz JSON");
    varz["slow_consumers"].as_u64().expect("slow_consumers")
}

/// A raw client named [`STUCK_CLIENT`] that subscribes to `subject` and then
/// never reads; its small receive buffer leaves the backlog in the server.
async fn stuck_reader(port: u16, subject: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let mut conn = BufReader::new(stream);
    let mut line = String::new();
    conn.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("INFO"), "{line}");
    let hello = format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"name\":\"{STUCK_CLIENT}\",\"lang\":\"raw\",\"version\":\"0\",\"protocol\":1}}\r\nSUB {subject} 1\r\nPING\r\n"
    );
    conn.get_mut().write_all(hello.as_bytes()).await.unwrap();
    line.clear();
    conn.read_line(&mut line).await.unwrap();
    assert_eq!(line.trim(), "PONG");
    conn.into_inner()
}

/// Makes the server cut one subscriber as a slow consumer, and returns the
/// reason label the exporter must give it (the server's own record of why
/// it closed the connection). The reader is kept open until the cut is seen.
pub async fn cut_a_slow_consumer(server: &NatsServer) -> &'static str {
    let before = varz_slow_consumers(server);
    let _stuck = stuck_reader(server.client_port, "deploy.flood").await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    let payload = bytes::Bytes::from(vec![b'x'; 1024]);
    let mut sent = 0;
    while varz_slow_consumers(server) == before {
        for _ in 0..256 {
            publisher
                .publish("deploy.flood", payload.clone())
                .await
                .unwrap();
        }
        publisher.flush().await.unwrap();
        sent += 256;
        assert!(sent < 1_000_000, "the server never cut the stuck reader");
    }
    let closed = format!("{}/connz?state=closed", server.monitor_url());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let connz: serde_json::Value =
            serde_json::from_str(&nats_test_server::http_get(&closed)).unwrap();
        let reason = connz["connections"].as_array().and_then(|conns| {
            let c = conns.iter().find(|c| c["name"] == STUCK_CLIENT)?;
            c["reason"].as_str().map(str::to_string)
        });
        match reason.as_deref() {
            Some("Slow Consumer (Pending Bytes)") => return "pending_bytes",
            Some("Slow Consumer (Write Deadline)") => return "write_deadline",
            Some(other) => panic!("the stuck reader was closed for another reason: {other}"),
            None => assert!(Instant::now() < deadline, "no closed stuck reader"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
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
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut delivered = 0;
    loop {
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
        if delivered >= 2 * n && info.num_pending == 0 && info.num_ack_pending == 0 {
            assert_eq!(
                delivered,
                2 * n,
                "each message is delivered max_deliver times"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the messages did not die: {info:?}"
        );
    }
}
