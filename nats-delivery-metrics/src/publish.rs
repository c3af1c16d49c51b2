//! JetStream publishing that counts every outcome: stored, duplicate, or
//! why not.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_nats::jetstream::context::{PublishAckFuture, PublishError};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::Context;
use bytes::Bytes;

use crate::state::Shared;
use crate::{ClientMetrics, Error, ErrorKind, InstrumentedClient, PublishFailure};

/// A JetStream context whose publishes are counted: acknowledged as stored,
/// acknowledged as duplicates, or failed by [`PublishFailure`]
/// (`nats_delivery_client_jetstream_published_messages_total`,
/// `_publish_duplicates_total`, `_publish_failures_total{reason}`).
///
/// Its methods have async-nats' signatures: a publish returns a
/// [`PendingPublishAck`] once sent, and awaiting it gives the server's
/// answer. Every publish is counted once, when its answer is known; one
/// whose futures are dropped before that counts as
/// [`PublishFailure::Abandoned`].
///
/// ```no_run
/// # async fn run(client: nats_delivery_metrics::InstrumentedClient)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// use nats_delivery_metrics::PublishFailure;
/// let jetstream = client.jetstream();
/// match jetstream.publish("orders.new", "order 1".into()).await?.await {
///     Ok(ack) => println!("stored as {}", ack.sequence),
///     // Counted under its reason already; tell the caller too.
///     Err(e) => println!("not stored ({}): {e}", PublishFailure::of(&e).label()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct InstrumentedJetStream {
    context: Context,
    shared: Arc<Shared>,
}

impl InstrumentedClient {
    /// A JetStream context with async-nats' defaults on this connection,
    /// whose publishes are counted.
    pub fn jetstream(&self) -> InstrumentedJetStream {
        let context = async_nats::jetstream::new(self.client().clone());
        InstrumentedJetStream::start(self.metrics(), context)
    }
}

impl ClientMetrics {
    /// Counts the publishes of `context` (a timeout or domain of your
    /// choice). Fails with [`ErrorKind::OtherConnection`] if `context` uses
    /// another connection than these metrics.
    pub fn jetstream_publisher(&self, context: Context) -> Result<InstrumentedJetStream, Error> {
        if !self.shared.bind(&context.client()) {
            return Err(Error::new(
                ErrorKind::OtherConnection,
                "these metrics belong to another connection; use one ClientMetrics per connection",
            ));
        }
        Ok(InstrumentedJetStream::start(self, context))
    }
}

impl InstrumentedJetStream {
    fn start(metrics: &ClientMetrics, context: Context) -> Self {
        metrics.shared.publishes.enable_publishing();
        InstrumentedJetStream {
            context,
            shared: metrics.shared.clone(),
        }
    }

    /// The async-nats context, for everything but publishing.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Publishes `payload` to `subject`, like async-nats'
    /// `Context::publish`.
    pub async fn publish(
        &self,
        subject: impl async_nats::subject::ToSubject,
        payload: Bytes,
    ) -> Result<PendingPublishAck, PublishError> {
        self.send_publish(subject, PublishMessage::build().payload(payload))
            .await
    }

    /// Publishes `payload` with `headers`, like async-nats'
    /// `Context::publish_with_headers`.
    pub async fn publish_with_headers(
        &self,
        subject: impl async_nats::subject::ToSubject,
        headers: async_nats::HeaderMap,
        payload: Bytes,
    ) -> Result<PendingPublishAck, PublishError> {
        let message = PublishMessage::build().payload(payload).headers(headers);
        self.send_publish(subject, message).await
    }

    /// Publishes `message` (message id, expected last sequence, ...), like
    /// async-nats' `Context::send_publish`. A publish that cannot be sent is
    /// counted at once and its error returned.
    pub async fn send_publish(
        &self,
        subject: impl async_nats::subject::ToSubject,
        message: PublishMessage,
    ) -> Result<PendingPublishAck, PublishError> {
        let outcome = Outcome(Some(self.shared.clone()));
        match self.context.send_publish(subject, message).await {
            Ok(future) => Ok(PendingPublishAck { future, outcome }),
            Err(e) => {
                outcome.not_sent(&e);
                Err(e)
            }
        }
    }
}

/// A sent publish whose answer has not been read yet; await it for the
/// answer, which is counted then.
#[derive(Debug)]
pub struct PendingPublishAck {
    future: PublishAckFuture,
    outcome: Outcome,
}

impl IntoFuture for PendingPublishAck {
    type Output = Result<PublishAck, PublishError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        let PendingPublishAck { future, outcome } = self;
        Box::pin(async move {
            let answer = future.await;
            outcome.answered(&answer);
            answer
        })
    }
}

/// Counts one publish exactly once: by its answer, or as abandoned when
/// dropped before the answer was known.
#[derive(Debug)]
struct Outcome(Option<Arc<Shared>>);

impl Outcome {
    fn answered(mut self, answer: &Result<PublishAck, PublishError>) {
        if let Some(shared) = self.0.take() {
            if shared.publishes.record_answer(answer) {
                // The reply was read by the connection and handed to us, not
                // to a subscription: keep the connection audit at 0.
                shared.taken_elsewhere.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    fn not_sent(mut self, error: &PublishError) {
        if let Some(shared) = self.0.take() {
            shared.publishes.record_failure(PublishFailure::of(error));
        }
    }
}

impl Drop for Outcome {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.publishes.record_failure(PublishFailure::Abandoned);
        }
    }
}
