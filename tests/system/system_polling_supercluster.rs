//! Polling a super-cluster through one system-account connection to one of
//! its servers, against real servers: cluster A (3 servers, an R3 stream
//! with two consumers) and cluster B (2 servers) joined by gateways, and
//! two leaf node servers attached to a0. Every server of both clusters is
//! reported with every source up, every stream and consumer once with the
//! values HTTP polling of every server gives, the gateway connections as
//! HTTP polling sees them; a leaf node server is reached only when its leaf
//! connection binds the system account (and an exporter connected to that
//! leaf reaches every server too); leader step-downs during polling
//! never make a stream or consumer appear twice, nor (2.10 on) change its
//! values.
use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::system_polling::{jetstream_samples, system_exporter, work_stream, ACCOUNTS};
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::{samples, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const SOURCES: &str = "varz,connz,jsz,accstatz,routez,gatewayz";
const SOURCE_COUNT: usize = 6;
/// The servers of both clusters, and the leaf whose system account is bound.
const REACHED: [&str; 6] = ["a0", "a1", "a2", "b0", "b1", "leaf-sys"];

/// A leaf node server of its own (no JetStream, the same accounts) whose
/// leaf connections to `hub` bind each of `accounts` (`(user, account)`;
/// passwords are `<user>-secret`) to the hub's account of the same name.
fn leaf(name: &str, hub: &NatsServer, accounts: &[(&str, &str)]) -> NatsServer {
    let port = hub.leafnode_port().expect("the hub listens for leaf nodes");
    let remotes = accounts
        .iter()
        .map(|(user, account)| {
            format!(
                "{{ url: \"nats-leaf://{user}:{user}-secret@127.0.0.1:{port}\", account: {account} }}"
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    NatsServer::builder()
        .name(name)
        .config(ACCOUNTS)
        .config(&format!("leafnodes {{ remotes: [{remotes}] }}"))
        .start()
}

fn up(text: &str, server: &str) -> Vec<(String, f64)> {
    samples(text, "nats_delivery_up", &[("server", server)])
}

/// Checks that every server of [`REACHED`] has every source up.
fn every_source_up(text: &str) {
    for name in REACHED {
        let up = up(text, name);
        assert_eq!(up.len(), SOURCE_COUNT, "{name}: {up:?}");
        assert!(up.iter().all(|(_, v)| *v == 1.0), "{name}: {up:?}");
    }
}

/// Every gateway connection's series, labels only: pending bytes move, and
/// through the system account they include the exporter's own replies on
/// their way through the gateways (a few KB at the moment of polling).
fn gateway_series(text: &str) -> BTreeSet<String> {
    samples(text, "nats_delivery_gateway_pending_bytes", &[])
        .into_iter()
        .map(|(labels, _)| labels)
        .collect()
}

/// How many gateway series have all of `labels`.
fn gateways(text: &str, labels: &[(&str, &str)]) -> usize {
    samples(text, "nats_delivery_gateway_pending_bytes", labels).len()
}

/// The stream's and each consumer's numbers, as the scenario left them:
/// (family, consumer or "" for the stream, value).
const EXACT: [(&str, &str, f64); 5] = [
    ("nats_delivery_stream_messages", "", 20.0),
    ("nats_delivery_consumer_pending_messages", "slow", 12.0),
    ("nats_delivery_consumer_ack_pending_messages", "slow", 3.0),
    ("nats_delivery_consumer_pending_messages", "fast", 20.0),
    ("nats_delivery_consumer_ack_pending_messages", "fast", 0.0),
];

/// How [`at_most_once`] checks the values of [`EXACT`].
#[derive(Clone, Copy, PartialEq)]
enum Values {
    /// Only that each series is there at most once.
    Unchecked,
    /// Each value as the scenario left it.
    Exact,
    /// As [`Values::Exact`], except that a consumer's pending or ack pending
    /// count may be 0: during a consumer leader change the server names
    /// the new leader before that server has taken over the consumer, and
    /// for that moment its /jsz may show its follower state, where the
    /// pending count is not kept (seen once on 2.11.11: `fast` with 0
    /// pending, not 20, its delivered and ack floor right).
    ExactOrFollowerZero,
}

/// What [`at_most_once`] found of [`EXACT`].
struct Seen {
    /// Entries there (a consumer between two leaders may be missing).
    present: usize,
    /// Entries at 0 where [`Values::ExactOrFollowerZero`] allows it.
    follower_zeros: usize,
}

/// Checks that no stream or consumer series is in `text` twice, and that
/// each of [`EXACT`] is there at most once, with its value as `values`
/// says.
fn at_most_once(text: &str, values: Values) -> Seen {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("nats_delivery_stream_") || l.starts_with("nats_delivery_consumer_")
        })
        .collect();
    let distinct: BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series))
        .collect();
    assert_eq!(distinct.len(), lines.len(), "a series twice:\n{text}");
    let mut seen = Seen {
        present: 0,
        follower_zeros: 0,
    };
    for (family, consumer, expected) in EXACT {
        let mut labels = vec![("stream", "WORK")];
        if !consumer.is_empty() {
            labels.push(("consumer", consumer));
        }
        let found = samples(text, family, &labels);
        assert!(found.len() <= 1, "{family} {consumer} twice: {found:?}");
        if let Some((series, v)) = found.first() {
            let follower_zero = values == Values::ExactOrFollowerZero
                && !consumer.is_empty()
                && *v == 0.0
                && expected != 0.0;
            if follower_zero {
                seen.follower_zeros += 1;
            } else if values != Values::Unchecked {
                let all = lines.join("\n");
                assert_eq!(*v, expected, "{family}{{{series}}} in:\n{all}");
            }
            seen.present += 1;
        }
    }
    seen
}

