//! Shared by the removed-before-delivery tests: a stream that remembers what
//! was published to it, pull consumers that remember what they received,
//! and the truth worked out from the two, to compare with the counter.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, AckKind};
use futures::StreamExt;
use nats_delivery_exporter::Exporter;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

use crate::common;

/// The counter.
pub(crate) const COUNTER: &str = "nats_delivery_consumer_removed_before_delivery_messages_total";
/// Whether every increase of the counter was exact (opt-in).
pub(crate) const EXACT: &str = "nats_delivery_consumer_removed_before_delivery_exact";

/// An exporter with consumer health and the opt-in `_exact` gauge.
pub(crate) fn exporter(server: &NatsServer) -> Exporter {
    crate::consumer_health::exporter(server, &["--consumer-opt-in-metrics", EXACT])
}

/// A stream and every message published to it: (stream sequence, subject).
pub(crate) struct Lab {
    pub js: jetstream::Context,
    pub stream: stream::Stream,
    pub published: Vec<(u64, String)>,
}

impl Lab {
    /// Connects to `server` and creates the stream `config` describes.
    pub async fn new(server: &NatsServer, config: stream::Config) -> Lab {
        let client = async_nats::connect(server.client_url()).await.unwrap();
        let js = jetstream::new(client);
        let stream = js.create_stream(config).await.unwrap();
        Lab {
            js,
            stream,
            published: Vec::new(),
        }
    }

    /// Publishes `n` messages to `subject`, each one stored (its PubAck
    /// received) before the next.
    pub async fn publish(&mut self, subject: &str, n: usize) {
        for _ in 0..n {
            let ack = self.js.publish(subject.to_string(), "x".into());
            let ack = ack.await.unwrap().await.unwrap();
            self.published.push((ack.sequence, subject.to_string()));
        }
    }

    /// The last sequence published.
    pub fn last(&self) -> u64 {
        self.published.last().map_or(0, |p| p.0)
    }

    /// What the stream holds now.
    pub async fn stored(&self) -> Stored {
        let info = self.stream.info_builder().with_deleted(true).fetch();
        let state = info.await.unwrap().info.state;
        Stored {
            first: state.first_sequence,
            last: state.last_sequence,
            messages: state.messages,
            deleted: state.deleted.unwrap_or_default().into_iter().collect(),
        }
    }

    /// Waits (at most 20 s) until the stream no longer holds sequence `seq`
    /// (removed by `max_age`, which the server applies on a timer).
    pub async fn wait_removed(&self, seq: u64) {
        Wait::secs(format!("sequence {seq} removed"), 20)
            .until_async(async || {
                let stored = self.stored().await;
                (!stored.holds(seq)).then_some(()).ok_or(stored)
            })
            .await;
    }

    /// One scrape of `exporter` during which the stream did not change:
    /// see [`Lab::scrape_with`].
    pub async fn scrape(&self, exporter: &Exporter) -> (String, Stored) {
        self.scrape_with(|| common::scrape(exporter)).await
    }

    /// Two scrapes during which the stream did not change (the same
    /// before, between and after them, and sequences only go up), so that
    /// the truth worked out from [`Stored`] is what the exporter saw; the
    /// second one's text. Interior deletes are counted by the second poll
    /// at the same position (METRICS.md). With `max_age` the server may
    /// remove messages during a scrape: it is scraped again.
    pub async fn scrape_with<F, Fut>(&self, mut scrape: F) -> (String, Stored)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = String>,
    {
        Wait::secs("the stream to hold still during two scrapes", 20)
            .every(Duration::ZERO)
            .until_async(async || {
                let before = self.stored().await;
                scrape().await;
                let between = self.stored().await;
                let text = scrape().await;
                let after = self.stored().await;
                match before == between && between == after {
                    true => Ok((text, after)),
                    false => Err((before, between, after)),
                }
            })
            .await
    }
}

/// The stream's sequences at one moment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    pub first: u64,
    pub last: u64,
    pub messages: u64,
    pub deleted: BTreeSet<u64>,
}

impl Stored {
    /// The stream holds `seq`.
    pub fn holds(&self, seq: u64) -> bool {
        (self.first..=self.last).contains(&seq) && !self.deleted.contains(&seq)
    }
}

