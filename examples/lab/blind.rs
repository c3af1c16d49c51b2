//! What makes loss invisible: an advisory nobody can read, an account whose
//! advisories nobody counts, and finally a server and an exporter that stop.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};

use crate::Lab;

const WAIT: Duration = Duration::from_secs(30);

/// Alerts no lab scenario makes fire, and why. The lab fails if an alert is
/// neither driven nor listed here.
pub const NOT_IN_LAB: &[(&str, &str)] = &[
    (
        "NatsDeliveryLossSustained",
        "the page needs loss in every 5-minute window for 15 minutes, and the lab's losses \
         are single events (its `for` is kept, so it must not fire there); \
         alerts/tests/loss.test.yml pages for sustained loss and not for one or two events",
    ),
    (
        "NatsJetStreamApiRequestsDropped",
        "the lab polls its server over HTTP, and the API limit advisories are read through \
         the system account; tests/listeners/api_limit.rs floods a real server's JetStream \
         API past its request_queue_limit and checks the count, \
         alerts/tests/api_requests_dropped.test.yml the rule",
    ),
    (
        "NatsJetStreamTwoReplicas",
        "the lab runs one server, so no stream has replicas; \
         alerts/tests/replica_margin.test.yml covers the rule",
    ),
    (
        "NatsJetStreamReplicaMarginExhausted",
        "the lab runs one server, so no stream has replicas; tests/system/replica_margin.rs \
         freezes and kills servers of a real 3-node cluster and checks the margins the rule \
         reads, alerts/tests/replica_margin.test.yml the rule",
    ),
    (
        "NatsJetStreamReplicasUnavailable",
        "the lab runs one server, so no stream has replicas; tests/system/replica_margin.rs \
         takes two of three servers away and checks the margins below 0, \
         alerts/tests/replica_margin.test.yml the rule",
    ),
    (
        "NatsJetStreamConsumerStuck",
        "fires only for consumers without a status (an exporter run with \
         --consumer-status-window 0s); the lab's exporter has one, so its cause fires \
         NatsJetStreamConsumerStopped (stopped consumer scenario) and the stuck alert \
         must stay silent there; alerts/tests/consumer_health.test.yml covers it",
    ),
    (
        "NatsRouteNearMaxPending",
        "the lab runs one server, without routes; tests/sources/link_pending_held.rs holds \
         bytes on a real route and alerts/tests/pressure.test.yml covers the rule",
    ),
    (
        "NatsDeliveryJetStreamSeriesCeilingReached",
        "the lab's exporters run without --max-jetstream-series; \
         tests/jetstream/cardinality_budget.rs checks the gauges it reads and \
         alerts/tests/exporter.test.yml the rule",
    ),
    (
        "NatsJetStreamStreamDataLost",
        "losing stored data takes a server stopped and a block file deleted; \
         tests/jetstream/stream_lost.rs does that on a real server and checks the gauge the \
         rule reads, alerts/tests/loss.test.yml the rule",
    ),
    (
        "NatsDeliverySurveyServerMissing",
        "the lab polls one server over HTTP; tests/system/system_polling.rs kills one \
         server of three under system-account polling and checks the gauge the rule \
         reads, and alerts/tests/exporter.test.yml the rule",
    ),
    (
        "NatsDeliverySurveyDown",
        "the lab polls one server over HTTP; alerts/tests/exporter.test.yml covers \
         the rule, and tests/system/system_polling.rs the survey gauges",
    ),
    (
        "NatsJetStreamOriginInactive",
        "the lab has no mirror or source; tests/jetstream/stream_origins.rs cuts a source \
         off on a real server and checks the age the rule reads, \
         alerts/tests/stream_origins.test.yml the rule",
    ),
    (
        "NatsJetStreamOriginLagHigh",
        "the lab has no mirror or source; tests/jetstream/stream_origins.rs checks the lag \
         the rule reads, alerts/tests/stream_origins.test.yml the rule",
    ),
    (
        "NatsJetStreamOriginMessagesRemovedBeforeCopy",
        "the lab has no mirror or source; tests/jetstream/stream_origins.rs counts what an \
         origin removed before a mirror and a source copied it, \
         alerts/tests/stream_origins.test.yml the rule",
    ),
    (
        "NatsJetStreamOriginRemovalForecast",
        "the lab has no mirror or source; tests/jetstream/origin_forecast.rs checks the \
         forecast the rule reads against each origin's removal, \
         alerts/tests/origin_removal_forecast.test.yml the rule",
    ),
    (
        "NatsJetStreamAccountFullForecast",
        "the lab's accounts have no JetStream limit; tests/jetstream/account_storage.rs \
         checks the forecast the rule reads, alerts/tests/account_full.test.yml the rule",
    ),
    (
        "NatsJetStreamAccountNearlyFull",
        "the lab's accounts have no JetStream limit; tests/jetstream/account_storage.rs \
         checks usage and limits, alerts/tests/account_full.test.yml the rule",
    ),
    (
        "NatsDeliveryCanaryLoss",
        "the lab's exporter runs without --canary (opt-in); \
         tests/listeners/canary_partition.rs cuts a server off and runs the rule with \
         promtool on the counts, alerts/tests/canary.test.yml the rule",
    ),
    (
        "NatsDeliveryCanaryDown",
        "the lab's exporter runs without --canary (opt-in); alerts/tests/canary.test.yml \
         covers the rule, tests/listeners/canary.rs the gauge",
    ),
    (
        "NatsGatewayNearMaxPending",
        "the lab runs one server, without gateways; tests/sources/link_pending_held.rs holds \
         bytes on a real gateway and alerts/tests/pressure.test.yml covers the rule",
    ),
];

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// A broken max-deliveries advisory, published where the server would
/// publish a real one.
pub async fn malformed_advisory(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsDeliveryAdvisoriesMalformed";
    lab.report
        .scenario("a malformed advisory: its loss cannot be counted", &[alert]);
    let q = "sum(nats_delivery_advisories_malformed_total{account=\"APP\"})";
    lab.wait_series(q).await?;
    lab.app
        .publish(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.LAB_ORDERS.billing",
            "{\"type\":\"io.nats.jetstream.advisory.v1.max_deliver\",\"stream\":".into(),
        )
        .await?;
    lab.app.flush().await?;
    lab.report
        .note("published 1 truncated advisory on the max-deliveries subject");
    let got = lab.prom.settle(q, 1.0, WAIT).await?;
    lab.report.count("malformed advisories", 1.0, q, got);
    let labels = [("account", "APP")];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    Ok(())
}

