//! Mirrors and sources whose origin is on a leaf node in another JetStream
//! domain, and the leaf cut off by the network. The hub (domain `hub`)
//! holds M_ALL and S_ALL, a mirror and a source of ALL, and M_FEW and S_FEW
//! of FEW (max_msgs 5); ALL and FEW are on the leaf (domain `leaf`), reached
//! through `$JS.leaf.API`, in a network namespace of its own. The exporter
//! watches the hub only: no `/jsz` it reads shows an origin.
//!
//! Every copy takes m1 to m3. Then the leaf's link goes down, and an
//! application beside the leaf publishes m4 to m15 to each origin: FEW
//! removes m1 to m10 meanwhile, m4 to m10 before any copy had them. While
//! cut, every scrape serves each copy's contact age, larger than the one
//! before, and its lag as the hub says it: 0, as before the cut, though 12
//! messages wait (the server updates the lag only when a message arrives).
//! Once the link is back every copy resumes: lag 0, contact age below the
//! alert's threshold, ALL's copies hold m1 to m15, FEW's lack exactly m4 to
//! m10, and the exporter counts those 7 as removed before copy (exact), for
//! the mirror on every version and for the source from 2.15 (which reports
//! the origin sequence it copied last).
//!
//! Both servers ping every second (`ping_max` 2), so the cut closes the
//! leaf connection within seconds, as the default 2-minute pings do in a
//! cut of minutes: what the leaf delivered into the dead connection is
//! gone, and the copies resume from the origin's store. The ages and counts
//! served, scraped about a second apart, are fed to
//! NatsJetStreamOriginInactive and NatsJetStreamOriginMessagesRemovedBeforeCopy
//! (`origin_leaf_cut_alert.rs`).
use crate::common;
use crate::origin_leaf_cut_alert::{alerts_fire_and_resolve, Served};
use crate::stream_origins::{create, labels, payloads, server_stream};

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::{NatsServer, Network};
use serde_json::{json, Value};

const LAG: &str = "nats_delivery_stream_origin_lag_messages";
const AGE: &str = "nats_delivery_stream_origin_contact_age_seconds";
const REMOVED: &str = "nats_delivery_stream_origin_removed_before_copy_messages_total";
const EXACT: &str = "nats_delivery_stream_origin_removed_before_copy_exact";

/// The leaf's JetStream API as the hub reaches it.
pub(crate) const API: &str = "$JS.leaf.API";
/// Streams of the global account (no accounts configured).
pub(crate) const ACCOUNT: &str = "$G";
const PINGS: &str = "ping_interval: \"1s\"\nping_max: 2";

/// The copies on the hub: stream, kind, origin on the leaf.
pub(crate) const COPIES: [(&str, &str, &str); 4] = [
    ("M_ALL", "mirror", "ALL"),
    ("S_ALL", "source", "ALL"),
    ("M_FEW", "mirror", "FEW"),
    ("S_FEW", "source", "FEW"),
];

/// The scrapes' pace.
pub(crate) const PACE: Duration = Duration::from_secs(1);

fn payloads_of(range: RangeInclusive<u32>) -> Vec<String> {
    range.map(|i| format!("m{i}")).collect()
}

/// Runs `work` on a client of the leaf, from inside its namespace.
fn on_leaf<T: Send>(
    net: &Network,
    leaf: &NatsServer,
    work: impl AsyncFnOnce(jetstream::Context) -> T + Send,
) -> T {
    let url = leaf.client_url();
    tokio::task::block_in_place(|| {
        net.block_on_inside(0, || async move {
            let client = async_nats::connect(url)
                .await
                .expect("a client on the leaf");
            work(jetstream::new(client)).await
        })
    })
}

/// Publishes `range` (payloads m<i>) to ALL and FEW, each acknowledged by
/// the leaf; returns each origin's (first_seq, last_seq) after.
fn publish(net: &Network, leaf: &NatsServer, range: RangeInclusive<u32>) -> [(u64, u64); 2] {
    on_leaf(net, leaf, async |js| {
        for payload in payloads_of(range) {
            for subject in ["all.x", "few.x"] {
                let ack = js.publish(subject, payload.clone().into()).await.unwrap();
                ack.await.expect("the leaf stores it");
            }
        }
        let mut states = [(0, 0); 2];
        for (state, name) in states.iter_mut().zip(["ALL", "FEW"]) {
            let info = js.get_stream(name).await.unwrap().get_info().await.unwrap();
            *state = (info.state.first_sequence, info.state.last_sequence);
        }
        states
    })
}

