//! The end-to-end canary against a real server: healthy, it loses nothing
//! and every message it produced is back; after the server is killed and
//! started again it recovers by itself. `canary_partition.rs` cuts its
//! connection instead. Every reading checks `produced == received + lost +
//! pending`, the identity that makes the loss count exact.
use crate::advisories_support::{self, encode, exact, Text, Wait};

use std::time::Duration;

use clap::Parser;
use nats_delivery_exporter::{start_canary, Config};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// One account's canary counts, read from one exposition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counts {
    pub produced: f64,
    pub acknowledged: f64,
    pub received: f64,
    pub lost: f64,
    pub late: f64,
    pub pending: f64,
    pub up: f64,
}

/// Canaries started from the exporter's flags, as `main` starts them.
pub struct Canary {
    pub registry: Registry,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Canary {
    /// Starts the canaries `flags` ask for (after the program name).
    pub fn start(flags: &[&str]) -> Canary {
        let mut args = vec!["nats-delivery-exporter", "--canary"];
        args.extend_from_slice(flags);
        let config = Config::try_parse_from(args).expect("flags");
        let mut registry = Registry::default();
        let (stop, rx) = watch::channel(false);
        let tasks = start_canary(&config.nats, &config.canary, &mut registry, rx).expect("start");
        Canary {
            registry,
            stop,
            tasks,
        }
    }

    /// A canary in account APP of the server at `url`, one message every
    /// 100 ms, lost past `deadline`.
    pub fn start_fast(url: &str, deadline: &str) -> Canary {
        Canary::start(&[
            "--nats-servers",
            url,
            "--nats-account",
            "APP=user:app:app-secret",
            "--canary-interval",
            "100ms",
            "--canary-deadline",
            deadline,
        ])
    }

    /// The exposition.
    pub fn text(&self) -> String {
        encode(&self.registry)
    }

    /// `account`'s counts; panics unless the identity holds.
    pub fn counts(&self, account: &str) -> Counts {
        counts_in(&self.text(), account)
    }

    /// Waits (at most `secs`) until `account`'s counts satisfy `done`.
    pub async fn until(
        &self,
        account: &str,
        what: &str,
        secs: u64,
        done: impl Fn(&Counts) -> bool,
    ) -> Counts {
        Wait::secs(format!("{account}: {what}"), secs)
            .until(|| {
                let text = self.text();
                let c = counts_in(&text, account);
                if done(&c) {
                    Ok(c)
                } else {
                    Err(Text(format!("{c:?}\n{text}")))
                }
            })
            .await
    }

    /// Stops the canaries as the exporter does on SIGTERM and waits for them.
    pub async fn stop(self) -> Registry {
        self.stop.send(true).expect("canaries alive");
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .expect("the canary stops within 15 s")
                .expect("the canary did not panic");
        }
        self.registry
    }
}

/// `account`'s counts in `text`; panics unless the identity holds.
pub fn counts_in(text: &str, account: &str) -> Counts {
    let l = [("account", account)];
    let get = |name: &str| exact(text, name, &l).unwrap_or_else(|| panic!("{name} in\n{text}"));
    let c = Counts {
        produced: get("nats_delivery_canary_produced_messages_total"),
        acknowledged: get("nats_delivery_canary_acknowledged_messages_total"),
        received: get("nats_delivery_canary_received_messages_total"),
        lost: get("nats_delivery_canary_lost_messages_total"),
        late: get("nats_delivery_canary_late_messages_total"),
        pending: get("nats_delivery_canary_pending_messages"),
        up: get("nats_delivery_canary_up"),
    };
    assert_eq!(
        c.produced,
        c.received + c.lost + c.pending,
        "produced = received + lost + pending: {c:?}"
    );
    c
}

/// An error count of `account`.
pub fn errors(text: &str, account: &str, kind: &str) -> f64 {
    exact(
        text,
        "nats_delivery_canary_errors_total",
        &[("account", account), ("kind", kind)],
    )
    .unwrap_or_else(|| panic!("errors {kind} in\n{text}"))
}

/// Flags for canaries in APP and OTHER on `url`, one message per 50 ms.
fn two_accounts(url: &str) -> Vec<String> {
    [
        "--nats-servers",
        url,
        "--nats-account",
        "APP=user:app:app-secret,OTHER=user:other:other-secret",
        "--canary-interval",
        "50ms",
    ]
    .map(String::from)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_server_loses_nothing_and_everything_comes_back() {
    let s = advisories_support::server();
    let flags = two_accounts(&s.client_url());
    let canary = Canary::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    for account in ["APP", "OTHER"] {
        canary
            .until(account, "100 messages back", 30, |c| c.received >= 100.0)
            .await;
    }
    let registry = canary.stop().await;
    let text = encode(&registry);
    nats_test_server::reference::assert_documented(&text);
    let app = advisories_support::client(&s, "app").await;
    let js = async_nats::jetstream::new(app);
    for account in ["APP", "OTHER"] {
        let c = counts_in(&text, account);
        println!("{account}: {c:?}");
        assert_eq!((c.lost, c.late), (0.0, 0.0), "{account}: {c:?}");
        // Publishing stops at once; what was out at that moment is pending.
        assert!(c.pending <= 2.0, "{account}: {c:?}");
        assert_eq!(c.produced, c.received + c.pending);
        for kind in ["connect", "setup", "read", "publish", "unexpected"] {
            assert_eq!(errors(&text, account, kind), 0.0, "{account} {kind}");
        }
        let l = [("account", account)];
        assert_eq!(
            exact(&text, "nats_delivery_canary_latency_seconds_count", &l),
            Some(c.received),
            "one latency per message back"
        );
        // Subject `nats_delivery.canary.<22-character NUID>`, payload the
        // sequence in decimal.
        let subject = "nats_delivery.canary.".len() as f64 + 22.0;
        let payloads: f64 = (1..=c.produced as u64)
            .map(|seq| seq.to_string().len() as f64)
            .sum();
        assert_eq!(
            exact(&text, "nats_delivery_canary_sent_bytes_total", &l),
            Some(subject * c.produced + payloads)
        );
    }
    // The stream is bounded and the canary's consumer is gone.
    let mut stream = js.get_stream("NATS_DELIVERY_CANARY").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.state.consumer_count, 0, "the consumer is deleted");
    let config = &info.config;
    assert_eq!(
        (config.max_messages, config.max_bytes, config.max_age),
        (1000, 1 << 20, Duration::from_secs(5))
    );
    assert_eq!(
        config.storage,
        async_nats::jetstream::stream::StorageType::Memory
    );
    assert_eq!(config.subjects, ["nats_delivery.canary.>"]);
}

