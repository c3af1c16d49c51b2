//! The removal forecast of mirrors, against a real server: account A's
//! file storage is full, so its three file mirrors cannot store what their
//! memory origins (one per limit: max_msgs, max_bytes, max_age) take at a
//! steady rate. Each mirror copied 5 messages before the account filled
//! and none after (the server logs "resource limits exceeded for account"
//! at each try): the origin removes the 6th, which the mirror never gets.
//! The moment is taken from the origin's first sequence; every forecast
//! read in the second half of the approach must name it within 20% of the
//! time then left, as for consumers (`removal_forecast.rs`, whose steady
//! publisher, watch and check this test shares).
use crate::common;
use crate::removal_forecast::{
    check_approach, publish_steadily, removal_moment, AGE_TIMER, RESOLUTION,
};
use crate::stream_origins::{create, labels, server_stream};

use std::time::{Duration, Instant};

use async_nats::jetstream;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::json;

const FORECAST: &str = "nats_delivery_stream_origin_removal_forecast_seconds";
const SKIPPED: &str = "nats_delivery_stream_origin_removed_before_copy_messages_total";

/// Account A, its file storage limited ([`FILE_LIMIT`]).
const ACCOUNT: &str = "accounts {\n\
     A: { jetstream: { max_mem: 64M, max_file: 16K }, users: [{user: a, password: a}] }\n\
     }\n";