/// [`at_most_once`] with every value checked; the entries there.
fn at_most_once_and_exact(text: &str) -> usize {
    at_most_once(text, Values::Exact).present
}

/// Asks a stream or consumer leader to step down (`what` after
/// `$JS.API.`), retrying while the cluster is electing; true once done.
async fn step_down(app: &async_nats::Client, what: &str) -> bool {
    Wait::secs(format!("{what} done"), 20)
        .every(Duration::from_millis(300))
        .try_until_async(async || {
            let request = app.request(format!("$JS.API.{what}"), "".into());
            let reply = tokio::time::timeout(Duration::from_secs(5), request).await;
            let reply = reply.map_err(|_| "no answer".to_string())?;
            let reply = reply.map_err(|e| e.to_string())?;
            let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap_or_default();
            let done = v["success"] == serde_json::Value::Bool(true);
            done.then_some(()).ok_or(v.to_string())
        })
        .await
        .is_ok()
}

/// Connected to leaf-sys, the exporter reaches the hub's servers through
/// the leaf connection, and reports what HTTP polling does.
async fn the_leaf_reaches_every_server(leaf_url: &str, via_http: &str) {
    let from_leaf = system_exporter(leaf_url, SOURCES).await;
    let expected = jetstream_samples(via_http);
    let text = Wait::secs("every server from the leaf", 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let t = common::scrape(&from_leaf).await;
            let all = value(&t, "nats_delivery_survey_servers_answered", &[]) == Some(6.0);
            (all && jetstream_samples(&t) == expected).then_some(t)
        })
        .await;
    every_source_up(&text);
    drop(from_leaf);
}

