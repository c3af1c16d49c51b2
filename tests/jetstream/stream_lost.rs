//! A stream's lost data, against a real server whose store lost a block
//! file while it was down: the exporter reports what the server itself
//! answers (`$JS.API.STREAM.INFO` with deleted details), stream by stream
//! in turn as `--stream-lost-reads` allows, and counts each lost sequence
//! once across server restarts and a second loss.
use crate::common;

use std::path::{Path, PathBuf};

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use nats_delivery_exporter::{parse_stream_info, LostRecord, MessageTimestamps, StreamLostReader};
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

/// The message block files of `stream` under the server's store.
fn blocks(dir: &Path, stream: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.join("js")];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "blk")
                && path.components().any(|c| c.as_os_str() == stream)
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// What the server answers itself.
async fn server_says(client: &async_nats::Client, stream: &str) -> LostRecord {
    let reply = client
        .request(
            format!("$JS.API.STREAM.INFO.{stream}"),
            Bytes::from_static(br#"{"deleted_details":true}"#),
        )
        .await
        .unwrap();
    parse_stream_info(&reply.payload).unwrap()
}

fn lost(text: &str, stream: &str) -> (Option<f64>, Option<f64>) {
    let labels = [("account", "$G"), ("stream", stream)];
    (
        value(text, "nats_delivery_stream_lost_messages", &labels),
        value(text, "nats_delivery_stream_lost_bytes", &labels),
    )
}

/// The counters: lost messages and bytes found so far.
fn found(text: &str, stream: &str) -> (Option<f64>, Option<f64>) {
    let labels = [("account", "$G"), ("stream", stream)];
    (
        value(
            text,
            "nats_delivery_stream_lost_messages_found_total",
            &labels,
        ),
        value(text, "nats_delivery_stream_lost_bytes_found_total", &labels),
    )
}

fn now(r: &LostRecord) -> (Option<f64>, Option<f64>) {
    (Some(r.sequences.len() as f64), Some(r.bytes as f64))
}

/// Streams DATA (5,000 messages of 1 KB in several blocks), CALM (10) and
/// THIRD (none).
async fn three_streams(js: &jetstream::Context) {
    for name in ["DATA", "CALM", "THIRD"] {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            // A small limit makes small blocks: several for DATA.
            max_bytes: 10 << 20,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let payload: &'static str = "x".repeat(1000).leak();
    common::publish_acked(js, (0..5000).map(|i| format!("data.{i}")), payload).await;
    common::publish_acked(js, (0..10).map(|i| format!("calm.{i}")), payload).await;
}

/// Two streams read per scrape, in turn: CALM and DATA, then THIRD; what
/// the server reports lost in DATA is found once.
async fn two_streams_a_scrape_each_lost_block_counted_once(
    exporter: &nats_delivery_exporter::Exporter,
    truth: &LostRecord,
) {
    let first = common::scrape(exporter).await;
    let want = now(truth);
    assert_eq!(lost(&first, "DATA"), want, "{first}");
    assert_eq!(found(&first, "DATA"), want, "all found in the first read");
    assert_eq!(lost(&first, "CALM"), (Some(0.0), Some(0.0)));
    assert_eq!(lost(&first, "THIRD"), (None, None), "not read yet");
    let second = common::scrape(exporter).await;
    assert_eq!(lost(&second, "THIRD"), (Some(0.0), Some(0.0)));
    assert_eq!(lost(&second, "DATA"), want, "kept until read again");
    let ok = [("result", "ok")];
    assert_eq!(
        value(&second, "nats_delivery_stream_lost_reads_total", &ok),
        Some(4.0)
    );
    assert_eq!(found(&second, "DATA"), want, "counted once");
    nats_test_server::reference::assert_documented(&second);
}

/// Adds the sequences of `record` not in `seen` to it; returns the bytes
/// they add: all of the record's when it holds only new sequences, none when
/// it holds no new one (a record of both is not expected here).
fn add_new_sequences(seen: &mut std::collections::BTreeSet<u64>, record: &LostRecord) -> u64 {
    let new: Vec<u64> = record
        .sequences
        .iter()
        .copied()
        .filter(|s| !seen.contains(s))
        .collect();
    if new.is_empty() {
        return 0;
    }
    assert_eq!(
        new.len(),
        record.sequences.len(),
        "a record of new and old sequences"
    );
    seen.extend(new);
    record.bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_blocks_are_reported_as_the_server_reports_them() {
    let mut server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    three_streams(&js).await;
    let data_blocks = blocks(server.dir(), "DATA");
    assert!(data_blocks.len() >= 2, "DATA blocks: {data_blocks:?}");

    // The first block of DATA is gone while the server is down.
    server.stop_and_restart_after(|_| std::fs::remove_file(&data_blocks[0]).unwrap());
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let truth = server_says(&client, "DATA").await;
    let version = nats_test_server::version_numbers(&nats_test_server::version_under_test());
    // 2.9.10 and 2.10.26 report nothing lost after this damage (their
    // stream starts after the missing block); the exporter must still
    // equal what they say.
    if version >= vec![2, 11] {
        assert!(
            !truth.sequences.is_empty(),
            "the server reports no loss: {truth:?}"
        );
    } else {
        eprintln!("nats-server before 2.11 reports {truth:?} for the lost block");
    }

    // Two streams per scrape, in turn: CALM and DATA, then THIRD.
    // With /varz, which names the server that leads the streams.
    let mut exporter =
        common::exporter_builder(&[server.monitor_url()], &["--sources", "varz,jsz"]);
    exporter.read_timestamps(MessageTimestamps::new(client.clone(), "$G", 100));
    exporter.read_stream_lost(StreamLostReader::new(client.clone(), 2));
    let exporter = exporter.build();
    two_streams_a_scrape_each_lost_block_counted_once(&exporter, &truth).await;

    // Restarted without new damage, then with a second block of DATA gone:
    // the server's record starts again from what it finds at each start,
    // the counters only add sequences never reported before.
    let mut seen: std::collections::BTreeSet<u64> = truth.sequences.iter().copied().collect();
    let mut want_bytes = truth.bytes;
    for damage in [false, true] {
        server.stop_and_restart_after(|dir| {
            if damage {
                std::fs::remove_file(&blocks(dir, "DATA")[0]).unwrap();
            }
        });
        let record = server_says(&client, "DATA").await;
        eprintln!(
            "after a restart (block removed: {damage}): {} lost, {} bytes, first sequence {}",
            record.sequences.len(),
            record.bytes,
            record.first_seq
        );
        want_bytes += add_new_sequences(&mut seen, &record);
        // Two scrapes read all three streams at two a scrape.
        common::scrape(&exporter).await;
        let text = common::scrape(&exporter).await;
        assert_eq!(lost(&text, "DATA"), now(&record), "{text}");
        assert_eq!(
            found(&text, "DATA"),
            (Some(seen.len() as f64), Some(want_bytes as f64))
        );
    }
    if version >= vec![2, 11] {
        assert!(
            seen.len() > truth.sequences.len(),
            "the second block lost nothing"
        );
    }

    // A stream that is gone is forgotten.
    js.delete_stream("DATA").await.unwrap();
    let third = common::scrape(&exporter).await;
    assert_eq!(lost(&third, "DATA"), (None, None), "{third}");
}
