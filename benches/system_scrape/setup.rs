//! The cluster's contents: a system account beside a JetStream account,
//! and S R3 streams x C R3 consumers created many at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::stream::{self as fstream, StreamExt};
use nats_test_server::NatsServer;

use crate::support::env_or;

/// The accounts of every server: `sys` polls, `app` owns the streams.
pub const ACCOUNTS: &str = r#"
accounts {
  SYS { users: [ { user: sys, password: sys-secret } ] }
  APP { users: [ { user: app, password: app-secret } ], jetstream: enabled }
}
system_account: SYS
"#;

/// How long one step of the set-up is tried before the run stops: a
/// cluster busy with tens of thousands of Raft groups can lose its meta
/// leader for a while and answer "JetStream system temporarily
/// unavailable" (503) or nothing at all until it has a new one.
const STEP_DEADLINE: Duration = Duration::from_secs(600);

/// What the set-up's steps share when one fails: the count of retries,
/// and a gate through which a failed step waits, one at a time, until the
/// cluster has settled.
struct Tries {
    retries: AtomicUsize,
    settling: tokio::sync::Mutex<()>,
    /// Every server's `/healthz`.
    health: Vec<String>,
    http: reqwest::Client,
}

impl Tries {
    fn new(servers: &[NatsServer]) -> Tries {
        Tries {
            retries: AtomicUsize::new(0),
            settling: tokio::sync::Mutex::new(()),
            health: servers
                .iter()
                .map(|s| format!("{}/healthz", s.monitor_url()))
                .collect(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    /// Waits until every server's `/healthz` answers 200: a meta leader,
    /// and every stream and consumer current. On a busy machine a cluster
    /// can lose its Raft leaders in a storm of elections (no meta leader:
    /// every request answered 503); requests meanwhile only prolong it.
    async fn settle(&self) {
        let _one_at_a_time = self.settling.lock().await;
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            let mut unhealthy = None;
            for url in &self.health {
                match self.http.get(url).send().await {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) => unhealthy = Some(format!("{url}: {}", r.status())),
                    Err(e) => unhealthy = Some(format!("{url}: {e}")),
                }
            }
            let Some(why) = unhealthy else { return };
            assert!(Instant::now() < deadline, "not settled: {why}");
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Runs `step` until it succeeds, after each failure waiting longer
    /// (from 250 ms, doubling up to 8 s) and until the cluster has settled,
    /// for at most [`STEP_DEADLINE`].
    async fn retried<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
        &self,
        what: &str,
        mut step: impl FnMut() -> F,
    ) -> T {
        let deadline = Instant::now() + STEP_DEADLINE;
        let mut pause = Duration::from_millis(250);
        for attempt in 1.. {
            match step().await {
                Ok(t) => return t,
                Err(e) if Instant::now() < deadline => {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    if attempt == 1 || attempt % 10 == 0 {
                        eprintln!("{what} (try {attempt}): {e}; trying again");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(8));
                    self.settle().await;
                }
                Err(e) => panic!("{what}: {e} (tried for {STEP_DEADLINE:?})"),
            }
        }
        unreachable!()
    }
}

/// How long each part of the setup took, and the requests tried again.
pub struct Setup {
    pub cluster_ready: Duration,
    pub streams: Duration,
    pub consumers: Duration,
    pub retries: usize,
}

/// Whether stream `name` has a leader and every replica current, as its
/// leader says (a follower's view of the others means nothing).
async fn replicas_current(js: &jetstream::Context, name: &str) -> Result<(), String> {
    let mut stream = js.get_stream(name).await.map_err(|e| e.to_string())?;
    let info = stream.info().await.map_err(|e| e.to_string())?;
    let cluster = info.cluster.as_ref().ok_or("no cluster information")?;
    let current = cluster.replicas.iter().filter(|r| r.current).count();
    match cluster.leader {
        Some(_) if current + 1 == info.config.num_replicas => Ok(()),
        _ => Err(format!(
            "{current} replicas current besides the leader {:?}",
            cluster.leader
        )),
    }
}

/// Creates the R3 streams (one message each) and their consumers through a
/// connection to each server in turn: `BENCH_SETUP_CONCURRENCY` requests
/// at once (default 8), each stream's consumers only once its replicas are
/// current, a failed request tried again after a back-off and once the
/// cluster has settled ([`Tries::settle`]).
pub async fn create(servers: &[NatsServer], streams: usize, consumers: usize) -> Setup {
    let start = Instant::now();
    let mut contexts = Vec::new();
    for server in servers {
        let app =
            async_nats::ConnectOptions::with_user_and_password("app".into(), "app-secret".into())
                .connect(server.client_url())
                .await
                .unwrap();
        contexts.push(
            jetstream::ContextBuilder::new()
                .timeout(Duration::from_secs(30))
                .build(app),
        );
    }
    let tries = Tries::new(servers);
    let stream_config = |s: usize| stream::Config {
        name: format!("S{s}"),
        subjects: vec![format!("s{s}.>")],
        storage: stream::StorageType::Memory,
        num_replicas: 3,
        ..Default::default()
    };
    // The first one waits for the cluster to elect its meta leader; until
    // then requests go unanswered, so each try is short.
    let probe = jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(500))
        .build(contexts[0].client());
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = probe.get_or_create_stream(stream_config(0)).await {
        assert!(Instant::now() < deadline, "no JetStream cluster: {e}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cluster_ready = start.elapsed();
    let concurrency = env_or("BENCH_SETUP_CONCURRENCY", 8);
    let (contexts, tries) = (&contexts, &tries);
    fstream::iter(0..streams)
        .for_each_concurrent(concurrency, |s| async move {
            let js = &contexts[s % contexts.len()];
            let what = format!("stream S{s}");
            tries
                .retried(&what, || js.get_or_create_stream(stream_config(s)))
                .await;
            // A new stream's subjects reach the other servers a moment later.
            tries
                .retried(&what, || async move {
                    js.publish(format!("s{s}.x"), "x".into())
                        .await
                        .map_err(|e| e.to_string())?
                        .await
                        .map_err(|e| e.to_string())
                })
                .await;
            let name = format!("S{s}");
            tries.retried(&what, || replicas_current(js, &name)).await;
        })
        .await;
    let streams_took = start.elapsed() - cluster_ready;
    let made = AtomicUsize::new(0);
    let made = &made;
    let pairs = (0..streams).flat_map(|s| (0..consumers).map(move |c| (s, c)));
    fstream::iter(pairs.enumerate())
        .for_each_concurrent(concurrency, |(i, (s, c))| {
            let js = &contexts[i % contexts.len()];
            async move {
                let config = || pull::Config {
                    durable_name: Some(format!("C{c}")),
                    ..Default::default()
                };
                let what = format!("consumer S{s}/C{c}");
                tries
                    .retried(&what, || {
                        js.create_consumer_on_stream(config(), format!("S{s}"))
                    })
                    .await;
                let n = made.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(2000) {
                    eprintln!(
                        "{n} consumers made, {:.0?}, {} retries",
                        start.elapsed(),
                        tries.retries.load(Ordering::Relaxed)
                    );
                }
            }
        })
        .await;
    Setup {
        cluster_ready,
        streams: streams_took,
        consumers: start.elapsed() - cluster_ready - streams_took,
        retries: tries.retries.load(Ordering::Relaxed),
    }
}

/// The exporter's arguments for polling through the system account, and
/// `extra`.
pub fn system_account_args(servers: &[NatsServer], extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--system-account-polling",
        "--system-account",
        "user:sys:sys-secret",
        "--nats-servers",
        &servers[0].client_url(),
        // Message timestamps (consumer status) are read in the
        // JetStream account.
        "--nats-user",
        "app",
        "--nats-password",
        "app-secret",
    ]
    .map(str::to_string)
    .to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}
