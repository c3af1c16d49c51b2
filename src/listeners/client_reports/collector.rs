//! Re-exports the kept instances and the `__overflow__` sums of the folded
//! ones. Only reads memory: no I/O in a scrape.

use std::fmt;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::instance::{Instance, Monotonic};
use super::wire::{ACK_KINDS, SUB_COUNTERS};
use super::{ClientReports, REASONS};
use crate::text::families::{counter_family, gauge_family};

type Labels<'a> = Vec<(&'static str, &'a str)>;
type Live<'a> = Vec<(&'a (String, String), &'a Instance)>;

fn identity<'a>(key: &'a (String, String)) -> Labels<'a> {
    vec![("client", key.0.as_str()), ("instance", key.1.as_str())]
}

/// Rows of one per-subscription value.
fn per_sub<'a>(
    live: &Live<'a>,
    f: impl Fn(&super::instance::SubscriptionState) -> Option<u64>,
) -> Vec<(Labels<'a>, u64)> {
    let mut rows = Vec::new();
    for (key, instance) in live {
        for (name, state) in &instance.subscriptions {
            if let Some(v) = f(state) {
                let mut l = identity(key);
                l.push(("subscription", name.as_str()));
                rows.push((l, v));
            }
        }
    }
    rows
}

fn exported(m: &Option<Monotonic>) -> Option<u64> {
    m.map(|m| m.exported)
}

const SUB_COUNTER_HELP: [&str; 4] = [
    "Messages an application's instrumented subscription handed to the application, as reported; never decreases across the instance's restarts.",
    "Messages an application's instrumented subscription dropped, as reported (exact); never decreases across the instance's restarts.",
    "Payload bytes of the messages an application's instrumented subscription dropped, as reported; never decreases across the instance's restarts.",
    "Slow-consumer events an application's client library reported, as last reported; a lower bound.",
];

impl Collector for ClientReports {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut state = self.state();
        let now = Instant::now();
        state.overflow.refresh_gauges(now, self.expiry);
        let state = &*state;
        let mut live: Live<'_> = state
            .instances
            .iter()
            .filter(|(_, i)| now.duration_since(i.received_at) < self.expiry)
            .collect();
        let kept = live.len();
        let folded = state.overflow.live_instances(now, self.expiry);
        live.extend(state.overflow.live(now, self.expiry));
        let e = &mut encoder;
        for (i, name) in SUB_COUNTERS.iter().enumerate() {
            counter_family(
                e,
                &format!("nats_delivery_app_{name}"),
                SUB_COUNTER_HELP[i],
                per_sub(&live, |s| exported(&s.counters[i])),
            )?;
        }
        gauge_family(
            e,
            "nats_delivery_app_pending_messages",
            "Messages pending in an application's instrumented subscription, as last reported.",
            per_sub(&live, |s| s.gauges[0]),
        )?;
        gauge_family(e, "nats_delivery_app_pending_bytes",
            "Payload bytes pending in an application's instrumented subscription, as last reported.",
            per_sub(&live, |s| s.gauges[1]))?;
        gauge_family(e, "nats_delivery_app_pending_messages_high_water",
            "Highest number of pending messages an application's instrumented subscription has held, as last reported.",
            per_sub(&live, |s| s.gauges[2]))?;
        let mut events = Vec::new();
        for (key, instance) in &live {
            for (event, m) in &instance.events {
                let mut l = identity(key);
                l.push(("event", event));
                events.push((l, m.exported));
            }
        }
        counter_family(e, "nats_delivery_app_connection_events",
            "Connection events an application's client library reported, by event, as last reported; a lower bound.",
            events)?;
        encode_consumers(e, &live)?;
        gauge_family(
            e,
            "nats_delivery_app_last_report_timestamp_seconds",
            "Unix time the exporter received the latest report of this application instance.",
            live.iter()
                .map(|(k, i)| (identity(k), i.received_unix_seconds)),
        )?;
        counter_family(
            e,
            "nats_delivery_app_instance_restarts",
            "Restarts of an application instance the exporter detected (a total or the report sequence went back); its counters continued from where they were.",
            live.iter().map(|(k, i)| (identity(k), i.restarts)),
        )?;
        encode_health(e, self, state, [kept, folded])
    }
}

