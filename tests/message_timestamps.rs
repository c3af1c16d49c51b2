//! Message timestamps read over NATS from a real server: the server's stored
//! times, deleted messages skipped, filters, the budget counted in requests
//! the server received, other accounts never asked, a hung read cut off.
//! Runs against `$NATS_SERVER_VERSION`.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use nats_delivery_exporter::message_timestamps;
use nats_delivery_exporter::message_timestamps::fetch::direct_get_is_refused_openly;
use nats_delivery_exporter::message_timestamps::{
    MessageTimestamps, ReadResult, TimestampReply, TimestampRequest,
};
use nats_delivery_exporter::nats_connection::NatsArgs;
use nats_test_server::NatsServer;

const DEADLINE: Duration = Duration::from_secs(5);

fn request(account: &str, stream: &str, from_seq: u64, filters: &[&str]) -> TimestampRequest {
    TimestampRequest {
        account: account.into(),
        stream: stream.into(),
        from_seq,
        filters: filters.iter().map(|f| f.to_string()).collect(),
    }
}

/// Creates `name` capturing `<name>.>` and stores `subjects` in order (seq 1, 2, ...).
async fn stream_with(js: &jetstream::Context, name: &str, allow_direct: bool, subjects: &[&str]) {
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
async fn stored_time(js: &jetstream::Context, stream: &str, seq: u64) -> f64 {
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
struct RequestCounter {
    connz: String,
    name: String,
    seen: u64,
}

impl RequestCounter {
    fn new(server: &NatsServer, name: &str) -> RequestCounter {
        RequestCounter {
            connz: format!("{}/connz?limit=1024", server.monitor_url()),
            name: name.into(),
            seen: 0,
        }
    }

    /// Requests received from the connection since the last call.
    async fn take(&mut self) -> u64 {
        let connz = self.connz.clone();
        let body = tokio::task::spawn_blocking(move || nats_test_server::http_get(&connz))
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let total = v["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == self.name.as_str())
            .and_then(|c| c["in_msgs"].as_u64())
            .expect("the reader's connection in /connz");
        let delta = total - self.seen;
        self.seen = total;
        delta
    }
}

/// Whether the reader uses direct gets on this server (2.10 and later).
fn uses_direct_gets(client: &async_nats::Client) -> bool {
    direct_get_is_refused_openly(&client.server_info().version)
}

/// A connection named `name` (as /connz shows it).
async fn named(server: &NatsServer, name: &str, user: Option<&str>) -> async_nats::Client {
    let opts = match user {
        Some(u) => async_nats::ConnectOptions::with_user_and_password(u.into(), u.into()),
        None => async_nats::ConnectOptions::new(),
    };
    opts.name(name).connect(server.client_url()).await.unwrap()
}

#[tokio::test]
async fn timestamps_are_the_servers_stored_ones() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    // 1 a, 2 b, 3 a (deleted), 4 c, 5 a, 6 b; one stream per read method.
    let subjects = ["a", "b", "a", "c", "a", "b"];
    for (name, direct) in [("DIRECT", true), ("PLAIN", false)] {
        stream_with(&js, name, direct, &subjects).await;
        js.get_stream(name)
            .await
            .unwrap()
            .delete_message(3)
            .await
            .unwrap();
    }
    let reader = MessageTimestamps::new(client.clone(), "$G", 100);
    for name in ["DIRECT", "PLAIN"] {
        let p = |s: &str| format!("{name}.{s}");
        let cases: Vec<(TimestampRequest, Option<u64>)> = vec![
            (request("$G", name, 1, &[]), Some(1)),
            (request("$G", name, 3, &[]), Some(4)),
            (request("$G", name, 3, &[&p("a")]), Some(5)),
            (request("$G", name, 2, &[&p("c"), &p("b")]), Some(2)),
            (request("$G", name, 3, &[&p("b"), &p("c")]), Some(4)),
            (request("$G", name, 1, &[&format!("{name}.*")]), Some(1)),
            (request("$G", name, 6, &[&p("c")]), None),
            (request("$G", name, 7, &[]), None),
        ];
        let asked: Vec<_> = cases.iter().map(|(r, _)| r.clone()).collect();
        let got = reader.read(&asked, asked.len(), DEADLINE).await;
        for (r, want) in &cases {
            let want = match want {
                Some(seq) => TimestampReply::Found {
                    seq: *seq,
                    unix_seconds: stored_time(&js, name, *seq).await,
                },
                None => TimestampReply::NoMessage,
            };
            assert_eq!(got.get(r), Some(&want), "{r:?}");
        }
    }
    assert_eq!(reader.count_of(ReadResult::Read), 12);
    assert_eq!(reader.count_of(ReadResult::NoMessage), 4);
    // One request per filter: 10 direct gets for DIRECT; for PLAIN the
    // direct gets in flight before the first "no responders" came back,
    // then a message get for each of its 10 filters. Before 2.10: message
    // gets only.
    let (direct, msg_get) = reader.requests_sent();
    if uses_direct_gets(&client) {
        assert!((11..=20).contains(&direct), "{direct}");
        assert_eq!(msg_get, 10);
    } else {
        assert_eq!((direct, msg_get), (0, 20));
    }
    // From then on PLAIN is read with message gets only ("no message" is
    // not cached: these two are read again, two filters).
    let again = [
        request("$G", "PLAIN", 6, &["PLAIN.c"]),
        request("$G", "PLAIN", 7, &[]),
    ];
    let got = reader.read(&again, 2, DEADLINE).await;
    assert_eq!(
        got.values()
            .filter(|r| **r == TimestampReply::NoMessage)
            .count(),
        2
    );
    assert_eq!(reader.requests_sent(), (direct, msg_get + 2));

    // A cached answer whose message is removed stays until the stream's
    // first sequence says it is gone.
    let from_one = request("$G", "DIRECT", 1, &[]);
    js.get_stream("DIRECT")
        .await
        .unwrap()
        .delete_message(1)
        .await
        .unwrap();
    let got = reader
        .read(std::slice::from_ref(&from_one), 1, DEADLINE)
        .await;
    assert!(matches!(
        got[&from_one],
        TimestampReply::Found { seq: 1, .. }
    ));
    reader.forget_below("$G", "DIRECT", 2);
    let got = reader
        .read(std::slice::from_ref(&from_one), 1, DEADLINE)
        .await;
    let t2 = stored_time(&js, "DIRECT", 2).await;
    assert_eq!(
        got[&from_one],
        TimestampReply::Found {
            seq: 2,
            unix_seconds: t2
        }
    );
}

#[tokio::test]
async fn the_budget_bounds_requests_and_cached_answers_send_none() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    stream_with(&js, "S", true, &["a", "b", "a", "b", "a"]).await;
    let reader = MessageTimestamps::new(named(&server, "reader", None).await, "$G", 100);
    let mut counter = RequestCounter::new(&server, "reader");
    let asked: Vec<_> = (1..=5)
        .map(|seq| request("$G", "S", seq, &["S.a"]))
        .collect();

    let got = reader.read(&asked, 2, DEADLINE).await;
    assert_eq!(
        got.keys()
            .map(|r| r.from_seq)
            .collect::<std::collections::BTreeSet<_>>(),
        [1, 2].into()
    );
    assert_eq!(counter.take().await, 2);
    let sent = reader.requests_sent();
    assert_eq!(
        sent,
        if uses_direct_gets(&client) {
            (2, 0)
        } else {
            (0, 2)
        }
    );
    assert_eq!(reader.count_of(ReadResult::OverBudget), 3);

    // The first two come from the cache; the budget reads the next two.
    let got = reader.read(&asked, 2, DEADLINE).await;
    assert_eq!(got.len(), 4);
    assert!(matches!(
        got[&asked[3]],
        TimestampReply::Found { seq: 5, .. }
    ));
    assert_eq!(counter.take().await, 2);
    assert_eq!(reader.count_of(ReadResult::Cached), 2);

    // Everything cached: no request at all, even with no budget.
    let got = reader.read(&asked[..4], 0, DEADLINE).await;
    assert_eq!(got.len(), 4);
    assert_eq!(counter.take().await, 0);
    assert_eq!(reader.count_of(ReadResult::Cached), 6);
    // "No message" is never cached: asked again, it is read again.
    let past_end = request("$G", "S", 9, &["S.a"]);
    for _ in 0..2 {
        let got = reader
            .read(std::slice::from_ref(&past_end), 1, DEADLINE)
            .await;
        assert_eq!(got[&past_end], TimestampReply::NoMessage);
        assert_eq!(counter.take().await, 1);
    }

    // The counts, as exposed and as METRICS.md lists them.
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(reader.clone()));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    nats_test_server::reference::assert_documented(&text);
    let exposed = nats_test_server::reference::exposed(&text);
    let documented = nats_test_server::reference::documented_in(&["Message timestamp reads"]);
    assert_eq!(
        exposed.keys().collect::<Vec<_>>(),
        documented.keys().collect::<Vec<_>>()
    );
    let (direct, msg_get) = if uses_direct_gets(&client) {
        (6, 0)
    } else {
        (0, 6)
    };
    for line in [
        "nats_delivery_message_timestamp_reads_total{result=\"read\"} 4".to_string(),
        "nats_delivery_message_timestamp_reads_total{result=\"no_message\"} 2".into(),
        "nats_delivery_message_timestamp_reads_total{result=\"cached\"} 6".into(),
        "nats_delivery_message_timestamp_reads_total{result=\"over_budget\"} 4".into(),
        "nats_delivery_message_timestamp_reads_total{result=\"timeout\"} 0".into(),
        format!("nats_delivery_message_timestamp_requests_total{{method=\"direct_get\"}} {direct}"),
        format!("nats_delivery_message_timestamp_requests_total{{method=\"msg_get\"}} {msg_get}"),
        "nats_delivery_message_timestamp_cache_entries 4".into(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
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
    let reader = MessageTimestamps::new(named(&server, "reader", Some("a")).await, "A", 100);
    let mut counter = RequestCounter::new(&server, "reader");

    // Connected from flags, the reader asks the server for its account's
    // name (2.10+); older servers cannot say, and the label is taken.
    let url = server.client_url();
    let flags = [
        "--nats-servers",
        &url,
        "--nats-user",
        "a",
        "--nats-password",
        "a",
    ];
    let args = NatsArgs::from_flags(flags.iter().chain(&["--nats-account-name", "label"])).unwrap();
    let connected = message_timestamps::connect(&args).await.unwrap();
    let named_account = if uses_direct_gets(&b) { "A" } else { "label" };
    assert_eq!(connected.account(), named_account);

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

#[tokio::test]
async fn unanswered_reads_end_at_the_deadline() {
    // No JetStream; something takes every API request and never answers.
    let server = NatsServer::builder().start();
    let silent = async_nats::connect(server.client_url()).await.unwrap();
    let _taker = silent.subscribe("$JS.API.>").await.unwrap();
    silent.flush().await.unwrap();
    let reader = MessageTimestamps::new(
        async_nats::connect(server.client_url()).await.unwrap(),
        "$G",
        100,
    );
    // More reads than run at once: the ones never started end too.
    let asked: Vec<_> = (1..=20)
        .map(|seq| request("$G", "HUNG", seq, &[]))
        .collect();
    let got = tokio::time::timeout(
        Duration::from_secs(30),
        reader.read(&asked, 20, Duration::from_millis(300)),
    )
    .await
    .expect("the read ends at its deadline");
    assert!(got.is_empty());
    assert_eq!(reader.count_of(ReadResult::Timeout), 20);
    assert_eq!(reader.count_of(ReadResult::Read), 0);
}

/// Runs the exporter binary with `flags` and returns its first answered scrape.
async fn first_scrape(server: &NatsServer, flags: &[&str]) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", &server.monitor_url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .env("NATS_DELIVERY_LOG", "warn")
        .env_remove("NATS_DELIVERY_NATS_SERVERS")
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut text = None;
    for _ in 0..100 {
        if let Ok(r) = reqwest::get(&url).await {
            text = r.text().await.ok();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