/// How much to check during step-downs: nats-server 2.9 clears a
/// consumer's state when its leader steps down, a moment before any replica
/// stops naming it the leader, so every /jsz then shows nothing awaiting an
/// ack; 2.10 on keep the values exact. (A new consumer leader's follower
/// count of 0, seen once on 2.11.11, is no longer let through: such a claim
/// is not taken, `sources/jsz/view.rs`.)
fn values_checked_during_step_downs(server: &NatsServer) -> Values {
    let version = common::monitor_json(&server.monitor_url(), "varz")["version"].clone();
    let version = version.as_str().unwrap_or_default().to_string();
    let exact = nats_test_server::version_numbers(&version) >= vec![2, 10];
    let values = if exact {
        Values::Exact
    } else {
        Values::Unchecked
    };
    if !exact {
        println!("nats-server {version}: values during step-downs not checked (only that each series is there once): the server reports a stepping-down consumer leader with its state cleared");
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_system_connection_reports_the_supercluster_as_http_polling_does() {
    let clusters = nats_test_server::supercluster(&[("A", 3), ("B", 2)], ACCOUNTS);
    let hub = &clusters[0][0];
    // A leaf connection carries a server's system requests only when it
    // binds the system account: leaf-sys binds SYS and APP, leaf-app APP
    // alone (all a leaf connection binds by default is one account).
    let leaves = [
        leaf("leaf-sys", hub, &[("sys", "SYS"), ("app", "APP")]),
        leaf("leaf-app", hub, &[("app", "APP")]),
    ];
    let js = work_stream(&hub.client_url()).await;
    let urls: Vec<String> = clusters
        .iter()
        .flatten()
        .chain(&leaves)
        .map(|s| s.monitor_url())
        .collect();
    let http = common::exporter(
        &urls,
        &["--consumer-status-window", "0s", "--sources", SOURCES],
    );
    let system = system_exporter(&hub.client_url(), SOURCES).await;

    // Acks settle and gateway connections form meanwhile: both are read
    // until they agree, with every gateway connection there (each server
    // has one outbound connection to the other cluster, and one inbound
    // from each server of the other cluster that chose it) and the five
    // acks processed (until then both can agree on 8 awaiting an ack).
    let held = [("stream", "WORK"), ("consumer", "slow")];
    let (via_http, via_system) = Wait::secs("the same series", 60)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let h = common::scrape(&http).await;
            let s = common::scrape(&system).await;
            let same = jetstream_samples(&h) == jetstream_samples(&s)
                && gateway_series(&h) == gateway_series(&s)
                && gateways(&s, &[]) == 10
                && value(&s, "nats_delivery_survey_servers_answered", &[]) == Some(6.0)
                && value(&s, "nats_delivery_consumer_ack_pending_messages", &held) == Some(3.0);
            same.then_some((h, s))
        })
        .await;
    every_source_up(&via_system);
    assert_eq!(
        value(&via_system, "nats_delivery_survey_servers_expected", &[]),
        Some(6.0)
    );
    assert_eq!(at_most_once_and_exact(&via_system), EXACT.len());
    compare_gateways(&via_http, &via_system);
    // leaf-app is polled over HTTP, but through the system account it is
    // out of reach: it neither answers nor is expected.
    assert_eq!(up(&via_http, "leaf-app").len(), SOURCE_COUNT);
    assert!(up(&via_system, "leaf-app").is_empty(), "{via_system}");
    // The other way round: from leaf-sys, the same.
    the_leaf_reaches_every_server(&leaves[0].client_url(), &via_http).await;

    let values = values_checked_during_step_downs(hub);
    step_downs_during_polling(&js, &system, values).await;
    let text = Wait::secs("the same series after step-downs", 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let h = common::scrape(&http).await;
            let s = common::scrape(&system).await;
            let same = jetstream_samples(&h) == jetstream_samples(&s)
                && at_most_once_and_exact(&s) == EXACT.len();
            same.then_some(s)
        })
        .await;
    assert_eq!(
        value(&text, "nats_delivery_survey_servers_answered", &[]),
        Some(6.0)
    );
}

/// The gateway connections through the system account are those HTTP
/// polling sees: each server of a cluster has one outbound connection to
/// the other cluster and the inbound ones of the other cluster's servers
/// that chose it, so 3 inbound in B and 2 in A.
fn compare_gateways(via_http: &str, via_system: &str) {
    assert_eq!(gateway_series(via_http), gateway_series(via_system));
    for (servers, other, inbound) in [(&["a0", "a1", "a2"][..], "B", 2), (&["b0", "b1"], "A", 3)] {
        let mut seen = 0;
        for &server in servers {
            let outbound = [
                ("server", server),
                ("direction", "outbound"),
                ("gateway", other),
            ];
            assert_eq!(gateways(via_system, &outbound), 1, "{server}");
            let from = [
                ("server", server),
                ("direction", "inbound"),
                ("gateway", other),
            ];
            seen += gateways(via_system, &from);
        }
        assert_eq!(seen, inbound, "inbound from {other}:\n{via_system}");
    }
    for leaf in ["leaf-sys", "leaf-app"] {
        assert_eq!(gateways(via_http, &[("server", leaf)]), 0);
    }
}

