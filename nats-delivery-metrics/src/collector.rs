//! Turns a snapshot of the shared counters into Prometheus exposition.
//! `encode` only reads memory: no I/O happens during a scrape.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::state::{Shared, SubscriptionSnapshot};
use crate::PublishFailure;

/// Collector registered by `ClientMetrics::new`.
#[derive(Debug)]
pub(crate) struct ClientCollector(pub Arc<Shared>);

/// Encodes one metric family from its rows; a family without rows is left out.
pub(crate) fn family<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: Vec<(L, M)>,
) -> fmt::Result {
    let Some((_, first)) = rows.first() else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(name, help, None, first.metric_type())?;
    for (labels, value) in &rows {
        value.encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

type SubLabels<'a> = [(&'static str, &'a str); 2];

fn per_subscription<'a, M>(
    client: &'a str,
    subs: &'a [SubscriptionSnapshot],
    value: impl Fn(&SubscriptionSnapshot) -> Option<M>,
) -> Vec<(SubLabels<'a>, M)> {
    subs.iter()
        .filter_map(|s| value(s).map(|v| ([("client", client), ("subscription", &*s.name)], v)))
        .collect()
}

impl Collector for ClientCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let shared = &self.0;
        let client = shared.client.as_str();
        let subs = shared.snapshot();
        let counter = |f: fn(&SubscriptionSnapshot) -> u64| {
            per_subscription(client, &subs, move |s| {
                s.instrumented.then(|| ConstCounter::new(f(s)))
            })
        };
        family(&mut encoder, "nats_delivery_client_dropped_messages",
            "Messages an instrumented subscription dropped because a pending limit was reached (exact).",
            counter(|s| s.dropped))?;
        family(
            &mut encoder,
            "nats_delivery_client_dropped_bytes",
            "Payload bytes of the messages an instrumented subscription dropped.",
            counter(|s| s.dropped_bytes),
        )?;
        family(
            &mut encoder,
            "nats_delivery_client_delivered_messages",
            "Messages an instrumented subscription handed to the application.",
            counter(|s| s.delivered),
        )?;
        let gauge = |f: fn(&crate::state::LiveSnapshot) -> u64| {
            per_subscription(client, &subs, move |s| {
                s.live.map(|l| ConstGauge::new(f(&l)))
            })
        };
        family(&mut encoder, "nats_delivery_client_pending_messages",
            "Messages received by an instrumented subscription and not yet handed to the application.",
            gauge(|l| l.pending_messages))?;
        family(
            &mut encoder,
            "nats_delivery_client_pending_bytes",
            "Payload bytes of the pending messages of an instrumented subscription.",
            gauge(|l| l.pending_bytes),
        )?;
        family(
            &mut encoder,
            "nats_delivery_client_pending_messages_high_water",
            "Highest number of pending messages an instrumented subscription has held.",
            gauge(|l| l.high_water),
        )?;
        // An unlimited side (u64::MAX, also when summed) has no limit gauge.
        let limit = |f: fn(&crate::state::LiveSnapshot) -> u64| {
            per_subscription(client, &subs, move |s| {
                s.live
                    .map(|l| f(&l))
                    .filter(|v| *v != crate::PendingLimits::UNLIMITED)
                    .map(ConstGauge::new)
            })
        };
        family(&mut encoder, "nats_delivery_client_pending_messages_limit",
            "Pending message limit of an instrumented subscription; further messages are dropped and counted. Absent when unlimited.",
            limit(|l| l.limit_messages))?;
        family(&mut encoder, "nats_delivery_client_pending_bytes_limit",
            "Pending payload byte limit of an instrumented subscription; further messages are dropped and counted. Absent when unlimited.",
            limit(|l| l.limit_bytes))?;
        family(&mut encoder, "nats_delivery_client_slow_consumer_events",
            "Slow-consumer events async-nats reported per subscription; a lower bound, async-nats loses events when its event queue of 128 is full.",
            per_subscription(client, &subs, |s| Some(ConstCounter::new(s.slow_consumer_events))))?;
        if let Some(n) = shared.unforwarded() {
            family(&mut encoder, "nats_delivery_client_unforwarded_messages",
                "Messages the connection read that no instrumented subscription has taken yet: waiting in async-nats' buffers, dropped by async-nats, or for subscribers the crate does not instrument. Returns to 0 when only instrumented subscriptions exist and nothing was dropped; a value that stays is the exact count of async-nats' drops.",
                vec![([("client", client)], ConstGauge::new(n))])?;
        }
        let events = shared.events.values();
        family(&mut encoder, "nats_delivery_client_connection_events",
            "Connection events async-nats reported, by event; a lower bound, async-nats loses events when its event queue of 128 is full.",
            events.iter().map(|(e, n)| ([("client", client), ("event", *e)], ConstCounter::new(*n))).collect())?;
        encode_publishes(&mut encoder, shared)?;
        encode_consumers(&mut encoder, shared)
    }
}

