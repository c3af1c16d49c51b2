//! A client whose subscriptions are always counted by the metrics of its own
//! connection.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::{ClientMetrics, Error, ErrorKind, SubscribeOptions, Subscription};

/// An async-nats connection with its [`ClientMetrics`]: every subscription
/// made through it is instrumented and attributed to this connection only.
///
/// JetStream publishes made through [`Self::jetstream`] are counted;
/// everything else goes through [`Self::client`].
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use futures::StreamExt;
/// let mut registry = prometheus_client::registry::Registry::default();
/// let metrics = nats_delivery_metrics::ClientMetrics::new("billing", &mut registry);
/// let client = metrics
///     .connect(async_nats::ConnectOptions::new(), "nats://127.0.0.1:4222")
///     .await?;
/// let mut orders = client.subscribe("orders.>").await?;
/// while let Some(message) = orders.next().await {
/// #   let _ = message;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct InstrumentedClient {
    metrics: ClientMetrics,
    client: async_nats::Client,
}

impl InstrumentedClient {
    pub(crate) fn new(metrics: ClientMetrics, client: async_nats::Client) -> Result<Self, Error> {
        if !metrics.shared.bind(&client) {
            return Err(Error::new(
                ErrorKind::OtherConnection,
                "these metrics belong to another connection; use one ClientMetrics per connection",
            ));
        }
        metrics.shared.publishes.enable_requests();
        Ok(InstrumentedClient { metrics, client })
    }

    /// The async-nats client, for publishing and everything else.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The metrics of this connection.
    pub fn metrics(&self) -> &ClientMetrics {
        &self.metrics
    }

    /// Subscribes to `subject`, counted exactly (see [`ClientMetrics::subscribe`]).
    pub async fn subscribe(&self, subject: impl Into<String>) -> Result<Subscription, Error> {
        self.metrics.subscribe(&self.client, subject).await
    }

    /// Subscribes with a name, queue group or limits of your choice.
    pub async fn subscribe_with(
        &self,
        subject: impl Into<String>,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        self.metrics
            .subscribe_with(&self.client, subject, options)
            .await
    }

    /// Sends a request and waits for the reply, like async-nats'
    /// `Client::request`. The reply (or the server's "no responders" status
    /// message) is counted as taken, so it does not show up in
    /// [`ClientMetrics::unforwarded_messages`]; a reply that arrives after
    /// the request timed out does. A "no responders" answer is counted in
    /// `nats_delivery_client_request_no_responders_total`.
    pub async fn request(
        &self,
        subject: impl async_nats::ToSubject,
        payload: Bytes,
    ) -> Result<async_nats::Message, Error> {
        let result = self.client.request(subject, payload).await;
        let replied = match &result {
            Ok(_) => true,
            Err(e) => e.kind() == async_nats::RequestErrorKind::NoResponders,
        };
        if let Err(e) = &result {
            if e.kind() == async_nats::RequestErrorKind::NoResponders {
                self.metrics.shared.publishes.record_no_responders();
            }
        }
        if replied {
            self.metrics
                .shared
                .taken_elsewhere
                .fetch_add(1, Ordering::AcqRel);
        }
        result.map_err(|e| Error::new(ErrorKind::Request, e))
    }
}
