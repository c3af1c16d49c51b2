//! Durable counting in a real 3-node cluster on loopback: the advisory
//! stream, the exporter's consumer and its totals bucket are R3, leaders
//! step down while messages die, and a server is killed; the count of dead
//! messages stays exact (a server that re-sends advisories after a leader
//! change is caught as a duplicate).
use crate::advisories_support;

use std::time::{Duration, Instant};

use advisories_support::*;
use async_nats::jetstream;
use nats_delivery_exporter::{AccountListener, AdvisoryMetrics, NatsArgs};
use prometheus_client::registry::Registry;

/// Asks the leader of a stream (or of a consumer) to step down, again while
/// the cluster is busy electing (a loaded machine refuses some for seconds),
/// for up to 30 s; true once a leader answered.
async fn step_down(app: &async_nats::Client, what: &str) -> bool {
    let subject = format!("$JS.API.{what}");
    Wait::secs(format!("{what} answered by a leader"), 30)
        .every(Duration::from_millis(500))
        .try_until_async(async || {
            let r = tokio::time::timeout(
                Duration::from_secs(5),
                app.request(subject.clone(), "".into()),
            )
            .await;
            let Ok(Ok(reply)) = r else {
                return Err("no answer".to_string());
            };
            let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap_or_default();
            match v["success"] == serde_json::Value::Bool(true) {
                true => Ok(()),
                false => Err(v.to_string()),
            }
        })
        .await
        .is_ok()
}

/// Pulls without acknowledging until every message of the consumer has
/// died (nothing pending, nothing awaiting acknowledgement), stepping
/// leaders down now and then (`faults` is called every round).
async fn let_die<F, Fut>(c: &jetstream::consumer::PullConsumer, secs: u64, mut faults: F)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use futures::StreamExt;
    let mut round = 0;
    Wait::secs("messages to all die", secs)
        .every(Duration::ZERO)
        .until_async(async || {
            // A pull can fail while a leader changes (503): pull again.
            if let Ok(mut batch) = c
                .fetch()
                .max_messages(500)
                .expires(Duration::from_millis(300))
                .messages()
                .await
            {
                while let Some(Ok(_)) = batch.next().await {}
            }
            faults(round).await;
            round += 1;
            match c.get_info().await {
                Ok(info) if info.num_pending == 0 && info.num_ack_pending == 0 && round > 5 => {
                    Ok(())
                }
                Ok(info) => Err(format!(
                    "round {round}: {} pending, {} awaiting acknowledgement",
                    info.num_pending, info.num_ack_pending
                )),
                Err(e) => Err(format!("round {round}: {e}")),
            }
        })
        .await;
}

/// The server's own record: the distinct messages its max-deliveries
/// advisories in ADV name (a re-sent advisory names one again), read until
/// it names `want` or a minute has passed. Right after leader changes on a
/// loaded machine, ADV's new leader answered for seconds with an empty state
/// (seen on 2.10.26 and 2.12.8), so a short answer is read again.
async fn dead_in_adv(js: &jetstream::Context, want: usize) -> std::collections::BTreeSet<u64> {
    // Each request is retried too: after leader changes (and on a loaded
    // machine) a request can time out.
    let deadline = Instant::now() + Duration::from_secs(60);
    let retry = |what: String| Wait::before(what, deadline).every(Duration::from_millis(200));
    let mut adv = retry("ADV".into())
        .until_async(async || js.get_stream("ADV").await)
        .await;
    Wait::before(format!("ADV to name {want} dead messages"), deadline)
        .every(Duration::from_millis(500))
        .try_until_async(async || {
            let state = retry("ADV info".into())
                .until_async(async || adv.info().await.map(|i| i.state.clone()))
                .await;
            let mut seqs = std::collections::BTreeSet::new();
            for n in state.first_sequence.max(1)..=state.last_sequence {
                let m = retry(format!("ADV seq {n}"))
                    .until_async(async || adv.get_raw_message(n).await)
                    .await;
                if m.subject.as_str() == "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.WORK.worker" {
                    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
                    seqs.insert(v["stream_seq"].as_u64().unwrap());
                }
            }
            match seqs.len() >= want {
                true => Ok(seqs),
                false => Err(seqs),
            }
        })
        .await
        .unwrap_or_else(|seqs| seqs)
}