fn encode_consumers(encoder: &mut DescriptorEncoder, shared: &Shared) -> fmt::Result {
    let client = shared.client.as_str();
    let consumers = shared.consumer_snapshot();
    let labels = |c: &crate::jetstream::ConsumerSnapshot| {
        [
            ("client", client.to_string()),
            ("stream", c.stream.clone()),
            ("consumer", c.consumer.clone()),
        ]
    };
    family(
        encoder,
        "nats_delivery_client_jetstream_received_messages",
        "JetStream messages the application received from a consumer.",
        consumers
            .iter()
            .map(|c| (labels(c), ConstCounter::new(c.received)))
            .collect(),
    )?;
    family(
        encoder,
        "nats_delivery_client_jetstream_redelivered_messages",
        "JetStream messages the application received that the server had delivered before.",
        consumers
            .iter()
            .map(|c| (labels(c), ConstCounter::new(c.redelivered)))
            .collect(),
    )?;
    let mut acks = Vec::new();
    for c in &consumers {
        for (kind, n) in c.acknowledgements {
            let [a, b, d] = labels(c);
            acks.push(([a, b, d, ("kind", kind.to_string())], ConstCounter::new(n)));
        }
    }
    family(encoder, "nats_delivery_client_jetstream_acknowledgements",
        "Acknowledgements the application sent for JetStream messages, by kind (ack, nak, term, in_progress).",
        acks)?;
    family(
        encoder,
        "nats_delivery_client_jetstream_acknowledgement_errors",
        "Acknowledgements the client failed to send.",
        consumers
            .iter()
            .map(|c| (labels(c), ConstCounter::new(c.ack_errors)))
            .collect(),
    )?;
    family(encoder, "nats_delivery_client_jetstream_pull_batch_ratio",
        "Pull batch size divided by the per-subscription buffer; above 0.667 a client-side drop can stall the consumer until the pull expires.",
        consumers.iter().filter_map(|c| c.batch_ratio.map(|r| (labels(c), ConstGauge::new(r)))).collect())
}

/// Encodes the publishing families of `shared`'s connection.
fn encode_publishes(encoder: &mut DescriptorEncoder, shared: &Shared) -> fmt::Result {
    let client = shared.client.as_str();
    let stats = &shared.publishes;
    if stats.requesting.load(Ordering::Acquire) {
        family(encoder, "nats_delivery_client_request_no_responders",
            "Requests through the instrumented client that the server answered with no responders: nothing listened on the subject.",
            vec![([("client", client)], ConstCounter::new(stats.no_responders()))])?;
    }
    if !stats.publishing.load(Ordering::Acquire) {
        return Ok(());
    }
    family(
        encoder,
        "nats_delivery_client_jetstream_published_messages",
        "JetStream publishes the server acknowledged as stored.",
        vec![([("client", client)], ConstCounter::new(stats.stored()))],
    )?;
    family(encoder, "nats_delivery_client_jetstream_publish_duplicates",
        "JetStream publishes the server acknowledged as duplicates of a message id it holds, not stored again.",
        vec![([("client", client)], ConstCounter::new(stats.duplicates()))])?;
    let rows = PublishFailure::ALL
        .iter()
        .map(|r| {
            let labels = [("client", client), ("reason", r.label())];
            (labels, ConstCounter::new(stats.failures(*r)))
        })
        .collect();
    family(encoder, "nats_delivery_client_jetstream_publish_failures",
        "JetStream publishes without a positive acknowledgement, by reason: the server refused them (stream or subject full under discard new, wrong expected last sequence or message id), nothing answered, or no answer came in time.",
        rows)
}
