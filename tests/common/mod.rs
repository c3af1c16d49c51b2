//! Shared by the exporter's integration tests.
#![allow(dead_code)]

use clap::Parser;
use nats_delivery_exporter::{Config, Exporter, ExporterBuilder, Format};
use nats_test_server::wait::Wait;

/// An exporter polling `urls`, with extra command-line flags.
pub fn exporter(urls: &[String], extra: &[&str]) -> Exporter {
    exporter_builder(urls, extra).build()
}

/// [`exporter`] still being set up, for a test that adds readers.
pub fn exporter_builder(urls: &[String], extra: &[&str]) -> ExporterBuilder {
    let mut args = vec![
        "nats-delivery-exporter".to_string(),
        "--monitor-url".into(),
        urls.join(","),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let config = Config::try_parse_from(args).expect("valid flags");
    ExporterBuilder::new(config.scrape_settings()).expect("exporter")
}

/// One scrape in the classic text format, whole.
pub async fn scrape(e: &Exporter) -> String {
    e.scrape(Format::Classic).await.expect("a whole scrape")
}

/// Publishes `payload` to each of `subjects` through JetStream and waits
/// for every PubAck; a publish that no stream answered is sent again, for
/// up to 10 s.
pub async fn publish_acked(
    js: &async_nats::jetstream::Context,
    subjects: impl IntoIterator<Item = String>,
    payload: &'static str,
) {
    use async_nats::jetstream::context::PublishErrorKind;
    for subject in subjects {
        // No stream answered: in a cluster just formed, a new stream's
        // subjects can reach this server after the stream is created.
        // Nothing was stored, so it is sent again. (Called in spawned
        // tasks too: `until_spawned`.)
        Wait::secs(format!("a stream to answer for {subject}"), 10)
            .until_spawned(|| {
                let subject = subject.clone();
                async move {
                    let ack = js
                        .publish(subject.clone(), payload.into())
                        .await
                        .expect("publish")
                        .await;
                    match ack {
                        Ok(_) => Ok(()),
                        Err(e) if e.kind() == PublishErrorKind::StreamNotFound => Err(e),
                        Err(e) => panic!("puback for {subject}: {e:?}"),
                    }
                }
            })
            .await;
    }
}

/// A monitoring endpoint's JSON, read directly.
pub fn monitor_json(base: &str, path: &str) -> serde_json::Value {
    let body = nats_test_server::http_get(&format!("{base}/{path}"));
    serde_json::from_str(&body).expect("monitoring JSON")
}

pub mod fake_endpoint;
pub mod scenarios;
pub mod system_polling;

/// A child process killed (and waited for) when dropped, so that a failed
/// assertion leaves no process behind.
pub struct KilledOnDrop(pub std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long a test's JetStream request waits for its answer: a server
/// answering full `/jsz` fetches on a loaded machine answers its API late
/// (the 5 s default ran out creating a stream), but it answers.
pub const JETSTREAM_API_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Streams `S{i}` (subject `s.{i}`) for each `i` in `streams`, eight made
/// at a time, each with `consumers` durable pull consumers `c0`, `c1`, ...
/// configured by `consumer` (given the name), and one acknowledged message
/// when `message`. Each request waits [`JETSTREAM_API_WAIT`].
pub async fn make_streams(
    js: &async_nats::jetstream::Context,
    streams: std::ops::Range<usize>,
    consumers: usize,
    consumer: impl Fn(String) -> async_nats::jetstream::consumer::pull::Config + Sync,
    message: bool,
) {
    use futures::StreamExt;
    let consumer = &consumer;
    let mut js = js.clone();
    js.set_timeout(JETSTREAM_API_WAIT);
    let js = &js;
    futures::stream::iter(streams)
        .for_each_concurrent(8, |i| {
            let js = js.clone();
            async move {
                let st = js
                    .create_stream(async_nats::jetstream::stream::Config {
                        name: format!("S{i}"),
                        subjects: vec![format!("s.{i}")],
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                for c in 0..consumers {
                    st.create_consumer(consumer(format!("c{c}"))).await.unwrap();
                }
                if message {
                    publish_acked(&js, [format!("s.{i}")], "m").await;
                }
            }
        })
        .await;
}
