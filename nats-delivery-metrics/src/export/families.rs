//! The metric families every backend exports: name (without `_total`),
//! help, type and label names, exactly as `METRICS.md` lists them.

/// Counter or gauge; a ratio is a gauge whose samples are fractions, not counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Ratio,
}

/// Which counters a family is read from (`super::collect` reads them
/// group by group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Group {
    Subscriptions,
    Connection,
    Publishing,
    Consumers,
}

/// One metric family.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Family {
    /// The name without `_total` (prometheus-client and OpenTelemetry's
    /// Prometheus translation add it to counters).
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) kind: Kind,
    /// Label names, in the order every sample gives its values.
    pub(crate) labels: &'static [&'static str],
    pub(crate) group: Group,
}

impl Family {
    /// The name a Prometheus query uses: with `_total` for a counter.
    #[cfg_attr(
        not(any(feature = "prometheus", feature = "metrics")),
        allow(dead_code)
    )]
    pub(crate) fn exposed_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            Kind::Gauge | Kind::Ratio => self.name.to_string(),
        }
    }
}

const SUBSCRIPTION: &[&str] = &["client", "subscription"];
const CLIENT: &[&str] = &["client"];
const CONSUMER: &[&str] = &["client", "stream", "consumer"];

const fn family(
    group: Group,
    name: &'static str,
    help: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
) -> Family {
    Family {
        name,
        help,
        kind,
        labels,
        group,
    }
}

