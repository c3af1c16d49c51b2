//! Slow-consumer cuts by name from system-account events, against a real server.
use crate::advisories_support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use advisories_support::*;
use nats_test_server::NatsServer;

/// A raw client that subscribes to `flood` and never reads its socket.
fn stuck_client(s: &NatsServer, name: Option<&str>) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", s.client_port)).unwrap();
    let name = name.map_or(String::new(), |n| format!(",\"name\":\"{n}\""));
    write!(
        c,
        "CONNECT {{\"user\":\"app\",\"pass\":\"app-secret\",\"verbose\":false,\"pedantic\":false{name}}}\r\nSUB flood 1\r\nPING\r\n"
    )
    .unwrap();
    c
}

/// Connections of `s` subscribed to `flood`, from its `/connz`.
fn flood_subscribers(s: &NatsServer) -> usize {
    let url = format!("{}/connz?subs=1", s.monitor_url());
    let body = tokio::task::block_in_place(|| nats_test_server::http_get(&url));
    let connz: serde_json::Value = serde_json::from_str(&body).expect("connz JSON");
    let subscribed = |c: &&serde_json::Value| {
        let subs = c["subscriptions_list"].as_array();
        subs.is_some_and(|l| l.iter().any(|x| x == "flood"))
    };
    let connections = connz["connections"].as_array().expect("connections");
    connections.iter().filter(subscribed).count()
}

fn slow_count(text: &str, server: &str, name: &str) -> f64 {
    ["pending_bytes", "write_deadline", "other"]
        .iter()
        .map(|r| {
            exact(
                text,
                "nats_delivery_server_slow_consumer_disconnects_total",
                &[
                    ("server", server),
                    ("account", "APP"),
                    ("client_name", name),
                    ("reason", r),
                ],
            )
            .unwrap_or(0.0)
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_cuts_are_counted_by_bounded_client_name() {
    let s = NatsServer::builder()
        .jetstream()
        .max_pending(2 * 1024 * 1024)
        .config(ACCOUNTS)
        .start();
    // One distinct client name, then "__overflow__".
    let listener = SystemListener::start(&s, 1).await;

    // A client that closes normally is not a slow consumer.
    client(&s, "app").await.drain().await.unwrap();
    let _a = stuck_client(&s, Some("slow-a"));
    let _b = stuck_client(&s, Some("slow-b"));
    let _anon = stuck_client(&s, None);
    Wait::secs("the 3 stuck clients subscribed", 20)
        .every(Duration::from_millis(100))
        .until(|| {
            let subscribed = flood_subscribers(&s);
            (subscribed == 3).then_some(()).ok_or(subscribed)
        })
        .await;

    let publisher = client(&s, "app").await;
    let payload = bytes::Bytes::from(vec![b'x'; 16 * 1024]);
    let total = |t: &str| {
        slow_count(t, &s.name, "slow-a")
            + slow_count(t, &s.name, "slow-b")
            + slow_count(t, &s.name, "__overflow__")
            + slow_count(t, &s.name, "")
    };
    Wait::secs("3 slow consumers cut", 60)
        .every(Duration::ZERO)
        .until_async(async || {
            let text = listener.text();
            if total(&text) >= 3.0 {
                return Ok(());
            }
            for _ in 0..200 {
                publisher.publish("flood", payload.clone()).await.unwrap();
            }
            publisher.flush().await.unwrap();
            Err(Text(text))
        })
        .await;
    // A client closed after the cuts: its disconnect event comes after
    // theirs, so once it is received theirs are counted.
    client(&s, "app").await.drain().await.unwrap();
    let received = "nats_delivery_system_events_received_total";
    // The first client drained, three cuts, this one.
    wait_value(&listener.registry, received, &[], 5.0, 20).await;
    let text = listener.text();
    // The first name cut is kept, the second goes to the overflow value, the
    // unnamed client stays unnamed: 1 each, exactly.
    let a = slow_count(&text, &s.name, "slow-a");
    let b = slow_count(&text, &s.name, "slow-b");
    assert_eq!((a + b, a * b), (1.0, 0.0), "{text}");
    assert_eq!(slow_count(&text, &s.name, "__overflow__"), 1.0, "{text}");
    assert_eq!(slow_count(&text, &s.name, ""), 1.0, "{text}");
    assert_eq!(
        exact(&text, "nats_delivery_system_events_malformed_total", &[]),
        Some(0.0)
    );
    // The server agrees: three connections closed as slow consumers.
    let varz: serde_json::Value = serde_json::from_str(&nats_test_server::http_get(&format!(
        "{}/varz",
        s.monitor_url()
    )))
    .unwrap();
    assert_eq!(varz["slow_consumers"], 3, "{text}");
    nats_test_server::reference::assert_documented(&text);
    let metrics = listener.metrics.clone();
    listener.stop().await;
    assert_eq!(metrics.listener_up.get(), 0);
}

/// Runs the system-event listener with `credentials` until `done` holds of
/// the server and the exposition; returns the exposition and `listener_up`
/// then.
async fn run_until(
    s: &NatsServer,
    credentials: &str,
    what: &str,
    mut done: impl FnMut(&NatsServer, &str) -> bool,
) -> (String, i64) {
    let listener = SystemListener::spawn(s, credentials, 10);
    Wait::secs(what, 30)
        .every(Duration::from_millis(100))
        .until(|| {
            let text = listener.text();
            done(s, &text).then_some(()).ok_or(Text(text))
        })
        .await;
    let text = listener.text();
    let up = listener.metrics.listener_up.get();
    listener.stop().await;
    (text, up)
}

fn listener_errors(text: &str, kind: &str) -> Option<f64> {
    exact(
        text,
        "nats_delivery_system_events_listener_errors_total",
        &[("kind", kind)],
    )
}

/// A refused password is one outage: counted once as `connect` however
/// often the client tries again, and the listener stays down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_is_counted_once_as_connect() {
    let s = NatsServer::builder().config(ACCOUNTS).start();
    // Three attempts refused: the client kept trying after the first.
    let (text, up) = run_until(&s, "user:sys:wrong-secret", "3 refusals", |s, text| {
        listener_errors(text, "connect").is_some() && refused_connections(s) >= 3
    })
    .await;
    assert_eq!(up, 0, "{text}");
    assert_eq!(listener_errors(&text, "connect"), Some(1.0), "{text}");
    assert_eq!(listener_errors(&text, "permission"), None, "{text}");
    nats_test_server::reference::assert_documented(&text);
}

/// A system user that may not subscribe to the disconnect events: the
/// server refuses the subject once, counted as `permission`; the login
/// itself succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subject_is_counted_as_permission() {
    let config = r#"
accounts {
  SYS { users: [ { user: sys, password: sys-secret, permissions: { subscribe: { deny: "$SYS.ACCOUNT.>" } } } ] }
}
system_account: SYS
"#;
    let s = NatsServer::builder().config(config).start();
    // The login comes before the subscription: a failed login would be
    // counted before the refusal is.
    let (text, _) = run_until(&s, "user:sys:sys-secret", "the refusal", |_, text| {
        listener_errors(text, "permission").is_some()
    })
    .await;
    assert_eq!(listener_errors(&text, "permission"), Some(1.0), "{text}");
    assert_eq!(listener_errors(&text, "connect"), None, "{text}");
}
