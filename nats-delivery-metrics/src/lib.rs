//! Exact Prometheus counters for the messages an async-nats client drops.
//!
//! async-nats drops a message when a subscription's buffer is full and tells
//! the application through `Event::SlowConsumer`, but those events travel
//! through a channel of 128 slots filled with `try_send`: under a drop storm
//! most of them are lost. This crate gives the subscriptions you choose their
//! own pending limits (messages and bytes) and counts every message they drop.
//!
//! ```no_run
//! use futures::StreamExt;
//! use nats_delivery_metrics::ClientMetrics;
//! use prometheus_client::registry::Registry;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut registry = Registry::default();
//! let metrics = ClientMetrics::new("billing", &mut registry);
//! let client = metrics
//!     .connect(async_nats::ConnectOptions::new(), "nats://127.0.0.1:4222")
//!     .await?;
//! let mut orders = client.subscribe("orders.>").await?;
//! while let Some(message) = orders.next().await {
//!     // handle message
//! #   let _ = message;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # How drops are counted, and what "never drops" means
//!
//! An instrumented [`Subscription`] takes every message out of the
//! async-nats subscriber itself, when the application polls it, and admits
//! it into the crate's own queue or drops it: the queue enforces
//! [`PendingLimits`], and a message that does not fit is dropped and counted
//! in `nats_delivery_client_dropped_messages_total{client,subscription}`. An
//! application that does not poll (busy elsewhere, or blocked) does not stop
//! this: a watchdog task per [`ClientMetrics`] takes what waits every 10 ms,
//! so the limits hold and a drop is counted within 10 ms of its arrival. For
//! every message taken, `received = delivered + dropped + pending` holds
//! exactly; no task stands between async-nats and the application.
//!
//! In front of the crate's queue is async-nats' own channel. async-nats'
//! connection task reads the socket in long bursts, so a storm of small
//! messages can fill that channel between two takes; so
//! [`ClientMetrics::connect_options`] gives it a capacity of
//! [`ASYNC_NATS_SUBSCRIPTION_CAPACITY`] (2^28) messages: what waits there is
//! memory, not loss. Against the server's own per-subscription count,
//! `delivered + dropped + pending` is then exact at rest, on any runtime.
//! The connection audit, `nats_delivery_client_unforwarded_messages{client}`
//! ([`ClientMetrics::unforwarded_messages`]), shows what the connection read
//! and no instrumented subscription took: it returns to 0 at rest, and a
//! value that stays is the exact number async-nats dropped (if the channel
//! was made smaller again) or took for consumers the crate does not see.
//!
//! # Events
//!
//! [`ClientMetrics::connect_options`] installs an event callback that counts
//! connects, disconnects, lame-duck mode, draining, closes, server and client
//! errors, and slow-consumer events by subscription. async-nats offers no way
//! to read a callback already set on `ConnectOptions`, and installing a new
//! one replaces it; pass your own callback to
//! [`ClientMetrics::connect_options_with_callback`] to have both.
//!
//! # Publishing
//!
//! [`InstrumentedClient::jetstream`] (or
//! [`ClientMetrics::jetstream_publisher`]) is a JetStream context that counts
//! every publish once its answer is known: stored, duplicate, or not stored
//! by [`PublishFailure`] (the stream full under discard new, a wrong
//! expected last sequence, no responders, a timeout, ...), read from the
//! JetStream API error code of the server's answer.
//! [`InstrumentedClient::request`] counts requests nothing answered.
//!
//! # Serving the metrics
//!
//! Each metrics library is a feature (the README's "Backends"), all reading
//! the same counters: prometheus-client (the default, `ClientMetrics::new`),
//! the `prometheus` crate, the `metrics` facade and OpenTelemetry. With
//! prometheus-client the application serves its own `Registry`. With the `http-server` feature,
//! `serve` is a minimal `/metrics` endpoint. With
//! `ClientMetrics::publish_reports` (feature `reports`) the totals travel
//! over NATS to the nats-delivery-exporter instead (wire format in the
//! README).
#![deny(missing_docs)]
#![warn(unreachable_pub, unnameable_types)]