/// The origins (memory): name and the limit that removes from it.
fn origins() -> [(&'static str, serde_json::Value); 3] {
    [
        ("BY_MSGS", json!({"max_msgs": 200})),
        ("BY_BYTES", json!({"max_bytes": 20_000})),
        ("BY_AGE", json!({"max_age": 10_000_000_000_u64})),
    ]
}

/// The mirror of origin `name`.
fn mirror(name: &str) -> String {
    format!("M_{name}")
}

/// Fills account A's file storage through FILL, a file mirror of a memory
/// stream, until a message of FILL's size no longer fits (a mirror, like a
/// publish, stores a message only while it fits under the limit). From
/// then on no mirror of the account stores anything: the origins'
/// messages are no smaller.
async fn fill_the_account(server: &NatsServer, a: &async_nats::Client) {
    let memory = json!({"name": "FILL_SRC", "subjects": ["fill.>"], "storage": "memory",
        "num_replicas": 1});
    create(a, memory).await;
    create(
        a,
        json!({"name": "FILL", "mirror": {"name": "FILL_SRC"}, "storage": "file"}),
    )
    .await;
    let js = jetstream::new(a.clone());
    // 300 of about 100 bytes each: twice the limit.
    common::publish_acked(&js, (0..300).map(|_| "fill.x".to_string()), PAYLOAD).await;
    // Full: no room for one more of FILL's messages, the smallest of the
    // account's (the origins' subjects are longer).
    Wait::secs("account A's file storage full", 20)
        .until_async(async || {
            let jsz = common::monitor_json(&server.monitor_url(), "jsz?accounts=true");
            let accounts = jsz["account_details"].as_array().unwrap();
            let a = accounts.iter().find(|a| a["name"] == "A").unwrap();
            let used = a["storage"].as_u64().unwrap_or(0);
            let fill = &server_stream(server, "A", "FILL")["state"];
            let (bytes, messages) = (fill["bytes"].as_u64(), fill["messages"].as_u64());
            let record = bytes.zip(messages.filter(|m| *m > 0)).map(|(b, m)| b / m);
            match record.is_some_and(|r| used + r > FILE_LIMIT) {
                true => Ok(()),
                false => Err((used, fill.clone())),
            }
        })
        .await;
}

/// Account A's `max_file` (16K: 16,000 bytes).
const FILE_LIMIT: u64 = 16_000;

const PAYLOAD: &str = "0123456789012345678901234567890123456789012345678901234567890123";

/// The copying streams: name, kind and origin. The source's position is
/// its `seq`, which servers report from 2.15 on.
fn copies() -> Vec<(String, &'static str, &'static str)> {
    let mut out: Vec<_> = (origins().iter())
        .map(|(n, _)| (mirror(n), "mirror", *n))
        .collect();
    out.push(("S_BY_MSGS".to_string(), "source", "BY_MSGS"));
    out
}

/// The origins (memory) and what copies them (file), each copy holding the
/// origin's first 5 messages.
async fn origins_and_copies(server: &NatsServer, a: &async_nats::Client) {
    let js = jetstream::new(a.clone());
    for (name, limit) in origins() {
        let mut config = json!({"name": name, "subjects": [format!("{name}.>")],
            "storage": "memory", "num_replicas": 1});
        let extra = limit.as_object().unwrap().clone();
        config.as_object_mut().unwrap().extend(extra);
        create(a, config).await;
    }
    for (copy, kind, origin) in copies() {
        let how = match kind {
            "mirror" => json!({"mirror": {"name": origin}}),
            _ => json!({"sources": [{"name": origin}]}),
        };
        let mut config = json!({"name": copy, "storage": "file", "num_replicas": 1});
        let extra = how.as_object().unwrap().clone();
        config.as_object_mut().unwrap().extend(extra);
        create(a, config).await;
    }
    for (name, _) in origins() {
        common::publish_acked(&js, (1..=5).map(|_| format!("{name}.x")), PAYLOAD).await;
    }
    Wait::secs("each copy to hold 5 messages", 20)
        .until(|| {
            let copied = |c: &String| server_stream(server, "A", c)["state"]["last_seq"] == 5;
            copies().iter().all(|(c, _, _)| copied(c))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_forecast_names_the_moment_each_origin_removes_what_its_mirror_has_not_copied() {
    let server = NatsServer::builder().jetstream().config(ACCOUNT).start();
    let a = crate::stream_origins::connect(&server, "a").await;
    let js = jetstream::new(a.clone());
    origins_and_copies(&server, &a).await;
    fill_the_account(&server, &a).await;

    // A 16 s status window: rates over 2 s spans, as for consumers.
    let flags = ["--sources", "varz,jsz", "--consumer-status-window", "16s"];
    let exporter = common::exporter(&[server.monitor_url()], &flags);
    let version = nats_test_server::version_numbers(&nats_test_server::version_under_test());
    if version < vec![2, 10] {
        return a_full_account_makes_a_mirror_skip(&server, &js, &exporter).await;
    }
    let names: Vec<&str> = origins().iter().map(|(n, _)| *n).collect();
    // The exporter sees the origins idle before their traffic starts, as
    // one already running does: without that poll, the time of the 6th
    // message is spread between the 1st (seconds earlier) and the first
    // poll (on a loaded machine 3.5 s early, until the first five aged
    // out).
    common::scrape(&exporter).await;
    let start = Instant::now();
    let publishers: Vec<_> = (names.iter())
        .map(|s| tokio::spawn(publish_steadily(js.clone(), s.to_string())))
        .collect();
    let removals: Vec<_> = (names.iter())
        .map(|s| tokio::spawn(removal_moment(js.clone(), s.to_string())))
        .collect();
    let copies = copies();
    let mut readings: Vec<Vec<(Instant, Option<f64>)>> = vec![Vec::new(); copies.len()];
    let text = Wait::before(
        "each origin's removal of the 6th",
        start + Duration::from_secs(40),
    )
    .every(Duration::from_millis(250))
    .until_async(async || {
        let before = Instant::now();
        let done = removals.iter().all(|r| r.is_finished());
        let text = common::scrape(&exporter).await;
        let at = before + before.elapsed() / 2;
        for (i, (copy, kind, origin)) in copies.iter().enumerate() {
            let forecast = value(&text, FORECAST, &labels("A", copy, kind, origin, ""));
            readings[i].push((at, forecast));
        }
        match done {
            true => Ok(text),
            false => Err(format!("readings: {readings:?}")),
        }
    })
    .await;
    publishers.iter().for_each(|p| p.abort());
    nats_test_server::reference::assert_documented(&text);
    let mut removed_at = Vec::new();
    for r in removals {
        removed_at.push(r.await.unwrap());
    }
    let seq_reported = version >= vec![2, 15];
    for (i, (copy, kind, origin)) in copies.iter().enumerate() {
        // The premise: the copy stored nothing past the 5th. (Once the
        // origin removed the 6th, a mirror's retries skip to what the
        // origin still holds, recording the rest as deleted: its
        // `last_seq` moves, its messages do not.)
        let stored = &server_stream(&server, "A", copy)["state"]["messages"];
        assert_eq!(stored, 5, "{copy} stored more once the account was full");
        if *kind == "source" && !seq_reported {
            // No `seq` before 2.15: no position, no forecast.
            assert!(readings[i].iter().all(|(_, f)| f.is_none()), "{readings:?}");
            continue;
        }
        let o = names.iter().position(|n| n == origin).unwrap();
        let allowance = RESOLUTION + if *origin == "BY_AGE" { AGE_TIMER } else { 0.0 };
        check_approach(copy, (start, removed_at[o]), &readings[i], allowance);
    }
    // FILL keeps up with FILL_SRC, which is not published to: the copies
    // alone have a forecast.
    let copy = |l: &&str| {
        copies
            .iter()
            .any(|(c, _, _)| l.contains(&format!("stream=\"{c}\"")))
    };
    let series: Vec<&str> = (text.lines())
        .filter(|l| l.starts_with(&format!("{FORECAST}{{")))
        .collect();
    assert!(!series.is_empty() && series.iter().all(copy), "{text}");
}

/// nats-server 2.9.10 does not hold a mirror back in a full account: it
/// passes over what it cannot store, recording it as deleted, while the
/// origin still holds it. The mirror never falls behind, so nothing is
/// forecast; the messages are lost all the same, and counted.
async fn a_full_account_makes_a_mirror_skip(
    server: &NatsServer,
    js: &jetstream::Context,
    exporter: &nats_delivery_exporter::Exporter,
) {
    // Seen at 5 first: the count of what they skip starts there.
    common::scrape(exporter).await;
    for (name, _) in origins() {
        common::publish_acked(js, (6..=25).map(|_| format!("{name}.x")), PAYLOAD).await;
    }
    Wait::secs("each mirror's last sequence at 25", 20)
        .until(|| {
            let at = |n: &str| server_stream(server, "A", &mirror(n))["state"]["last_seq"] == 25;
            origins().iter().all(|(n, _)| at(n))
        })
        .await;
    let text = common::scrape(exporter).await;
    for (name, _) in origins() {
        let state = &server_stream(server, "A", &mirror(name))["state"];
        assert_eq!(
            (&state["messages"], &state["num_deleted"]),
            (&json!(5), &json!(20))
        );
        // The origins limited by count and size cannot have removed any of
        // 25 messages: what their mirrors lack was skipped, not removed.
        // (BY_AGE's 10 s may pass before this on a loaded machine.)
        if name != "BY_AGE" {
            let origin = &server_stream(server, "A", name)["state"];
            assert_eq!(origin["first_seq"], 1, "{name}: the origin removed nothing");
        }
        // Counted as removed before copy: the mirror's own figures cannot
        // tell a skip from a removal.
        let m = mirror(name);
        let m = labels("A", &m, "mirror", name, "");
        assert_eq!(value(&text, SKIPPED, &m), Some(20.0), "{text}");
    }
    assert!(!text.contains(FORECAST), "{text}");
}