/// A consumer in account OTHER, whose advisories the exporter does not
/// listen to.
pub async fn unwatched_account(lab: &mut Lab) -> anyhow::Result<()> {
    let alert = "NatsDeliveryAdvisoriesUnwatched";
    lab.report.scenario(
        "an account with consumers whose advisories nobody counts",
        &[alert],
    );
    let other = async_nats::ConnectOptions::new()
        .user_and_password("other".into(), "other-secret".into())
        .name("lab-other")
        .connect(lab.nats.client_url())
        .await?;
    let js = jetstream::new(other);
    js.create_stream(stream::Config {
        name: "LAB_AUDIT".into(),
        subjects: vec!["lab.audit".into()],
        ..Default::default()
    })
    .await
    .map_err(err)?
    .create_consumer(pull::Config {
        durable_name: Some("auditor".into()),
        ..Default::default()
    })
    .await
    .map_err(err)?;
    // One message nobody takes: its lag and age are estimated (the
    // exporter reads messages of APP only), for the dashboards' estimated
    // series.
    js.publish("lab.audit", "audit".into())
        .await
        .map_err(err)?
        .await
        .map_err(err)?;
    lab.report.note(
        "account OTHER: stream LAB_AUDIT with consumer auditor and one message; the exporter listens to APP only",
    );
    let q = "count(nats_delivery_consumer_pending_messages{account=\"OTHER\"})";
    let got = lab.prom.settle(q, 1.0, WAIT).await?;
    lab.report.count("consumers in account OTHER", 1.0, q, got);
    let labels = [("account", "OTHER")];
    lab.expect_firing_alone(alert, &labels, WAIT).await?;
    Ok(())
}

/// The server stops (the exporter cannot read it, its listeners are down),
/// then the exporter stops (Prometheus cannot scrape it), then its job has
/// no target left in Prometheus' configuration.
pub async fn blindness(lab: &mut Lab) -> anyhow::Result<()> {
    let alerts = [
        "NatsDeliveryTargetDown",
        "NatsDeliveryAdvisoryListenerDown",
        "NatsDeliverySystemEventsListenerDown",
        "NatsDeliveryExporterDown",
        "NatsDeliveryExporterAbsent",
        "NatsDeliveryAppReportsListenerDown",
    ];
    lab.report.scenario(
        "blindness: the server stops, then the exporter, then its scrape target",
        &alerts,
    );
    lab.stop_nats()?;
    lab.report.note("killed nats-server");
    let q = "count(nats_delivery_up == 0)";
    let got = lab.prom.settle(q, 4.0, WAIT).await?;
    lab.report.count(
        "monitoring endpoints unreadable (varz, connz, jsz, accstatz)",
        4.0,
        q,
        got,
    );
    for (alert, labels) in [
        (alerts[0], vec![("source", "varz")]),
        (alerts[0], vec![("source", "connz")]),
        (alerts[0], vec![("source", "jsz")]),
        (alerts[0], vec![("source", "accstatz")]),
        (alerts[1], vec![("account", "APP")]),
        (alerts[2], vec![("job", "nats-delivery-exporter")]),
        (alerts[5], vec![("job", "nats-delivery-exporter")]),
    ] {
        lab.expect_firing(alert, &labels, WAIT).await?;
    }
    lab.exporter.kill();
    lab.report.note("killed the exporter");
    let q = "count(up{job=\"nats-delivery-exporter\"} == 0)";
    let got = lab.prom.settle(q, 1.0, WAIT).await?;
    lab.report
        .count("exporter targets Prometheus cannot scrape", 1.0, q, got);
    let labels = [("job", "nats-delivery-exporter")];
    lab.expect_firing(alerts[3], &labels, WAIT).await?;
    let config = crate::processes::prometheus_config(&[], lab.app_port, &lab.rules_dir);
    lab.prometheus.reload(&config)?;
    lab.report
        .note("left the exporter's job without targets in Prometheus' configuration (reloaded)");
    lab.expect_firing_alone(alerts[4], &labels, WAIT).await?;
    Ok(())
}