mod admission;
mod client;
mod error;
mod events;
mod export;
#[cfg(feature = "http-server")]
mod http;
mod intake;
mod jetstream;
mod limits;
mod publish;
mod publish_failure;
mod publish_stats;
#[cfg(feature = "reports")]
mod report;
mod state;
mod stats;
mod subscription;
mod totals;

use std::future::Future;
use std::sync::Arc;

pub use client::InstrumentedClient;
pub use error::{Error, ErrorKind};
#[cfg(feature = "metrics")]
pub use export::metrics_facade::{MetricsFacade, UpdateTask};
#[cfg(feature = "http-server")]
pub use http::{serve, READ_TIMEOUT};
pub use jetstream::{Acknowledgement, ConsumerMetrics};
pub use limits::{PendingLimits, SubscribeOptions};
pub use publish::{InstrumentedJetStream, PendingPublishAck};
pub use publish_failure::PublishFailure;
#[cfg(feature = "reports")]
pub use report::{ReportOptions, ReportPublisher, DEFAULT_REPORT_SUBJECT};
pub use subscription::Subscription;
pub use totals::{ConnectionEventTotals, SubscriptionTotals};

/// The `subscription_capacity` [`ClientMetrics::connect_options`] gives
/// async-nats: 2^28 messages. async-nats allocates its channels as they fill,
/// so this costs nothing until messages wait; it means async-nats would only
/// drop after 268,435,456 messages of one subscription waited to be taken
/// (which happens at least every 10 ms), i.e. never before memory runs out.
pub const ASYNC_NATS_SUBSCRIPTION_CAPACITY: usize = 1 << 28;

use state::Shared;
use stats::SubscriptionStats;

/// The README's examples, compiled as doc tests.
#[cfg(all(
    doctest,
    feature = "reports",
    feature = "prometheus-client",
    feature = "prometheus",
    feature = "metrics",
    feature = "opentelemetry"
))]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

/// The metrics of one NATS connection (one `client` label value).
///
/// Cheap to clone. Use one `ClientMetrics` per connection: slow-consumer
/// events name subscriptions by sid, which is only unique per connection.
#[derive(Debug, Clone)]
pub struct ClientMetrics {
    shared: Arc<Shared>,
}

impl ClientMetrics {
    /// Creates the metrics for the connection named `client` and registers
    /// them in `registry` (feature `prometheus-client`, the default).
    ///
    /// ```
    /// use prometheus_client::registry::Registry;
    /// let mut registry = Registry::default();
    /// let metrics = nats_delivery_metrics::ClientMetrics::new("billing", &mut registry);
    /// let mut text = String::new();
    /// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    /// // Before any subscription only the connection events exist.
    /// let connected = "nats_delivery_client_connection_events_total{client=\"billing\",event=\"connected\"} 0\n";
    /// assert!(text.contains(connected));
    /// assert!(!text.contains("nats_delivery_client_dropped_messages"));
    /// # let _ = metrics;
    /// ```
    #[cfg(feature = "prometheus-client")]
    pub fn new(
        client: impl Into<String>,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Self {
        let metrics = Self::named(client);
        metrics.register(registry);
        metrics
    }

    /// Creates the metrics for the connection named `client` without
    /// exporting them anywhere: hand them to the backend of your metrics
    /// library (`register`, `register_prometheus`,
    /// `register_opentelemetry`, `metrics_facade`). The counting starts
    /// here either way; every backend reads the same counters.
    pub fn named(client: impl Into<String>) -> Self {
        ClientMetrics {
            shared: Arc::new(Shared::new(client.into())),
        }
    }

    /// Exports these metrics through a prometheus-client `registry`
    /// (feature `prometheus-client`): a collector that reads the counters
    /// whenever the registry is encoded.
    #[cfg(feature = "prometheus-client")]
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let collector = export::prometheus_client::ClientCollector(self.shared.clone());
        registry.register_collector(Box::new(collector));
    }

