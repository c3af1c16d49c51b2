//! Reading what the dead-letter tests put in and find in streams.
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use async_nats::HeaderMap;
use futures::StreamExt;

use super::{publish, pull_consumer, stream};

/// Publishes `n` messages with an application header and their own `Nats-Msg-Id`.
pub async fn publish_with_headers(js: &jetstream::Context, first: usize, n: usize) {
    for i in first..first + n {
        let mut h = HeaderMap::new();
        h.insert("Order-Id", format!("order-{i}").as_str());
        h.insert("Nats-Msg-Id", format!("orig-{i}").as_str());
        js.publish_with_headers(format!("work.{i}"), h, format!("payload-{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

pub async fn stream_messages(js: &jetstream::Context, name: &str) -> u64 {
    match js.get_stream(name).await {
        Ok(mut s) => s.info().await.unwrap().state.messages,
        Err(_) => 0,
    }
}

/// Every message in `name`, in order.
pub async fn all_messages(
    js: &jetstream::Context,
    name: &str,
) -> Vec<jetstream::message::StreamMessage> {
    let s = js.get_stream(name).await.unwrap();
    let last = s.cached_info().state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        if let Ok(m) = s.get_raw_message(seq).await {
            out.push(m);
        }
    }
    out
}

/// Publishes 2 messages to a stream TERM and terminates both.
pub async fn terminate_two(js: &jetstream::Context) {
    let st = stream(js, "TERM", "term", -1).await;
    let c = pull_consumer(&st, "t", -1, Duration::from_secs(30)).await;
    publish(js, "term", 2).await;
    let mut batch = c
        .fetch()
        .max_messages(2)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    while let Some(m) = batch.next().await {
        m.unwrap().double_ack_with(AckKind::Term).await.unwrap();
    }
}

/// Publishes `advisories` again, as a server does after a leader change.
pub async fn republish(app: &async_nats::Client, advisories: &[jetstream::message::StreamMessage]) {
    for m in advisories {
        app.publish(m.subject.clone(), m.payload.clone())
            .await
            .unwrap();
    }
    app.flush().await.unwrap();
}

pub fn header<'a>(m: &'a jetstream::message::StreamMessage, name: &str) -> Option<&'a str> {
    m.headers.get(name).map(|v| v.as_str())
}

/// Checks that `c` is the intact copy of the WORK message it names, with
/// every header the copy adds; returns that message's sequence.
pub fn assert_intact_copy(c: &jetstream::message::StreamMessage) -> u64 {
    assert_eq!(c.subject.as_str(), "dead_letter.WORK.worker");
    let seq: u64 = header(c, "Dead-Letter-Stream-Sequence")
        .unwrap()
        .parse()
        .unwrap();
    let i = seq - 1; // WORK's sequence i+1 holds message i
    assert_eq!(c.payload, format!("payload-{i}").as_bytes());
    assert_eq!(header(c, "Order-Id"), Some(format!("order-{i}").as_str()));
    assert_eq!(
        header(c, "Dead-Letter-Original-Msg-Id"),
        Some(format!("orig-{i}").as_str())
    );
    assert_eq!(header(c, "Dead-Letter-Stream"), Some("WORK"));
    assert_eq!(
        header(c, "Dead-Letter-Subject"),
        Some(format!("work.{i}").as_str())
    );
    assert_eq!(header(c, "Dead-Letter-Consumer"), Some("worker"));
    assert_eq!(header(c, "Dead-Letter-Deliveries"), Some("3"));
    assert_eq!(header(c, "Dead-Letter-Reason"), Some("max_deliveries"));
    assert_eq!(header(c, "Dead-Letter-Account"), Some("APP"));
    assert!(header(c, "Dead-Letter-Time").is_some_and(|t| t.contains('T')));
    // Durable mode adds the stream's creation time to the id, so a
    // stream created again (sequences from 1) is not refused as a repeat.
    let created = header(c, "Dead-Letter-Stream-Created").expect("creation time");
    assert!(created.parse::<i64>().unwrap() > 0);
    assert_eq!(
        header(c, "Nats-Msg-Id"),
        Some(format!("APP.WORK.worker.{seq}.{created}").as_str())
    );
    seq
}