/// Waits until every stream and consumer of the test answers from a leader
/// other than `lost` (any leader, with `lost` empty). A server publishes an advisory once, without waiting
/// for a stream to store it: advisories sent while the advisory stream has
/// no leader are lost by the server, before any exporter could see them.
async fn wait_for_leaders(app: &async_nats::Client, lost: &str) {
    let assets = [
        "STREAM.INFO.WORK",
        "STREAM.INFO.ADV",
        "STREAM.INFO.KV_nats-delivery-exporter-totals",
        "CONSUMER.INFO.WORK.worker",
        "CONSUMER.INFO.ADV.nats-delivery-exporter",
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    for what in assets {
        Wait::before(format!("{what}: a leader other than {lost:?}"), deadline)
            .every(Duration::from_millis(200))
            .until_async(async || {
                let reply = tokio::time::timeout(
                    Duration::from_secs(2),
                    app.request(format!("$JS.API.{what}"), "".into()),
                )
                .await;
                let Ok(Ok(reply)) = reply else {
                    return Err("no answer".to_string());
                };
                let v: serde_json::Value =
                    serde_json::from_slice(&reply.payload).unwrap_or_default();
                match v["cluster"]["leader"].as_str() {
                    Some(leader) if !leader.is_empty() && leader != lost => Ok(()),
                    other => Err(format!("leader {other:?}")),
                }
            })
            .await;
    }
}

/// A stream WORK and a durable consumer "worker" (max_deliver 2, ack_wait
/// 300 ms), both R3, created once the meta group has a leader.
async fn replicated_work_consumer(js: &jetstream::Context) -> jetstream::consumer::PullConsumer {
    // The meta group needs a leader before streams can be created.
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = Wait::before("a JetStream cluster for WORK", deadline)
        .every(Duration::from_millis(200))
        .until_async(async || {
            js.get_or_create_stream(jetstream::stream::Config {
                name: "WORK".into(),
                subjects: vec!["work.>".into()],
                num_replicas: 3,
                ..Default::default()
            })
            .await
        })
        .await;
    Wait::before("the R3 consumer worker", deadline)
        .every(Duration::from_millis(200))
        .until_async(async || {
            st.create_consumer(jetstream::consumer::pull::Config {
                durable_name: Some("worker".into()),
                max_deliver: 2,
                ack_wait: Duration::from_millis(300),
                num_replicas: 3,
                ..Default::default()
            })
            .await
        })
        .await
}

/// Starts the durable listener of APP with R3 advisory stream and bucket,
/// once it is up and both are R3; returns its stop signal and task.
async fn start_replicated_listener(
    urls: &[String],
    js: &jetstream::Context,
    registry: &mut Registry,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let metrics = AdvisoryMetrics::register(registry);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let listener = AccountListener {
        nats: NatsArgs::from_flags(["--nats-servers", &urls.join(",")]).unwrap(),
        account: "APP".into(),
        auth: "user:app:app-secret".parse().unwrap(),
        args: advisory_args(&["--advisories-stream", "ADV", "--advisories-replicas", "3"]),
        metrics,
    };
    let task = tokio::spawn(listener.run(rx));
    wait_value(
        registry,
        "nats_delivery_advisory_listener_up",
        &[("account", "APP")],
        1.0,
        30,
    )
    .await;
    let mut adv = js.get_stream("ADV").await.unwrap();
    assert_eq!(adv.info().await.unwrap().config.num_replicas, 3);
    let mut bucket = js
        .get_stream("KV_nats-delivery-exporter-totals")
        .await
        .unwrap();
    assert_eq!(bucket.info().await.unwrap().config.num_replicas, 3);
    (stop, task)
}

/// Advisories received that were not re-sent duplicates.
fn received_less_duplicates(text: &str) -> f64 {
    let app = [("account", "APP")];
    let received = exact(text, "nats_delivery_advisories_received_total", &app).unwrap();
    let duplicates = exact(text, "nats_delivery_advisories_duplicate_total", &app).unwrap();
    received - duplicates
}

/// 60 messages die while the leaders of WORK, its consumer, the advisory
/// consumer and the totals bucket step down in turn.
async fn die_while_leaders_step_down(
    app: &async_nats::Client,
    js: &jetstream::Context,
    consumer: &jetstream::consumer::PullConsumer,
) {
    publish_retrying(js, 0, 60).await;
    let downs = [
        "CONSUMER.LEADER.STEPDOWN.WORK.worker",
        "CONSUMER.LEADER.STEPDOWN.ADV.nats-delivery-exporter",
        "STREAM.LEADER.STEPDOWN.KV_nats-delivery-exporter-totals",
        "STREAM.LEADER.STEPDOWN.WORK",
    ];
    let stepped = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let_die(consumer, 120, |round| {
        let (app, stepped) = (app.clone(), stepped.clone());
        async move {
            if round < downs.len() && step_down(&app, downs[round]).await {
                stepped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .await;
    let stepped = stepped.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(stepped, downs.len(), "leaders that stepped down");
}

/// Publishes, retrying while the cluster elects a new leader.
async fn publish_retrying(js: &jetstream::Context, from: usize, n: usize) {
    for i in from..from + n {
        Wait::secs(format!("work.{i} stored"), 30)
            .every(Duration::from_millis(200))
            .until_async(
                async || match js.publish(format!("work.{i}"), "m".into()).await {
                    Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                },
            )
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_changes_and_a_lost_server_leave_the_count_exact() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("nats_delivery_exporter=info")
        .with_test_writer()
        .try_init();
    let mut servers = nats_test_server::cluster(3, ACCOUNTS);
    let urls: Vec<String> = servers.iter().map(|s| s.client_url()).collect();
    let app = client(&servers[0], "app").await;
    let js = jetstream::new(app.clone());
    let consumer = replicated_work_consumer(&js).await;

    let mut registry = Registry::default();
    let (stop, task) = start_replicated_listener(&urls, &js, &mut registry).await;

    let worker = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    let count = || exact(&encode(&registry), name, &worker).unwrap_or(0.0);

    // The advisory stream's leader changes first, and it has a new one
    // before anything dies: the server publishes each advisory once, and one
    // published while the stream has no leader is stored nowhere (a death
    // during that election is lost by the server, not by the exporter).
    assert!(step_down(&app, "STREAM.LEADER.STEPDOWN.ADV").await);
    wait_for_leaders(&app, "").await;
    // 60 messages die while every other leader involved steps down in turn.
    die_while_leaders_step_down(&app, &js, &consumer).await;
    // Every message died; the server recorded each death, some perhaps
    // twice (re-sent after a leader change); the exporter counts each once.
    let dead = dead_in_adv(&js, 60).await;
    assert_eq!(dead.len(), 60, "the server did not report every death");
    wait_value(&registry, name, &worker, 60.0, 30).await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    assert_eq!(count(), 60.0, "{}", encode(&registry));

    // A server dies; 30 more messages die; counting goes on, exactly.
    let lost = servers.remove(2);
    let lost_name = lost.name.clone();
    drop(lost);
    wait_for_leaders(&app, &lost_name).await;
    publish_retrying(&js, 60, 30).await;
    let_die(&consumer, 120, |_| async {}).await;
    assert_eq!(dead_in_adv(&js, 90).await.len(), 90);
    // The listener may be setting up again after the loss (each attempt
    // waits for leaders being elected on a busy machine): give it time.
    wait_value(&registry, name, &worker, 90.0, 90).await;
    wait_value(
        &registry,
        "nats_delivery_advisory_listener_up",
        &[("account", "APP")],
        1.0,
        60,
    )
    .await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = encode(&registry);
    assert_eq!(count(), 90.0, "{text}");
    // Every advisory received was either counted or a re-sent duplicate.
    assert_eq!(received_less_duplicates(&text), 90.0, "{text}");
    nats_test_server::reference::assert_documented(&text);
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .unwrap()
        .unwrap();
}
