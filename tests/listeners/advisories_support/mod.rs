//! Shared by the advisory and system-event tests: a server with accounts, a
//! listener task with its own registry, reading exact samples back (with
//! `nats_test_server::sample::exact`, re-exported here).
#![allow(dead_code)]

pub mod binary;
pub mod dead_letter;
pub mod system;

#[allow(unused_imports)]
pub use system::SystemListener;

use std::time::Duration;

use nats_delivery_exporter::{AccountListener, AdvisoryArgs, AdvisoryMetrics, NatsArgs};
pub use nats_test_server::sample::exact;
pub use nats_test_server::wait::{Text, Wait};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// Accounts APP and OTHER (JetStream), SYS as the system account.
pub const ACCOUNTS: &str = r#"
accounts {
  APP { jetstream: enabled, users: [ { user: app, password: app-secret } ] }
  OTHER { jetstream: enabled, users: [ { user: other, password: other-secret } ] }
  SYS { users: [ { user: sys, password: sys-secret } ] }
}
system_account: SYS
"#;

/// A JetStream server with [`ACCOUNTS`].
pub fn server() -> NatsServer {
    NatsServer::builder().jetstream().config(ACCOUNTS).start()
}

/// A client logged in as `user` (password `<user>-secret`).
pub async fn client(s: &NatsServer, user: &str) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .user_and_password(user.into(), format!("{user}-secret"))
        .connect(s.client_url())
        .await
        .expect("test client connects")
}

/// Connection flags for `s`.
pub fn nats_args(s: &NatsServer) -> NatsArgs {
    NatsArgs::from_flags(["--nats-servers", &s.client_url()]).expect("flags")
}

/// Advisory flags: `--advisories` plus `extra`.
pub fn advisory_args(extra: &[&str]) -> AdvisoryArgs {
    let mut flags = vec!["--advisories"];
    flags.extend_from_slice(extra);
    AdvisoryArgs::from_flags(flags).expect("flags")
}

/// A running listener: its registry, metrics and stop switch.
pub struct Running {
    /// Registry holding only the advisory metrics.
    pub registry: Registry,
    /// The metrics.
    pub metrics: AdvisoryMetrics,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Text exposition of the registry.
    pub fn text(&self) -> String {
        encode(&self.registry)
    }

    /// Stops the listener the way the exporter does on SIGTERM and waits for it.
    pub async fn stop(self) {
        self.stop.send(true).expect("listener alive");
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("listener stops within 15 s")
            .expect("listener task did not panic");
    }
}

/// Starts one account's listener with fresh metrics, logged in as `user`
/// (password `<user>-secret`), and waits until it is up and the server
/// lists its subscriptions.
pub async fn start_listener(
    s: &NatsServer,
    account: &str,
    user: &str,
    args: AdvisoryArgs,
) -> Running {
    let running = spawn_listener(s, account, &format!("user:{user}:{user}-secret"), args);
    wait_value(
        &running.registry,
        "nats_delivery_advisory_listener_up",
        &[("account", account)],
        1.0,
        20,
    )
    .await;
    wait_subscribed(s, account, &running).await;
    running
}

/// Waits until `s` lists a connection of `account` subscribed to the API
/// audits, the listener's last subscription in both modes (or to the one
/// before, when `running` counted the audits' refusal): the listener's
/// flush after subscribing does not wait for the server (async-nats), so
/// `up` can come before the server took its subscriptions, and an advisory
/// published then would reach no one.
pub async fn wait_subscribed(s: &NatsServer, account: &str, running: &Running) {
    let refused = [("account", account), ("kind", "permission")];
    let url = format!("{}/connz?subs=1&acc={account}&limit=10000", s.monitor_url());
    Wait::secs(format!("the listener's subscriptions in {account}"), 20)
        .every(Duration::from_millis(50))
        .until_async(async || {
            let url = url.clone();
            let body = tokio::task::spawn_blocking(move || nats_test_server::http_get(&url))
                .await
                .expect("connz read");
            let connz: serde_json::Value = serde_json::from_str(&body).expect("connz JSON");
            let listed = |subject: &str| {
                connz["connections"].as_array().is_some_and(|list| {
                    list.iter().any(|c| {
                        c["subscriptions_list"]
                            .as_array()
                            .is_some_and(|subs| subs.iter().any(|s| s == subject))
                    })
                })
            };
            let errors = "nats_delivery_advisory_listener_errors_total";
            let audits_refused = exact(&running.text(), errors, &refused).is_some_and(|n| n > 0.0);
            let subscribed = listed("$JS.EVENT.ADVISORY.API")
                || audits_refused && listed("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.>");
            subscribed.then_some(()).ok_or(Text(body))
        })
        .await;
}