    /// Exports these metrics through a `prometheus` crate `registry`
    /// (feature `prometheus`): a collector that reads the counters whenever
    /// the registry is gathered. Fails as `Registry::register` does, for
    /// example when metrics of the same `client` name are registered twice.
    #[cfg(feature = "prometheus")]
    pub fn register_prometheus(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        export::prometheus::register(&self.shared, registry)
    }

    /// Exports these metrics as observable instruments of `meter`
    /// (feature `opentelemetry`): their callbacks read the counters whenever
    /// the meter provider's reader collects, for as long as the provider
    /// lives (OpenTelemetry has no way to remove an instrument).
    #[cfg(feature = "opentelemetry")]
    pub fn register_opentelemetry(&self, meter: &opentelemetry::metrics::Meter) {
        export::opentelemetry::register(&self.shared, meter)
    }

    /// Exports these metrics through the `metrics` facade (feature
    /// `metrics`): the returned [`MetricsFacade`] copies the counters into the
    /// installed recorder when you call [`MetricsFacade::update`] (before each
    /// render of your exporter) or every period of
    /// [`MetricsFacade::spawn_updates`].
    #[cfg(feature = "metrics")]
    pub fn metrics_facade(&self) -> MetricsFacade {
        MetricsFacade::new(self.shared.clone())
    }

    /// The `client` label value.
    pub fn client(&self) -> &str {
        &self.shared.client
    }

    /// `options` with an event callback that counts connection and
    /// slow-consumer events, and async-nats' per-subscription channel sized to
    /// [`ASYNC_NATS_SUBSCRIPTION_CAPACITY`] so that async-nats itself never
    /// drops a message for an instrumented subscription (the crate's own
    /// [`PendingLimits`] decide, and count, what is dropped). Replaces a
    /// callback set earlier on `options` (async-nats cannot read it back);
    /// see [`Self::connect_options_with_callback`] to keep your own. Setting
    /// `subscription_capacity` again afterwards brings async-nats' drops
    /// back; they then show in `nats_delivery_client_unforwarded_messages`.
    pub fn connect_options(
        &self,
        options: async_nats::ConnectOptions,
    ) -> async_nats::ConnectOptions {
        let shared = self.shared.clone();
        options
            .subscription_capacity(ASYNC_NATS_SUBSCRIPTION_CAPACITY)
            .event_callback(move |event| {
                shared.record_event(&event);
                std::future::ready(())
            })
    }