/// The hub's own figures of copy `name`: its origin entry and its state.
fn hub_view(hub: &NatsServer, name: &str) -> (Value, Value) {
    let s = server_stream(hub, ACCOUNT, name);
    let origin = match &s["mirror"] {
        Value::Null => s["sources"][0].clone(),
        mirror => mirror.clone(),
    };
    (origin, s["state"].clone())
}

/// One scrape: every copy's contact age (which every scrape must carry)
/// and lag, and when it began and ended (the exporter polled the hub in
/// between: a scrape waits for its own poll).
pub(crate) struct Reading {
    pub(crate) text: String,
    pub(crate) ages: [f64; 4],
    pub(crate) lags: [Option<f64>; 4],
    pub(crate) removed: [Option<f64>; 4],
    window: (Instant, Instant),
}

impl Reading {
    /// Checks that each copy's age grew from `earlier` by the time that
    /// passed between the two polls (no contact in between), which lies
    /// between the end of one scrape and the start of the other and
    /// between the start of one and the end of the other.
    fn grew_as_time_passed(&self, earlier: &Reading) {
        let at_least = (self.window.0 - earlier.window.1).as_secs_f64() - 1e-6;
        let at_most = (self.window.1 - earlier.window.0).as_secs_f64() + 1e-6;
        for (i, (stream, _, _)) in COPIES.iter().enumerate() {
            let grew = self.ages[i] - earlier.ages[i];
            assert!(
                (at_least..=at_most).contains(&grew),
                "{stream}'s age grew by {grew} s between polls {at_least} to {at_most} s apart"
            );
        }
    }
}