/// `instances`: kept and folded instances re-exported now.
fn encode_health(
    e: &mut DescriptorEncoder,
    reports: &ClientReports,
    state: &super::State,
    instances: [usize; 2],
) -> fmt::Result {
    let none: Vec<(&'static str, &'static str)> = Vec::new();
    gauge_family(
        e,
        "nats_delivery_app_reports_listener_up",
        "1 while the exporter is subscribed to the application report subject, else 0.",
        [(none.clone(), u64::from(state.listener_up))],
    )?;
    counter_family(
        e,
        "nats_delivery_app_reports_listener_errors",
        "Failures of the application report listener, by kind: connect (once per connection outage, a refused login say), permission (the server refused the subject), other (the subscription failed or ended).",
        state
            .listener_errors
            .iter()
            .map(|(kind, n)| ([("kind", *kind)], *n)),
    )?;
    gauge_family(
        e,
        "nats_delivery_app_report_instances",
        "Application instances whose reports are re-exported under their own labels now.",
        [(none.clone(), instances[0] as u64)],
    )?;
    gauge_family(
        e,
        "nats_delivery_app_report_instances_limit",
        "Most application instances the exporter keeps under their own labels; reports of further instances are summed under client and instance __overflow__.",
        [(none.clone(), reports.limits.max_instances as u64)],
    )?;
    gauge_family(
        e,
        "nats_delivery_app_report_folded_instances",
        "Application instances past the instance limit whose reports are summed under client and instance __overflow__ now.",
        [(none.clone(), instances[1] as u64)],
    )?;
    gauge_family(
        e,
        "nats_delivery_app_report_folded_instances_limit",
        "Most application instances the exporter sums under __overflow__ (16 times the instance limit, at most 65,536); reports of further instances are rejected as too_many_instances.",
        [(none.clone(), reports.limits.max_folded_instances() as u64)],
    )?;
    counter_family(
        e,
        "nats_delivery_app_reports_received",
        "Application reports the exporter received, valid or not.",
        [(none.clone(), state.received)],
    )?;
    counter_family(
        e,
        "nats_delivery_app_reports_malformed",
        "Application reports the exporter ignored because they were not valid version 1 reports.",
        [(none.clone(), state.malformed)],
    )?;
    counter_family(
        e,
        "nats_delivery_app_reports_folded",
        "Application reports of instances past the instance limit, summed under client and instance __overflow__.",
        [(none, state.folded_reports)],
    )?;
    counter_family(e, "nats_delivery_app_reports_rejected",
        "Application reports the exporter ignored, by reason: malformed, version, identity (not valid version 1 reports), too_large, label_too_long (client or instance), too_many_instances (past the folded instance limit too), subject (client is not the subject's last token), implausible_value (a number of 2^50 or more), implausible_jump (a total grown by more than 2^32 a second), too_many_client_instances (past the instances of one client).",
        REASONS.iter().map(|r| ([("reason", *r)], state.rejected.get(r).copied().unwrap_or(0))))?;
    let f = state.folded;
    counter_family(e, "nats_delivery_app_report_entries_folded",
        "Report entries the exporter could not keep as they were: subscription and consumer (past the per-instance limit, summed under __overflow__), label (name too long, counted as __overflow__), duplicate (named twice in one report, merged).",
        [("subscription", f.subscriptions), ("consumer", f.consumers), ("label", f.labels), ("duplicate", f.duplicates)]
            .map(|(what, n)| ([("what", what)], n)))
}

fn encode_consumers(e: &mut DescriptorEncoder, live: &Live<'_>) -> fmt::Result {
    let mut received = Vec::new();
    let mut redelivered = Vec::new();
    let mut acks = Vec::new();
    for (key, instance) in live {
        for ((stream, consumer), counters) in &instance.consumers {
            let mut l = identity(key);
            l.push(("stream", stream.as_str()));
            l.push(("consumer", consumer.as_str()));
            if let Some(v) = exported(&counters[0]) {
                received.push((l.clone(), v));
            }
            if let Some(v) = exported(&counters[1]) {
                redelivered.push((l.clone(), v));
            }
            for (kind, m) in ACK_KINDS.iter().zip(&counters[2..]) {
                if let Some(v) = exported(m) {
                    let mut l = l.clone();
                    l.push(("kind", kind));
                    acks.push((l, v));
                }
            }
        }
    }
    counter_family(
        e,
        "nats_delivery_app_jetstream_received_messages",
        "JetStream messages an application received from a consumer, as last reported.",
        received,
    )?;
    counter_family(e, "nats_delivery_app_jetstream_redelivered_messages",
        "JetStream messages an application received that the server had delivered before, as last reported.",
        redelivered)?;
    counter_family(
        e,
        "nats_delivery_app_jetstream_acknowledgements",
        "Acknowledgements an application sent for JetStream messages, by kind, as last reported.",
        acks,
    )
}