/// How a [`Reader`] acknowledges what it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acks {
    /// Ack policy explicit, each message acknowledged (and the server's
    /// answer awaited) at once.
    Explicit,
    /// Ack policy explicit, messages kept unacknowledged in
    /// [`Reader::held`].
    Hold,
    /// Ack policy none.
    None,
}

/// A durable pull consumer and every stream sequence it received.
pub(crate) struct Reader {
    pub name: &'static str,
    filter: Option<&'static str>,
    consumer: consumer::Consumer<consumer::pull::Config>,
    pub acks: Acks,
    /// Stream sequences received at least once.
    pub received: BTreeSet<u64>,
    /// Messages received again (a delivery count above 1).
    pub redelivered: u64,
    /// Messages received and not acknowledged yet (ack mode [`Acks::Hold`]).
    pub held: Vec<jetstream::Message>,
}

impl Reader {
    /// Creates durable `name` on `lab`'s stream from its first message,
    /// with `filter` if given; ack wait `ack_wait` where acks are explicit.
    pub async fn new(
        lab: &Lab,
        name: &'static str,
        filter: Option<&'static str>,
        acks: Acks,
        ack_wait: Duration,
    ) -> Reader {
        let config = consumer::pull::Config {
            durable_name: Some(name.into()),
            filter_subject: filter.unwrap_or_default().into(),
            ack_policy: match acks {
                Acks::None => consumer::AckPolicy::None,
                _ => consumer::AckPolicy::Explicit,
            },
            ack_wait,
            ..Default::default()
        };
        Reader {
            name,
            filter,
            consumer: lab.stream.create_consumer(config).await.unwrap(),
            acks,
            received: BTreeSet::new(),
            redelivered: 0,
            held: Vec::new(),
        }
    }

    /// Receives `n` messages (a message just stored reaches a consumer a
    /// moment later on a busy machine: fetched until `n` came, for at most
    /// 10 s) and returns their stream sequences.
    pub async fn read(&mut self, n: usize) -> Vec<u64> {
        let mut got = Vec::new();
        Wait::secs(format!("{}: {n} messages", self.name), 10)
            .until_async(async || {
                if got.len() >= n {
                    return Ok(());
                }
                let fetch = self.consumer.fetch().max_messages(n - got.len());
                let mut batch = fetch.messages().await.unwrap();
                while let Some(m) = batch.next().await {
                    got.push(self.take(m.unwrap()).await);
                }
                match got.len() >= n {
                    true => Ok(()),
                    false => Err(got.clone()),
                }
            })
            .await;
        got
    }

    /// Records one received message and acknowledges or holds it.
    async fn take(&mut self, m: jetstream::Message) -> u64 {
        let info = m.info().unwrap();
        let seq = info.stream_sequence;
        if info.delivered > 1 {
            self.redelivered += 1;
        }
        self.received.insert(seq);
        match self.acks {
            Acks::Explicit => m.double_ack().await.unwrap(),
            Acks::Hold => self.held.push(m),
            Acks::None => {}
        }
        seq
    }

    /// Answers each held message with what `answer` gives for its stream
    /// sequence (the server's reply awaited); keeps those it gives `None`.
    pub async fn settle(&mut self, answer: impl Fn(u64) -> Option<AckKind>) {
        let mut kept = Vec::new();
        for m in std::mem::take(&mut self.held) {
            match answer(m.info().unwrap().stream_sequence) {
                Some(kind) => m.double_ack_with(kind).await.unwrap(),
                None => kept.push(m),
            }
        }
        self.held = kept;
    }

    /// The server's deliveries (`delivered.consumer_seq`) and
    /// `num_pending` for this consumer now.
    pub async fn position(&mut self) -> (u64, u64) {
        let info = self.consumer.info().await.unwrap();
        (info.delivered.consumer_sequence, info.num_pending)
    }

    /// Whether a message on `subject` is this consumer's.
    fn matches(&self, subject: &str) -> bool {
        self.filter.is_none_or(|f| f == subject)
    }