/// Starts one account's listener with fresh metrics and credentials `auth`
/// (`user:USER:PASSWORD`, ...), without waiting for anything: for listeners
/// that are meant to fail.
pub fn spawn_listener(s: &NatsServer, account: &str, auth: &str, args: AdvisoryArgs) -> Running {
    spawn_listener_at(nats_args(s), account, auth, args)
}

/// [`spawn_listener`] with its own connection flags (`nats`): a server
/// reached through something in between.
pub fn spawn_listener_at(nats: NatsArgs, account: &str, auth: &str, args: AdvisoryArgs) -> Running {
    let mut registry = Registry::default();
    let metrics = AdvisoryMetrics::register(&mut registry);
    let (stop, rx) = watch::channel(false);
    let listener = AccountListener {
        nats,
        account: account.to_string(),
        auth: auth.parse().expect("credentials"),
        args,
        metrics: metrics.clone(),
    };
    let task = tokio::spawn(listener.run(rx));
    Running {
        registry,
        metrics,
        stop,
        task,
    }
}

/// Text exposition of a registry.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("encode");
    out
}

/// Waits until the sample (exact labels) equals `want` (at most `secs`). A
/// count that overshoots on its way fails, unless it is read at `want`
/// in passing: a check that nothing more is counted belongs after a fact
/// that everything sent was handled ([`mark_handled`] for a live listener,
/// [`wait_all_acknowledged`] for a durable one), not after a pause.
pub async fn wait_value(
    registry: &Registry,
    name: &str,
    labels: &[(&str, &str)],
    want: f64,
    secs: u64,
) {
    Wait::secs(format!("{name}{labels:?} = {want}"), secs)
        .until(|| {
            let text = encode(registry);
            match exact(&text, name, labels) {
                Some(got) if got == want => Ok(()),
                got => Err(Text(format!("{got:?} in\n{text}"))),
            }
        })
        .await;
}

/// The server's state of the exporter's consumer `consumer` on ADV, or why
/// it could not be read (a cluster electing a leader, say).
pub async fn advisory_consumer(
    js: &async_nats::jetstream::Context,
    consumer: &str,
) -> Result<async_nats::jetstream::consumer::Info, String> {
    let adv = js.get_stream("ADV").await.map_err(|e| e.to_string())?;
    let mut c: async_nats::jetstream::consumer::PullConsumer = adv
        .get_consumer(consumer)
        .await
        .map_err(|e| e.to_string())?;
    c.info().await.cloned().map_err(|e| e.to_string())
}

