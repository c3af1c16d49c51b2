//! Who reads message timestamps: only streams of the reader's own account
//! are asked, the account's name comes from the server, and the binary
//! connects a reader only when `--nats-servers` is given.
use crate::message_timestamps_support;

use std::time::Duration;

use async_nats::jetstream;
use message_timestamps_support::*;
use nats_delivery_exporter::{connect_message_timestamps, MessageTimestamps, NatsArgs, ReadResult};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// A reader connected from flags as user `a`, its account labelled "label".
async fn connect_as_a(url: &str) -> MessageTimestamps {
    let flags = [
        "--nats-servers",
        url,
        "--nats-user",
        "a",
        "--nats-password",
        "a",
    ];
    let args = NatsArgs::from_flags(flags.iter().chain(&["--nats-account-name", "label"])).unwrap();
    connect_message_timestamps(&args).await.unwrap()
}

#[tokio::test]
async fn streams_of_other_accounts_are_never_requested() {
    let server = NatsServer::builder()
        .jetstream()
        .config(
            "accounts { A { jetstream: enabled, users: [ { user: a, password: a } ] }\n\
             B { jetstream: enabled, users: [ { user: b, password: b } ] } }",
        )
        .start();
    let b = named(&server, "setup", Some("b")).await;
    stream_with(&jetstream::new(b.clone()), "S", true, &["x"]).await;
    let connection = named(&server, "reader", Some("a")).await;
    let reader = MessageTimestamps::new(connection.clone(), "A", 100);
    let mut counter = RequestCounter::new(&server, "reader", &reader);

    // Connected from flags, the reader asks the server for its account's
    // name (2.10+); older servers cannot say, and the label is taken.
    let connected = connect_as_a(&server.client_url()).await;
    if uses_direct_gets(&b) {
        // Learnt in the background, once the connection is up.
        let _ = Wait::secs("the connection's account", 10)
            .every(Duration::from_millis(100))
            .try_until_async(async || connected.account() == "A")
            .await;
        assert_eq!(connected.account(), "A");
    } else {
        assert_eq!(connected.account(), "label");
    }

    let theirs = request("B", "S", 1, &[]);
    let got = reader
        .read(std::slice::from_ref(&theirs), 10, DEADLINE)
        .await;
    assert!(got.is_empty());
    assert_eq!(reader.count_of(ReadResult::OtherAccount), 1);
    assert_eq!(counter.take().await, 0);

    // The same stream name asked in the reader's own account does not exist there.
    let ours = request("A", "S", 1, &[]);
    let got = reader.read(std::slice::from_ref(&ours), 10, DEADLINE).await;
    assert!(got.is_empty());
    assert_eq!(reader.count_of(ReadResult::StreamNotFound), 1);
    // A direct get finds no responder, the message get says so.
    if uses_direct_gets(&b) {
        assert_eq!(counter.take().await, 2);
        assert_eq!(reader.requests_sent(), (1, 1));
    } else {
        assert_eq!(counter.take().await, 1);
        assert_eq!(reader.requests_sent(), (0, 1));
    }
}

/// Runs the exporter binary with `flags` and returns its first answered scrape.
async fn first_scrape(server: &NatsServer, flags: &[&str]) -> String {
    let port = nats_test_server::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", &server.monitor_url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .env("NATS_DELIVERY_LOG", "warn")
        .env_remove("NATS_DELIVERY_NATS_SERVERS")
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = Wait::secs("the exporter's /metrics", 10)
        .every(Duration::from_millis(100))
        .try_until_async(async || reqwest::get(&url).await)
        .await;
    let text = match text {
        Ok(r) => r.text().await.ok(),
        Err(_) => None,
    };
    let _ = child.kill();
    let _ = child.wait();
    text.expect("the exporter answered /metrics within 10 s")
}

#[tokio::test]
async fn the_binary_connects_a_reader_only_with_nats_servers() {
    let server = NatsServer::builder().jetstream().start();
    let cache_line = "nats_delivery_message_timestamp_cache_entries 0";
    let with = first_scrape(&server, &["--nats-servers", &server.client_url()]).await;
    assert!(with.lines().any(|l| l == cache_line), "{with}");
    let without = first_scrape(&server, &[]).await;
    assert!(
        !without.contains("nats_delivery_message_timestamp"),
        "{without}"
    );
}

#[tokio::test]
async fn a_refused_read_ends_at_the_deadline() {
    let server = NatsServer::builder()
        .jetstream()
        .config(
            "accounts { A { jetstream: enabled, users: [ { user: a, password: a }, \
             { user: r, password: r, permissions: { publish: { deny: [\"$JS.API.>\"] } } } ] } }",
        )
        .start();
    let a = named(&server, "setup", Some("a")).await;
    stream_with(&jetstream::new(a), "S", true, &["x"]).await;
    let reader = MessageTimestamps::new(named(&server, "reader", Some("r")).await, "A", 100);
    let asked = [request("A", "S", 1, &[])];
    let got = reader.read(&asked, 1, Duration::from_millis(500)).await;
    assert!(got.is_empty());
    // The server refuses the publish and never answers: a timeout.
    assert_eq!(reader.count_of(ReadResult::Timeout), 1);
}

#[tokio::test]
async fn the_account_name_is_learnt_when_the_server_comes_up_later() {
    let port = nats_test_server::free_port();
    // No server yet, only a socket that takes the reader's first attempt
    // and closes it: connecting returns at once, with the label.
    let socket = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let reader = connect_as_a(&format!("nats://127.0.0.1:{port}")).await;
    assert_eq!(reader.account(), "label");
    let attempt = tokio::time::timeout(Duration::from_secs(20), socket.accept()).await;
    drop(attempt.expect("the reader tries to connect").unwrap());
    drop(socket);
    assert_eq!(reader.account(), "label");
    let server = NatsServer::builder()
        .jetstream()
        .config(&format!(
            "port: {port}\naccounts {{ A {{ jetstream: enabled, users: [ {{ user: a, password: a }} ] }} }}"
        ))
        .start();
    let client = named(&server, "version", Some("a")).await;
    let want = if uses_direct_gets(&client) {
        "A"
    } else {
        "label"
    };
    let _ = Wait::secs("the reader's account", 20)
        .every(Duration::from_millis(100))
        .try_until_async(async || reader.account() == want)
        .await;
    assert_eq!(reader.account(), want);
}