    /// The truth, from what was published and what this consumer received.
    pub fn truth(&self, lab: &Lab, stored: &Stored) -> Truth {
        let matching: Vec<u64> = lab
            .published
            .iter()
            .filter(|(_, subject)| self.matches(subject))
            .map(|(seq, _)| *seq)
            .collect();
        let received = matching.iter().filter(|s| self.received.contains(s));
        let pending = matching
            .iter()
            .filter(|s| stored.holds(**s) && !self.received.contains(s));
        let (received, pending) = (received.count() as u64, pending.count() as u64);
        Truth {
            matching: matching.len() as u64,
            received,
            pending,
        }
    }
}

/// One consumer's messages: published matching it, received at least
/// once, still stored and not received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truth {
    pub matching: u64,
    pub received: u64,
    pub pending: u64,
}

impl Truth {
    /// Matched it and are gone without it receiving them.
    pub fn removed(&self) -> u64 {
        self.matching - self.received - self.pending
    }
}

/// The counter and the `_exact` gauge of consumer `consumer` of `stream`.
pub(crate) fn counter(text: &str, stream: &str, consumer: &str) -> (u64, f64) {
    let labels = [
        ("account", "$G"),
        ("stream", stream),
        ("consumer", consumer),
    ];
    let count = value(text, COUNTER, &labels).unwrap_or_else(|| panic!("no {COUNTER}: {text}"));
    let exact = value(text, EXACT, &labels).unwrap_or_else(|| panic!("no {EXACT}"));
    (count as u64, exact)
}

/// One reader as a step expects it: its truth counts from `since` (the
/// removed messages at the exporter's first poll, not counted by it), and
/// its `_exact` gauge is `exact` (not checked where `None`).
pub(crate) struct Expect<'r> {
    pub reader: &'r Reader,
    pub since: u64,
    pub exact: Option<bool>,
}

/// `reader` counted from the exporter's first poll, its gauge `exact`.
pub(crate) fn expect(reader: &Reader, exact: bool) -> Expect<'_> {
    Expect {
        reader,
        since: 0,
        exact: Some(exact),
    }
}

/// `reader` counted from the exporter's first poll, its gauge not checked.
pub(crate) fn counted(reader: &Reader) -> Expect<'_> {
    Expect {
        reader,
        since: 0,
        exact: None,
    }
}

/// Asserts that each reader's counter is at most its truth (a lower
/// bound) and its `_exact` gauge 0; returns (counter, truth) of each.
pub(crate) fn assert_lower_bound(
    (text, stored): &(String, Stored),
    lab: &Lab,
    readers: &[&Reader],
    step: &str,
) -> Vec<(u64, u64)> {
    let stream = lab.stream.cached_info().config.name.as_str();
    let mut out = Vec::new();
    for reader in readers {
        let truth = reader.truth(lab, stored);
        let (count, gauge) = counter(text, stream, reader.name);
        println!(
            "{step}: {} counter {count}, _exact {gauge}; truth {} = {truth:?}; {stored:?}",
            reader.name,
            truth.removed()
        );
        assert!(count <= truth.removed(), "{step}: {}", reader.name);
        assert_eq!(gauge, 0.0, "{step}: {}", reader.name);
        out.push((count, truth.removed()));
    }
    out
}

/// Asserts that each reader's counter equals its truth and its `_exact`
/// gauge is what the step expects; returns the counters, in order.
pub(crate) fn assert_exact(
    (text, stored): &(String, Stored),
    lab: &Lab,
    readers: &[Expect],
    step: &str,
) -> Vec<u64> {
    let stream = lab.stream.cached_info().config.name.as_str();
    let mut counts = Vec::new();
    for e in readers {
        let truth = e.reader.truth(lab, stored);
        let (count, gauge) = counter(text, stream, e.reader.name);
        println!(
            "{step}: {} counter {count}, _exact {gauge}; truth {} = {truth:?} - {} before the first poll; {stored:?}",
            e.reader.name,
            truth.removed() - e.since,
            e.since,
        );
        assert_eq!(
            count,
            truth.removed() - e.since,
            "{step}: {}",
            e.reader.name
        );
        if let Some(exact) = e.exact {
            assert_eq!(
                gauge,
                f64::from(u8::from(exact)),
                "{step}: {}",
                e.reader.name
            );
        }
        counts.push(count);
    }
    counts
}