/// Waits until the exporter's consumer `consumer` on ADV has nothing left
/// to hand out and nothing awaiting an acknowledgement: every advisory ADV
/// holds was counted, stored and shown (commit first, acknowledge last), so
/// a count read afterwards is final.
///
/// Or until its ack floor reaches what ADV held when the wait began. A wider
/// stream on a pre-2.10 server (which ignores the consumer's filter) also
/// hands the consumer the API audit advisory of each JetStream request,
/// this wait's own among them: a request's audit is still awaiting an ack
/// when the next request asks, so "nothing awaiting an ack" never holds
/// there, while a floor past every advisory stored before the wait does.
pub async fn wait_all_acknowledged(js: &async_nats::jetstream::Context, consumer: &str) {
    let mut adv = js.get_stream("ADV").await.expect("the advisory stream");
    let stored = adv.info().await.expect("ADV's state").state.last_sequence;
    Wait::secs(format!("every advisory acknowledged by {consumer}"), 30)
        .every(Duration::from_millis(100))
        .until_async(async || {
            let info = advisory_consumer(js, consumer).await?;
            let left = (info.num_pending, info.num_ack_pending);
            let floor = info.ack_floor.stream_sequence;
            (left == (0, 0) || floor >= stored)
                .then_some(())
                .ok_or(format!(
                    "pending, awaiting ack: {left:?}; ack floor {floor} of {stored}"
                ))
        })
        .await;
}

/// Waits until the default totals bucket holds an ack floor of at least
/// `floor` (advisory stream sequence), stored by the listener's probe: a
/// consumer made again starts after it.
pub async fn wait_stored_ack_floor(js: &async_nats::jetstream::Context, floor: u64) {
    let bucket = js
        .get_key_value("nats-delivery-exporter-totals")
        .await
        .expect("the totals bucket exists");
    Wait::secs(format!("an ack floor of {floor} stored"), 30)
        .every(Duration::from_millis(100))
        .until_async(async || {
            let entry = bucket.get("account").await.expect("read the account key");
            let totals: serde_json::Value =
                serde_json::from_slice(&entry.unwrap_or_default()).unwrap_or_default();
            let stored = totals["ack_floor"].as_u64().unwrap_or(0);
            (stored >= floor).then_some(()).ok_or(stored)
        })
        .await;
}

/// Connections `s` closed other than at the client's request (a refused
/// login, a failed TLS handshake), from its `/connz?state=closed`.
pub fn refused_connections(s: &NatsServer) -> usize {
    let url = format!("{}/connz?state=closed&limit=10000", s.monitor_url());
    let body = tokio::task::block_in_place(|| nats_test_server::http_get(&url));
    let connz: serde_json::Value = serde_json::from_str(&body).expect("connz JSON");
    let closed = connz["connections"].as_array().expect("closed connections");
    closed
        .iter()
        .filter(|c| c["reason"] != "Client Closed")
        .count()
}

/// Waits until `s` has refused `n` connections (multi-threaded runtimes
/// only: the monitoring request blocks its thread).
pub async fn wait_refused(s: &NatsServer, n: usize) {
    Wait::secs(format!("{n} connections refused by the server"), 30)
        .every(Duration::from_millis(100))
        .until(|| {
            let refused = refused_connections(s);
            (refused >= n).then_some(()).ok_or(refused)
        })
        .await;
}

/// The subjects of the advisories a live listener counts, for [`mark_handled`].
pub const MAX_DELIVERIES_SUBJECT: &str = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.MARK.MARK";
/// See [`MAX_DELIVERIES_SUBJECT`].
pub const TERMINATED_SUBJECT: &str = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.MARK.MARK";

/// Publishes an advisory of a type no one counts on `subject` with `app`
/// and waits until `running` (a live listener of `account`) has received
/// it, its `received_total` at `received`: a live listener handles the
/// messages of one subscription in order, one at a time, so every advisory
/// that subscription had before was handled in full (counted, copied).
pub async fn mark_handled(
    running: &Running,
    app: &async_nats::Client,
    subject: &str,
    account: &str,
    received: f64,
) {
    let marker = r#"{"type":"io.nats.test.marker","stream":"MARK","consumer":"MARK"}"#;
    app.publish(subject.to_string(), marker.into())
        .await
        .expect("publish the marker");
    app.flush().await.expect("flush the marker");
    let name = "nats_delivery_advisories_received_total";
    let labels = [("account", account)];
    Wait::secs(format!("the marker received ({name} = {received})"), 20)
        .until(|| {
            let text = running.text();
            match exact(&text, name, &labels) {
                Some(got) if got == received => Ok(()),
                got => Err(Text(format!("{got:?} in\n{text}"))),
            }
        })
        .await;
}

