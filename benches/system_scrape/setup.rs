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

/// Runs `step` until it succeeds, at most 20 times, counting the retries.
async fn retried<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    retries: &AtomicUsize,
    mut step: impl FnMut() -> F,
) -> T {
    for attempt in 1.. {
        match step().await {
            Ok(t) => return t,
            Err(e) if attempt < 20 => {
                retries.fetch_add(1, Ordering::Relaxed);
                if attempt == 1 {
                    eprintln!("{what}: {e}; trying again");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
    unreachable!()
}

/// How long each part of the setup took, and the requests tried again.
pub struct Setup {
    pub cluster_ready: Duration,
    pub streams: Duration,
    pub consumers: Duration,
    pub retries: usize,
}

/// Creates the R3 streams (one message each) and their consumers, many at
/// once, through a connection to each server in turn.
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
    let retries = AtomicUsize::new(0);
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
    let (contexts, retries_ref) = (&contexts, &retries);
    fstream::iter(0..streams)
        .for_each_concurrent(16, |s| async move {
            let js = &contexts[s % contexts.len()];
            let what = format!("stream S{s}");
            retried(&what, retries_ref, || {
                js.get_or_create_stream(stream_config(s))
            })
            .await;
            // A new stream's subjects reach the other servers a moment later.
            retried(&what, retries_ref, || async move {
                js.publish(format!("s{s}.x"), "x".into())
                    .await
                    .map_err(|e| e.to_string())?
                    .await
                    .map_err(|e| e.to_string())
            })
            .await;
        })
        .await;
    let streams_took = start.elapsed() - cluster_ready;
    let pairs = (0..streams).flat_map(|s| (0..consumers).map(move |c| (s, c)));
    fstream::iter(pairs.enumerate())
        .for_each_concurrent(env_or("BENCH_SETUP_CONCURRENCY", 32), |(i, (s, c))| {
            let js = &contexts[i % contexts.len()];
            async move {
                let config = || pull::Config {
                    durable_name: Some(format!("C{c}")),
                    ..Default::default()
                };
                let what = format!("consumer S{s}/C{c}");
                retried(&what, retries_ref, || {
                    js.create_consumer_on_stream(config(), format!("S{s}"))
                })
                .await;
            }
        })
        .await;
    Setup {
        cluster_ready,
        streams: streams_took,
        consumers: start.elapsed() - cluster_ready - streams_took,
        retries: retries.into_inner(),
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
