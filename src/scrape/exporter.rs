//! The exporter: one `Poller` and the `Exposition` every metric is
//! encoded by, joined by single flight: scrapes that arrive while a poll is
//! under way share it, so N scrapers cost one poll and each gets its answer
//! within `--timeout` plus the encoding time. With `--reuse-poll-for`, a
//! completed poll also answers the scrapes that arrive that soon after it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::{Stream, StreamExt};
use prometheus_client::registry::Registry;

use crate::jetstream::message_timestamps::MessageTimestamps;
use crate::lock::LockOrRecover;
use crate::scrape::exposition::{Exposition, ScrapeAborted};
use crate::scrape::poller::Poller;
use crate::scrape::settings::ScrapeSettings;
use crate::scrape::snapshot::Snapshot;
use crate::sources::Fetcher;
use crate::text::Format;

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ExporterBuildError {
    /// The `--monitor-tls-ca` file could not be read.
    #[error("--monitor-tls-ca: cannot read {}: {source}", path.display())]
    MonitorTlsCa {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The `--monitor-tls-ca` file holds no certificate.
    #[error("--monitor-tls-ca: {} holds no PEM certificate", .0.display())]
    NoCertificate(std::path::PathBuf),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
}

/// A completed poll: its snapshot and when it completed.
#[derive(Debug, Clone)]
struct Polled {
    snapshot: Arc<Snapshot>,
    done: Instant,
}

type Flight = Shared<BoxFuture<'static, Polled>>;

/// The exporter: the poller, the registry that every data source's metrics
/// are encoded from, and the poll in flight.
#[derive(Debug)]
pub struct Exporter {
    poller: Arc<Poller>,
    exposition: Arc<Exposition>,
    /// The poll under way or, with `reuse_poll_for`, the last one.
    in_flight: Mutex<Option<Flight>>,
    /// `--reuse-poll-for`: zero polls on every scrape not joining one.
    reuse_poll_for: Duration,
}

/// An exporter being set up: it owns its poller and registry, so whatever
/// is added (readers, system polling, collectors) is added before the first
/// scrape by construction; [`ExporterBuilder::build`] makes the exporter.
#[derive(Debug)]
pub struct ExporterBuilder {
    poller: Poller,
    exposition: Exposition,
    reuse_poll_for: Duration,
}

impl ExporterBuilder {
    /// Starts an exporter's setup; fails only if the HTTP client cannot be made.
    pub fn new(settings: ScrapeSettings) -> Result<ExporterBuilder, ExporterBuildError> {
        // The NATS client's TLS asks rustls for the process-wide crypto
        // provider, which must be chosen when two are linked in (reqwest's
        // aws-lc-rs and async-nats' ring); an earlier choice stays.
        let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder();
        if let Some(path) = &settings.monitor_tls_ca {
            let pem = std::fs::read(path).map_err(|source| ExporterBuildError::MonitorTlsCa {
                path: path.clone(),
                source,
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_default();
            if certs.is_empty() {
                return Err(ExporterBuildError::NoCertificate(path.clone()));
            }
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let fetch = Fetcher::new(http, settings.timeout, settings.max_reply_size)
            .map_err(ExporterBuildError::HttpClient)?;
        Ok(ExporterBuilder {
            reuse_poll_for: settings.reuse_poll_for,
            poller: Poller::new(settings, fetch),
            exposition: Exposition::default(),
        })
    }

    /// Reads message timestamps through `timestamps`, so that consumer lag
    /// and age are exact for the consumers that lag most.
    pub fn read_timestamps(&mut self, timestamps: MessageTimestamps) {
        self.poller.read_timestamps(timestamps);
    }

    /// Reads streams' lost data through `reader` (needs a timestamp reader:
    /// the streams of its account are read).
    pub fn read_stream_lost(&mut self, reader: crate::jetstream::stream_lost::StreamLostReader) {
        self.registry_mut()
            .register_collector(Box::new(reader.clone()));
        self.poller.read_stream_lost(reader);
    }

    /// Polls the servers `polling` finds through the system account instead
    /// of the monitoring URLs.
    pub fn poll_through_system_account(&mut self, polling: crate::system::poll::SystemPolling) {
        self.poller.poll_through_system_account(polling);
    }

    /// The registry, for other parts of the exporter (advisory listeners,
    /// application reports) to register their metrics in.
    pub fn registry_mut(&mut self) -> &mut Registry {
        self.exposition.registry_mut()
    }

    /// The exporter, ready to scrape.
    pub fn build(self) -> Exporter {
        Exporter {
            poller: Arc::new(self.poller),
            exposition: Arc::new(self.exposition),
            in_flight: Mutex::new(None),
            reuse_poll_for: self.reuse_poll_for,
        }
    }
}

impl Exporter {
    /// An exporter with nothing added to its setup: `ExporterBuilder::new`
    /// then `build`.
    pub fn new(settings: ScrapeSettings) -> Result<Exporter, ExporterBuildError> {
        Ok(ExporterBuilder::new(settings)?.build())
    }

    /// Polls every server and source, then encodes everything registered;
    /// [`ScrapeAborted`] when the writing stopped before the end (a
    /// collector panicked), which the HTTP server answers with a broken
    /// response.
    pub async fn scrape(&self, format: Format) -> Result<String, ScrapeAborted> {
        let mut text = String::new();
        let mut chunks = std::pin::pin!(self.scrape_stream(format).await);
        while let Some(chunk) = chunks.next().await {
            text.push_str(std::str::from_utf8(&chunk?).expect("the exposition is UTF-8"));
        }
        Ok(text)
    }

    /// [`Exporter::scrape`] as consecutive chunks of the text, written while
    /// they are sent: the text is never held whole. Returns once the poll is
    /// done; the scrapers of one poll share its snapshot, each its own text.
    pub(crate) async fn scrape_stream(
        &self,
        format: Format,
    ) -> impl Stream<Item = Result<Bytes, ScrapeAborted>> + Send + 'static {
        let flight = self.join_flight();
        let polled = flight.clone().await;
        // The poll is done: unless it is to answer later scrapes, forget
        // it, so that its snapshot is freed once its last scraper has its
        // text sent.
        let mut slot = self.in_flight.lock_or_recover();
        if self.reuse_poll_for.is_zero() && slot.as_ref().is_some_and(|f| f.ptr_eq(&flight)) {
            *slot = None;
        }
        drop(slot);
        self.exposition.stream(polled.snapshot, format)
    }

    /// The poll under way, or a new one. It runs as its own task, so that a
    /// scraper that hangs up does not cancel it for the others.
    fn join_flight(&self) -> Flight {
        let mut slot = self.in_flight.lock_or_recover();
        if let Some(flight) = slot.as_ref() {
            match flight.peek() {
                None => return flight.clone(),
                Some(polled) if polled.done.elapsed() < self.reuse_poll_for => {
                    return flight.clone()
                }
                Some(_) => {}
            }
        }
        let poller = self.poller.clone();
        let task = tokio::spawn(async move {
            let snapshot = Arc::new(poller.poll().await);
            Polled {
                snapshot,
                done: Instant::now(),
            }
        });
        let flight = async move {
            task.await.unwrap_or_else(|_| Polled {
                snapshot: Arc::default(),
                done: Instant::now(),
            })
        }
        .boxed()
        .shared();
        *slot = Some(flight.clone());
        flight
    }
}