    /// Like [`Self::connect_options`], and then calls `callback` with every
    /// event: the application keeps its own event handling.
    pub fn connect_options_with_callback<F, Fut>(
        &self,
        options: async_nats::ConnectOptions,
        callback: F,
    ) -> async_nats::ConnectOptions
    where
        F: Fn(async_nats::Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + Sync + 'static,
    {
        let shared = self.shared.clone();
        options
            .subscription_capacity(ASYNC_NATS_SUBSCRIPTION_CAPACITY)
            .event_callback(move |event| {
                shared.record_event(&event);
                callback(event)
            })
    }

    /// Connects to `addrs` with [`Self::connect_options`] applied to
    /// `options`, and returns the client these metrics belong to.
    pub async fn connect(
        &self,
        options: async_nats::ConnectOptions,
        addrs: impl async_nats::ToServerAddrs,
    ) -> Result<InstrumentedClient, Error> {
        let client = self
            .connect_options(options)
            .connect(addrs)
            .await
            .map_err(|e| Error::new(ErrorKind::Connect, e))?;
        InstrumentedClient::new(self.clone(), client)
    }

    /// Subscribes to `subject` with default [`SubscribeOptions`]: named after
    /// the subject pattern, default [`PendingLimits`]. `client` must be the
    /// connection these metrics belong to (see [`Self::subscribe_with`]).
    pub async fn subscribe(
        &self,
        client: &async_nats::Client,
        subject: impl Into<String>,
    ) -> Result<Subscription, Error> {
        self.subscribe_with(client, subject, SubscribeOptions::default())
            .await
    }

    /// Subscribes to `subject` with a name, queue group or limits of your choice.
    ///
    /// The first subscription ties these metrics to `client`'s connection; a
    /// subscription on another connection fails with
    /// [`ErrorKind::OtherConnection`], because sids restart at 1 on every
    /// connection and its slow-consumer events would be counted for the wrong
    /// subscription. [`InstrumentedClient`] makes that mistake impossible.
    pub async fn subscribe_with(
        &self,
        client: &async_nats::Client,
        subject: impl Into<String>,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        if !self.shared.bind(client) {
            return Err(Error::new(
                ErrorKind::OtherConnection,
                "these metrics belong to another connection; use one ClientMetrics per connection",
            ));
        }
        let subject = subject.into();
        let subscriber = match &options.queue_group {
            Some(group) => client.queue_subscribe(subject.clone(), group.clone()).await,
            None => client.subscribe(subject.clone()).await,
        }
        .map_err(|e| Error::new(ErrorKind::Subscribe, e))?;
        let name: Arc<str> = Arc::from(options.name.unwrap_or(subject));
        let stats = Arc::new(SubscriptionStats::new(name, options.limits));
        Ok(Subscription::start(subscriber, stats, self.shared.clone()))
    }

    /// Attributes slow-consumer events of a plain async-nats subscriber to
    /// `name`. Its drops are then counted by events only (a lower bound);
    /// subscribe through [`Self::subscribe`] for exact counts. Fails with
    /// [`ErrorKind::SidUnreadable`] if this async-nats version no longer
    /// shows the sid in the subscriber's `Debug` output.
    pub fn name_subscriber(
        &self,
        subscriber: &async_nats::Subscriber,
        name: impl Into<String>,
    ) -> Result<(), Error> {
        let sid = subscription::sid_of(subscriber).ok_or_else(|| {
            Error::new(
                ErrorKind::SidUnreadable,
                "async-nats' Subscriber Debug output no longer shows its sid",
            )
        })?;
        self.shared.name_sid(sid, Arc::from(name.into()));
        Ok(())
    }

    /// Messages the connection read (async-nats' `in_messages`) that no
    /// instrumented subscription or [`InstrumentedClient::request`] has taken:
    /// still waiting in async-nats' channels, dropped by async-nats, or for
    /// subscribers and requests this crate does not see. With
    /// [`Self::connect_options`] and only instrumented subscriptions it
    /// returns to exactly 0 within 10 ms once messages stop arriving; a value
    /// that stays is the exact number of messages async-nats dropped.
    /// `None` before the first subscription.
    pub fn unforwarded_messages(&self) -> Option<u64> {
        self.shared.unforwarded()
    }

    /// The totals of the subscriptions named `name` (instrumented, or plain
    /// ones named with [`Self::name_subscriber`]), `None` for an unknown name.
    pub fn subscription_totals(&self, name: &str) -> Option<SubscriptionTotals> {
        self.shared
            .snapshot()
            .into_iter()
            .find(|s| &*s.name == name)
            .map(|s| SubscriptionTotals::from(&s))
    }

    /// Connection events counted so far.
    pub fn connection_events(&self) -> ConnectionEventTotals {
        ConnectionEventTotals::from(&self.shared.events)
    }

    /// Counters for the JetStream consumer `consumer` of `stream`.
    pub fn jetstream_consumer(&self, stream: &str, consumer: &str) -> ConsumerMetrics {
        ConsumerMetrics::new(&self.shared, stream, consumer)
    }

    /// Publishes this connection's totals (feature `reports`) on `options.subject` every
    /// `options.interval`, for the nats-delivery-exporter to re-export.
    /// Publishing stops when the returned [`ReportPublisher`] is dropped.
    #[cfg(feature = "reports")]
    pub fn publish_reports(
        &self,
        client: async_nats::Client,
        options: ReportOptions,
    ) -> ReportPublisher {
        ReportPublisher::start(self.shared.clone(), client, options)
    }

    /// The JSON body of one report, as [`Self::publish_reports`] sends it
    /// (feature `reports`).
    #[cfg(feature = "reports")]
    pub fn report(&self, instance: &str, sequence: u64) -> Vec<u8> {
        report::encode_report(&self.shared, instance, sequence)
    }
}