pub(crate) static DROPPED_MESSAGES: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_dropped_messages",
    "Messages an instrumented subscription dropped because a pending limit was reached (exact).",
    Kind::Counter,
    SUBSCRIPTION,
);
pub(crate) static DROPPED_BYTES: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_dropped_bytes",
    "Payload bytes of the messages an instrumented subscription dropped.",
    Kind::Counter,
    SUBSCRIPTION,
);
pub(crate) static DELIVERED_MESSAGES: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_delivered_messages",
    "Messages an instrumented subscription handed to the application.",
    Kind::Counter,
    SUBSCRIPTION,
);
pub(crate) static PENDING_MESSAGES: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_pending_messages",
    "Messages received by an instrumented subscription and not yet handed to the application.",
    Kind::Gauge,
    SUBSCRIPTION,
);
pub(crate) static PENDING_BYTES: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_pending_bytes",
    "Payload bytes of the pending messages of an instrumented subscription.",
    Kind::Gauge,
    SUBSCRIPTION,
);
pub(crate) static PENDING_HIGH_WATER: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_pending_messages_high_water",
    "Highest number of pending messages an instrumented subscription has held.",
    Kind::Gauge,
    SUBSCRIPTION,
);
pub(crate) static PENDING_MESSAGES_LIMIT: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_pending_messages_limit",
    "Pending message limit of an instrumented subscription; further messages are dropped and counted. Absent when unlimited.",
    Kind::Gauge,
    SUBSCRIPTION,
);
pub(crate) static PENDING_BYTES_LIMIT: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_pending_bytes_limit",
    "Pending payload byte limit of an instrumented subscription; further messages are dropped and counted. Absent when unlimited.",
    Kind::Gauge,
    SUBSCRIPTION,
);
pub(crate) static SLOW_CONSUMER_EVENTS: Family = family(
    Group::Subscriptions,
    "nats_delivery_client_slow_consumer_events",
    "Slow-consumer events async-nats reported per subscription; a lower bound, async-nats loses events when its event queue of 128 is full.",
    Kind::Counter,
    SUBSCRIPTION,
);
pub(crate) static UNFORWARDED_MESSAGES: Family = family(
    Group::Connection,
    "nats_delivery_client_unforwarded_messages",
    "Messages the connection read that no instrumented subscription has taken yet: waiting in async-nats' buffers, dropped by async-nats, or for subscribers the crate does not instrument. Returns to 0 when only instrumented subscriptions exist and nothing was dropped; a value that stays is the exact count of async-nats' drops.",
    Kind::Gauge,
    CLIENT,
);
pub(crate) static CONNECTION_EVENTS: Family = family(
    Group::Connection,
    "nats_delivery_client_connection_events",
    "Connection events async-nats reported, by event; a lower bound, async-nats loses events when its event queue of 128 is full.",
    Kind::Counter,
    &["client", "event"],
);
pub(crate) static REQUEST_NO_RESPONDERS: Family = family(
    Group::Publishing,
    "nats_delivery_client_request_no_responders",
    "Requests through the instrumented client that the server answered with no responders: nothing listened on the subject.",
    Kind::Counter,
    CLIENT,
);
pub(crate) static PUBLISHED_MESSAGES: Family = family(
    Group::Publishing,
    "nats_delivery_client_jetstream_published_messages",
    "JetStream publishes the server acknowledged as stored.",
    Kind::Counter,
    CLIENT,
);
pub(crate) static PUBLISH_DUPLICATES: Family = family(
    Group::Publishing,
    "nats_delivery_client_jetstream_publish_duplicates",
    "JetStream publishes the server acknowledged as duplicates of a message id it holds, not stored again.",
    Kind::Counter,
    CLIENT,
);
pub(crate) static PUBLISH_FAILURES: Family = family(
    Group::Publishing,
    "nats_delivery_client_jetstream_publish_failures",
    "JetStream publishes without a positive acknowledgement, by reason: the server refused them (stream or subject full under discard new, wrong expected last sequence or message id), nothing answered, or no answer came in time.",
    Kind::Counter,
    &["client", "reason"],
);
pub(crate) static RECEIVED_MESSAGES: Family = family(
    Group::Consumers,
    "nats_delivery_client_jetstream_received_messages",
    "JetStream messages the application received from a consumer.",
    Kind::Counter,
    CONSUMER,
);
pub(crate) static REDELIVERED_MESSAGES: Family = family(
    Group::Consumers,
    "nats_delivery_client_jetstream_redelivered_messages",
    "JetStream messages the application received that the server had delivered before.",
    Kind::Counter,
    CONSUMER,
);
pub(crate) static ACKNOWLEDGEMENTS: Family = family(
    Group::Consumers,
    "nats_delivery_client_jetstream_acknowledgements",
    "Acknowledgements the application sent for JetStream messages, by kind (ack, nak, term, in_progress).",
    Kind::Counter,
    &["client", "stream", "consumer", "kind"],
);
pub(crate) static ACKNOWLEDGEMENT_ERRORS: Family = family(
    Group::Consumers,
    "nats_delivery_client_jetstream_acknowledgement_errors",
    "Acknowledgements the client failed to send.",
    Kind::Counter,
    CONSUMER,
);
pub(crate) static PULL_BATCH_RATIO: Family = family(
    Group::Consumers,
    "nats_delivery_client_jetstream_pull_batch_ratio",
    "Pull batch size divided by the per-subscription buffer; above 0.667 a client-side drop can stall the consumer until the pull expires.",
    Kind::Ratio,
    CONSUMER,
);

/// Every family, in the order the backends write them.
pub(crate) static ALL: [&Family; 20] = [
    &DROPPED_MESSAGES,
    &DROPPED_BYTES,
    &DELIVERED_MESSAGES,
    &PENDING_MESSAGES,
    &PENDING_BYTES,
    &PENDING_HIGH_WATER,
    &PENDING_MESSAGES_LIMIT,
    &PENDING_BYTES_LIMIT,
    &SLOW_CONSUMER_EVENTS,
    &UNFORWARDED_MESSAGES,
    &CONNECTION_EVENTS,
    &REQUEST_NO_RESPONDERS,
    &PUBLISHED_MESSAGES,
    &PUBLISH_DUPLICATES,
    &PUBLISH_FAILURES,
    &RECEIVED_MESSAGES,
    &REDELIVERED_MESSAGES,
    &ACKNOWLEDGEMENTS,
    &ACKNOWLEDGEMENT_ERRORS,
    &PULL_BATCH_RATIO,
];