async fn read(exporter: &Exporter) -> Reading {
    let start = Instant::now();
    let text = common::scrape(exporter).await;
    let window = (start, Instant::now());
    let mut ages = [0.0; 4];
    let mut lags = [None; 4];
    let mut removed = [None; 4];
    for (i, (stream, kind, origin)) in COPIES.iter().enumerate() {
        let l = labels(ACCOUNT, stream, kind, origin, API);
        ages[i] = value(&text, AGE, &l).unwrap_or_else(|| panic!("{stream}'s age:\n{text}"));
        lags[i] = value(&text, LAG, &l);
        removed[i] = value(&text, REMOVED, &l);
    }
    Reading {
        text,
        ages,
        lags,
        removed,
        window,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_node_cut_off_stops_its_copies_and_what_it_removed_meanwhile_is_counted() {
    let version = nats_test_server::version_numbers(&nats_test_server::version_under_test());
    let (hub, leaf, net) = nats_test_server::hub_and_leaf(
        NatsServer::builder().jetstream_domain("hub").config(PINGS),
        NatsServer::builder().jetstream_domain("leaf").config(PINGS),
    );
    let hub_client = origins_and_copies(&net, &leaf, &hub).await;
    publish(&net, &leaf, 1..=3);
    Wait::secs("every copy to take m1 to m3", 30)
        .until(|| {
            COPIES
                .iter()
                .all(|c| hub_view(&hub, c.0).1["last_seq"] == 3)
        })
        .await;

    let exporter = common::exporter(&[hub.monitor_url()], &[]);
    let mut pace = tokio::time::interval(PACE);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut served = Served::default();
    for _ in 0..3 {
        pace.tick().await;
        let r = read(&exporter).await;
        assert_eq!(r.lags, [Some(0.0); 4], "{}", r.text);
        served.healthy.push(r.ages);
        served.removed.push(r.removed);
    }

    net.cut(0);
    assert_eq!(publish(&net, &leaf, 4..=15), [(1, 15), (11, 15)]);
    while_cut(&hub, &exporter, &mut pace, &mut served).await;

    net.restore(0);
    let back = resumed(&hub, &exporter, &mut pace, &mut served).await;
    check_resumed(&hub, &hub_client, &back, &version).await;
    println!(
        "scrapes: {} before the cut, {} during it (ages at its end {:?}), {} after (ages {:?})",
        served.healthy.len(),
        served.cut.len(),
        served.cut.last().unwrap(),
        served.back.len(),
        back.ages
    );
    alerts_fire_and_resolve(&served);
}

/// ALL and FEW on the leaf, their copies on the hub; a client of the hub.
async fn origins_and_copies(
    net: &Network,
    leaf: &NatsServer,
    hub: &NatsServer,
) -> async_nats::Client {
    on_leaf(net, leaf, async |js| {
        for (name, max_msgs) in [("ALL", -1), ("FEW", 5)] {
            let subject = format!("{}.>", name.to_lowercase());
            js.create_stream(jetstream::stream::Config {
                name: name.into(),
                subjects: vec![subject],
                max_messages: max_msgs,
                ..Default::default()
            })
            .await
            .expect("an origin on the leaf");
        }
    });
    let hub_client = async_nats::connect(hub.client_url()).await.unwrap();
    for (stream, kind, origin) in COPIES {
        let from = json!({"name": origin, "external": {"api": API}});
        let how = match kind {
            "mirror" => json!({"name": stream, "mirror": from}),
            _ => json!({"name": stream, "sources": [from]}),
        };
        create(&hub_client, how).await;
    }
    hub_client
}

/// Scrapes at the pace while the leaf is cut off, until the alert fires
/// for every copy: each scrape serves the hub's lag, 0, and ages grown by
/// the time between the polls.
async fn while_cut(
    hub: &NatsServer,
    exporter: &Exporter,
    pace: &mut tokio::time::Interval,
    served: &mut Served,
) {
    let mut earlier: Option<Reading> = None;
    while !served.fires_during_cut() {
        assert!(served.cut.len() < 40, "40 scrapes in the cut: {served:?}");
        pace.tick().await;
        let r = read(exporter).await;
        for (i, (stream, _, _)) in COPIES.iter().enumerate() {
            let (origin, state) = hub_view(hub, stream);
            assert_eq!(state["last_seq"], 3, "{stream} copies nothing while cut");
            assert_eq!(r.lags[i], origin["lag"].as_f64(), "{stream}: the hub's lag");
        }
        if let Some(earlier) = &earlier {
            r.grew_as_time_passed(earlier);
        }
        // 12 messages wait on the leaf; the hub's lag stays as it was.
        assert_eq!(r.lags, [Some(0.0); 4], "{}", r.text);
        served.cut.push(r.ages);
        served.removed.push(r.removed);
        earlier = Some(r);
    }
}

/// Whether every copy holds what it can: ALL's copies m1 to m15, FEW's its
/// last five besides the first three (M_FEW keeps FEW's sequences, 15).
fn all_copied(hub: &NatsServer) -> Result<(), String> {
    let want = [(15, 15), (15, 15), (8, 15), (8, 8)];
    for ((stream, _, _), (messages, last)) in COPIES.iter().zip(want) {
        let state = hub_view(hub, stream).1;
        if state["messages"] != messages || state["last_seq"] != last {
            return Err(format!("{stream}: {state}"));
        }
    }
    Ok(())
}

/// Scrapes at the pace until every copy held what it can before the
/// scrape began (so the scrape saw the copies' last state, not one copying
/// under way) and every age is below what the alert calls inactive; the
/// last reading.
async fn resumed(
    hub: &NatsServer,
    exporter: &Exporter,
    pace: &mut tokio::time::Interval,
    served: &mut Served,
) -> Reading {
    let below = served.rule.threshold / served.dilation();
    let mut copied = Ok(());
    loop {
        assert!(
            served.back.len() < 40,
            "40 scrapes after the restore: {copied:?} {served:?}"
        );
        pace.tick().await;
        copied = all_copied(hub);
        let r = read(exporter).await;
        served.back.push(r.ages);
        served.removed.push(r.removed);
        if copied.is_ok() && r.ages.iter().all(|a| *a < below) {
            return r;
        }
    }
}

/// The figures once copying resumed, against what each copy holds.
async fn check_resumed(hub: &NatsServer, client: &async_nats::Client, r: &Reading, v: &[u64]) {
    nats_test_server::reference::assert_documented(&r.text);
    let mut removed_truth = Vec::new();
    for (i, (stream, kind, origin)) in COPIES.iter().enumerate() {
        let l = labels(ACCOUNT, stream, kind, origin, API);
        assert_eq!(r.lags[i], Some(0.0), "{stream}:\n{}", r.text);
        assert_eq!(r.lags[i], hub_view(hub, stream).0["lag"].as_f64());
        let held = payloads(client, stream).await;
        let published = payloads_of(1..=15);
        let missing: Vec<String> = published
            .iter()
            .filter(|m| !held.contains(m))
            .cloned()
            .collect();
        let expected = if *origin == "ALL" {
            vec![]
        } else {
            payloads_of(4..=10)
        };
        assert_eq!(missing, expected, "{stream} holds {held:?}");
        let counted = (*kind == "mirror" || v >= &[2, 15][..]).then_some(missing.len() as f64);
        assert_eq!(
            value(&r.text, REMOVED, &l),
            counted,
            "{stream}:\n{}",
            r.text
        );
        assert_eq!(value(&r.text, EXACT, &l), counted.map(|_| 1.0), "{stream}");
        removed_truth.push((stream, missing.len()));
    }
    println!("removed before copy, from what each copy holds: {removed_truth:?}");
}