/// In a 3-node cluster with an R3 stream, the canary goes through the
/// stream's Raft group (its server list names all three servers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_cluster_loses_nothing() {
    let servers = nats_test_server::cluster(3, advisories_support::ACCOUNTS);
    let urls: Vec<String> = servers.iter().map(|s| s.client_url()).collect();
    let urls = urls.join(",");
    let canary = Canary::start(&[
        "--nats-servers",
        &urls,
        "--nats-account",
        "APP=user:app:app-secret",
        "--canary-interval",
        "50ms",
        "--canary-replicas",
        "3",
    ]);
    canary
        .until("APP", "100 messages back", 60, |c| c.received >= 100.0)
        .await;
    let registry = canary.stop().await;
    let text = encode(&registry);
    let c = counts_in(&text, "APP");
    println!("cluster: {c:?}");
    assert_eq!((c.lost, c.late), (0.0, 0.0), "{c:?}");
    assert!(c.pending <= 2.0, "{c:?}");
    for kind in ["connect", "read", "publish", "unexpected"] {
        assert_eq!(errors(&text, "APP", kind), 0.0, "{kind}");
    }
    let js = async_nats::jetstream::new(advisories_support::client(&servers[1], "app").await);
    let mut stream = js.get_stream("NATS_DELIVERY_CANARY").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3);
    assert_eq!(info.state.consumer_count, 0, "the consumer is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_server_restart_the_canary_recovers_by_itself() {
    let mut s = advisories_support::server();
    let canary = Canary::start_fast(&s.client_url(), "3s");
    let before = canary
        .until("APP", "20 messages back", 30, |c| c.received >= 20.0)
        .await;
    assert_eq!(before.lost, 0.0);
    // The memory stream goes with the server: the canary makes it again.
    s.kill_and_restart(false);
    let back = canary
        .until("APP", "30 messages back after the restart", 60, |c| {
            c.received >= before.received + 30.0 && c.up == 1.0
        })
        .await;
    let text = canary.text();
    let noticed = errors(&text, "APP", "read") + errors(&text, "APP", "setup");
    assert!(noticed >= 1.0, "the restart was noticed:\n{text}");
    // Once 40 more are back (4 s at 100 ms, past the 3 s deadline), every message
    // of the outage has met its deadline: lost grows no more.
    let settled = canary
        .until("APP", "40 more back", 30, |c| {
            c.received >= back.received + 40.0
        })
        .await;
    let after = canary
        .until("APP", "30 more back again", 30, |c| {
            c.received >= settled.received + 30.0
        })
        .await;
    println!("before {before:?}\nback {back:?}\nsettled {settled:?}\nafter {after:?}");
    assert_eq!(after.lost, settled.lost, "lost stopped growing");
    assert!(after.produced > settled.produced);
    canary.stop().await;
}

/// The canary's consumer deleted under it: its reading fails and it sets a
/// consumer up again, which starts past the last message read. What was
/// sent meanwhile, still in the stream, comes back: nothing counts lost.
/// (A consumer delivering only new messages skipped them: some 10 to 20
/// lost at a 100 ms interval, for a pause of a second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_set_up_again_skips_nothing() {
    use futures::TryStreamExt;
    let s = advisories_support::server();
    let canary = Canary::start_fast(&s.client_url(), "10s");
    let before = canary
        .until("APP", "20 messages back", 30, |c| c.received >= 20.0)
        .await;
    let js = async_nats::jetstream::new(advisories_support::client(&s, "app").await);
    let stream = js.get_stream("NATS_DELIVERY_CANARY").await.unwrap();
    let names: Vec<String> = stream.consumer_names().try_collect().await.unwrap();
    // The canary's consumer (and any it left from an earlier reading).
    assert!(!names.is_empty(), "the canary has a consumer");
    for name in &names {
        stream.delete_consumer(name).await.unwrap();
    }
    let again = canary
        .until("APP", "the reading failed and 30 more back", 60, |c| {
            c.received >= before.received + 30.0
        })
        .await;
    let text = canary.text();
    assert!(
        errors(&text, "APP", "read") >= 1.0,
        "the reading failed:\n{text}"
    );
    // Every message sent until the reading failed is past its deadline
    // by the time 10 s more have been sent, and none is lost.
    let after = canary
        .until("APP", "110 more back", 60, |c| {
            c.received >= again.received + 110.0
        })
        .await;
    println!("before {before:?}\nagain {again:?}\nafter {after:?}");
    assert_eq!((after.lost, after.late), (0.0, 0.0), "{after:?}");
    canary.stop().await;
}