/// Creates stream `name` on `subject.>` in the client's account.
pub async fn stream(
    js: &async_nats::jetstream::Context,
    name: &str,
    subject: &str,
    max_msgs: i64,
) -> async_nats::jetstream::stream::Stream {
    js.create_stream(async_nats::jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![format!("{subject}.>")],
        max_messages: max_msgs,
        ..Default::default()
    })
    .await
    .expect("create stream")
}

/// Creates a durable pull consumer with explicit acks.
pub async fn pull_consumer(
    stream: &async_nats::jetstream::stream::Stream,
    name: &str,
    max_deliver: i64,
    ack_wait: Duration,
) -> async_nats::jetstream::consumer::PullConsumer {
    stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(name.to_string()),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            max_deliver,
            ack_wait,
            ..Default::default()
        })
        .await
        .expect("create consumer")
}

/// Publishes `n` messages `<subject>.<i>` with payload `msg-<i>` and waits for every PubAck.
pub async fn publish(js: &async_nats::jetstream::Context, subject: &str, n: usize) {
    publish_range(js, subject, 0..n).await;
}

/// Publishes messages `<subject>.<i>` with payload `msg-<i>` for each `i` in
/// `range` and waits for every PubAck.
pub async fn publish_range(
    js: &async_nats::jetstream::Context,
    subject: &str,
    range: std::ops::Range<usize>,
) {
    for i in range {
        js.publish(format!("{subject}.{i}"), format!("msg-{i}").into())
            .await
            .expect("publish")
            .await
            .expect("puback");
    }
}

/// Pulls from `consumer` without ever acknowledging until `done` says so
/// (or `secs` pass): drives every message to max_deliver.
pub async fn pull_without_ack(
    consumer: &async_nats::jetstream::consumer::PullConsumer,
    secs: u64,
    mut done: impl FnMut() -> bool,
) -> u64 {
    use futures::StreamExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    // Counted in an atomic and waited for with `until_spawned`: `let_die`
    // runs in spawned tasks.
    let deliveries = AtomicU64::new(0);
    Wait::secs("the scenario to be done", secs)
        .every(Duration::ZERO)
        .until_spawned(|| {
            let finished = done();
            let deliveries = &deliveries;
            async move {
                if finished {
                    return Ok(());
                }
                let mut batch = consumer
                    .fetch()
                    .max_messages(500)
                    .expires(Duration::from_millis(300))
                    .messages()
                    .await
                    .expect("fetch");
                while let Some(m) = batch.next().await {
                    m.expect("message");
                    deliveries.fetch_add(1, Ordering::Relaxed);
                }
                Err(deliveries.load(Ordering::Relaxed))
            }
        })
        .await;
    deliveries.into_inner()
}

/// Advisories the stream ADV holds.
pub async fn advisories_in_stream(js: &async_nats::jetstream::Context) -> u64 {
    let mut s = js.get_stream("ADV").await.expect("ADV exists");
    s.info().await.expect("ADV info").state.messages
}

/// Publishes `work.<first>` .. `work.<first + n - 1>` and pulls without
/// acknowledging until every message ran out of deliveries and ADV holds
/// `expected` advisories.
pub async fn let_die(
    js: &async_nats::jetstream::Context,
    consumer: &async_nats::jetstream::consumer::PullConsumer,
    first: usize,
    n: usize,
    expected: u64,
) {
    publish_range(js, "work", first..first + n).await;
    Wait::secs(
        format!("{expected} advisories in ADV (messages to die)"),
        60,
    )
    .every(Duration::ZERO)
    .until_spawned(|| async move {
        let stored = advisories_in_stream(js).await;
        if stored >= expected {
            return Ok(());
        }
        pull_without_ack(consumer, 5, {
            let mut once = false;
            move || std::mem::replace(&mut once, true)
        })
        .await;
        Err(stored)
    })
    .await;
    assert_eq!(advisories_in_stream(js).await, expected);
}