/// Steps the consumers' and the stream's leaders down, one after another,
/// scraping all along: no scrape may show a stream or consumer series
/// twice, nor with another value than `values` allows. (Two servers
/// claiming one consumer in the same scrape was not seen in these runs on
/// any version:
/// the choice of one leader among several claims is tested in
/// `src/sources/jsz/leaders.rs`.)
async fn step_downs_during_polling(
    js: &async_nats::jetstream::Context,
    system: &Exporter,
    values: Values,
) {
    let app = js.client();
    let downs = [
        "CONSUMER.LEADER.STEPDOWN.WORK.slow",
        "STREAM.LEADER.STEPDOWN.WORK",
        "CONSUMER.LEADER.STEPDOWN.WORK.fast",
        "CONSUMER.LEADER.STEPDOWN.WORK.slow",
        "STREAM.LEADER.STEPDOWN.WORK",
        "CONSUMER.LEADER.STEPDOWN.WORK.fast",
    ];
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let done = AtomicBool::new(false);
    let scraped = AtomicUsize::new(0);
    let stepping = async {
        let mut stepped = 0;
        for what in downs {
            stepped += usize::from(step_down(&app, what).await);
            // Scrapes see the group through its election: three begun
            // after the step-down before the next one.
            let after = scraped.load(Ordering::Relaxed) + 4;
            Wait::secs("three scrapes after a step-down", 60)
                .every(Duration::from_millis(50))
                .until(|| {
                    let n = scraped.load(Ordering::Relaxed);
                    (n >= after).then_some(()).ok_or(n)
                })
                .await;
        }
        done.store(true, Ordering::Relaxed);
        stepped
    };
    let scraping = async {
        let (mut scrapes, mut complete, mut follower_zeros) = (0, 0, 0);
        while !done.load(Ordering::Relaxed) {
            let text = common::scrape(system).await;
            scraped.fetch_add(1, Ordering::Relaxed);
            scrapes += 1;
            let seen = at_most_once(&text, values);
            complete += usize::from(seen.present == EXACT.len());
            follower_zeros += usize::from(seen.follower_zeros > 0);
            // A scrape's pace, as Prometheus has one.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (scrapes, complete, follower_zeros)
    };
    let (stepped, (scrapes, complete, follower_zeros)) = tokio::join!(stepping, scraping);
    println!(
        "{stepped} of {} leaders stepped down; {complete} of {scrapes} scrapes had every series, {follower_zeros} a new consumer leader's follower count of 0",
        downs.len()
    );
    assert!(stepped >= 4, "only {stepped} of {} step-downs", downs.len());
}

/// The scenario's stream and consumers as text, with `fast`'s pending count
/// set to `fast_pending`.
fn scenario_text(fast_pending: f64) -> String {
    EXACT
        .iter()
        .map(|&(family, consumer, v)| {
            let fast = (consumer, family) == ("fast", "nats_delivery_consumer_pending_messages");
            let v = if fast { fast_pending } else { v };
            match consumer {
                "" => format!("{family}{{account=\"APP\",stream=\"WORK\"}} {v}\n"),
                c => format!("{family}{{account=\"APP\",stream=\"WORK\",consumer=\"{c}\"}} {v}\n"),
            }
        })
        .collect()
}

#[test]
fn only_a_new_leaders_follower_zero_is_let_through_during_step_downs() {
    let exact = scenario_text(20.0);
    assert_eq!(at_most_once(&exact, Values::Exact).present, EXACT.len());
    let zero = scenario_text(0.0);
    let seen = at_most_once(&zero, Values::ExactOrFollowerZero);
    assert_eq!((seen.present, seen.follower_zeros), (EXACT.len(), 1));
    assert_eq!(at_most_once(&zero, Values::Unchecked).present, EXACT.len());
    for (text, values) in [
        (zero, Values::Exact),
        (scenario_text(7.0), Values::ExactOrFollowerZero),
    ] {
        let checked = std::panic::catch_unwind(|| at_most_once(&text, values).present);
        assert!(checked.is_err(), "a wrong value passed:\n{text}");
    }
}
