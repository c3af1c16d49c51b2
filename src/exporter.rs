//! The exporter: one [`Poller`] and the registry every metric is encoded
//! from, joined by single flight: scrapes that arrive while a poll is under
//! way share it (and its encoding), so N scrapers cost one poll and each gets
//! its answer within `--timeout` plus the encoding time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use prometheus_client::registry::Registry;

use crate::cardinality::fold::EPHEMERAL_LABEL;
use crate::config::Config;
use crate::consumer_text::ConsumerLabels;
use crate::message_timestamps::MessageTimestamps;
use crate::poller::Poller;
use crate::snapshot::{write_consumer_part, Snapshot, SnapshotCollector, CONSUMER_PARTS};
use crate::sources::Fetcher;

/// The exposition format a scraper asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Classic,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
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

/// One poll and the text encoded from it, shared by every scrape that joined it.
#[derive(Debug)]
struct Round {
    /// Until the first encoding of this round is done.
    snapshot: Mutex<Option<Arc<Snapshot>>>,
    classic: tokio::sync::OnceCell<Arc<[Bytes]>>,
    open_metrics: tokio::sync::OnceCell<Arc<[Bytes]>>,
}

type Flight = Shared<BoxFuture<'static, Arc<Round>>>;

/// The exporter: the poller, the registry that every data source's metrics
/// are encoded from, and the poll in flight.
#[derive(Debug)]
pub struct Exporter {
    poller: Arc<Poller>,
    exposition: Arc<Exposition>,
    in_flight: Mutex<Option<Flight>>,
}

impl Exporter {
    /// Builds the exporter; fails only if the HTTP client cannot be made.
    pub fn new(config: Config) -> Result<Exporter, SetupError> {
        // The NATS client's TLS asks rustls for the process-wide crypto
        // provider, which must be chosen when two are linked in (reqwest's
        // aws-lc-rs and async-nats' ring); an earlier choice stays.
        let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder();
        if let Some(path) = &config.monitor_tls_ca {
            let pem = std::fs::read(path).map_err(|source| SetupError::MonitorTlsCa {
                path: path.clone(),
                source,
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_default();
            if certs.is_empty() {
                return Err(SetupError::NoCertificate(path.clone()));
            }
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let fetch = Fetcher::new(http, config.timeout, config.max_reply_size)
            .map_err(SetupError::HttpClient)?;
        Ok(Exporter {
            poller: Arc::new(Poller::new(config, fetch)),
            exposition: Arc::new(Exposition::new()),
            in_flight: Mutex::new(None),
        })
    }

    /// Reads message timestamps through `timestamps` from now on, so that
    /// consumer lag and age are exact for the consumers that lag most.
    pub fn read_timestamps(&mut self, timestamps: MessageTimestamps) {
        Arc::get_mut(&mut self.poller)
            .expect("the reader is given before the first scrape")
            .read_timestamps(timestamps);
    }

    /// The registry, for other parts of the exporter (advisory listeners,
    /// application reports) to register their metrics in before serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut Arc::get_mut(&mut self.exposition)
            .expect("metrics are registered before the first scrape")
            .registry
    }

    /// Polls every server and source, then encodes everything registered.
    pub async fn scrape(&self, format: Format) -> String {
        let parts = self.scrape_parts(format).await;
        let mut text = String::with_capacity(parts.iter().map(Bytes::len).sum());
        for part in parts.iter() {
            text.push_str(std::str::from_utf8(part).expect("the exposition is UTF-8"));
        }
        text
    }

    /// [`Exporter::scrape`] as consecutive parts of the text, to be sent one
    /// after the other without first joining megabytes into one buffer.
    pub async fn scrape_parts(&self, format: Format) -> Arc<[Bytes]> {
        let flight = self.join_flight();
        let round = flight.clone().await;
        let cell = match format {
            Format::Classic => &round.classic,
            Format::OpenMetrics => &round.open_metrics,
        };
        let parts = cell
            .get_or_init(|| async {
                let kept = round.snapshot.lock().expect("snapshot lock").clone();
                // A scraper asking for the other format after the snapshot
                // was let go polls again rather than keep every snapshot.
                let snapshot = match kept {
                    Some(snapshot) => snapshot,
                    None => Arc::new(self.poller.poll().await),
                };
                let exposition = self.exposition.clone();
                // Encoding is synchronous and takes long at many consumers:
                // it runs off the async workers.
                tokio::task::spawn_blocking(move || exposition.encode(&snapshot, format))
                    .await
                    .expect("encoding does not panic")
            })
            .await
            .clone();
        // Encoded: the parsed replies are not needed while the text is sent.
        round.snapshot.lock().expect("snapshot lock").take();
        // The round is done: forget it so that its snapshot and text are
        // freed once its last scraper has them sent.
        let mut slot = self.in_flight.lock().expect("flight lock");
        if slot.as_ref().is_some_and(|f| f.ptr_eq(&flight)) {
            *slot = None;
        }
        parts
    }

    /// The poll under way, or a new one. It runs as its own task, so that a
    /// scraper that hangs up does not cancel it for the others.
    fn join_flight(&self) -> Flight {
        let mut slot = self.in_flight.lock().expect("flight lock");
        if let Some(flight) = slot.as_ref() {
            if flight.peek().is_none() {
                return flight.clone();
            }
        }
        let poller = self.poller.clone();
        let task = tokio::spawn(async move { poller.poll().await });
        let flight = async move {
            let snapshot = task.await.unwrap_or_default();
            Arc::new(Round {
                snapshot: Mutex::new(Some(Arc::new(snapshot))),
                classic: tokio::sync::OnceCell::new(),
                open_metrics: tokio::sync::OnceCell::new(),
            })
        }
        .boxed()
        .shared();
        *slot = Some(flight.clone());
        flight
    }
}

/// The registry, the collector that writes a snapshot's main part into it,
/// and what the per-consumer parts are written with.
#[derive(Debug)]
struct Exposition {
    registry: Registry,
    snapshot: Arc<SnapshotCollector>,
    /// The collector reads one snapshot slot: one encoding at a time.
    encoding: Mutex<()>,
    /// Size of each part of the last exposition (the registry's, then the
    /// per-consumer ones), to size the next one's buffers and order its work.
    part_sizes: Vec<AtomicUsize>,
}

impl Exposition {
    fn new() -> Exposition {
        let snapshot = Arc::new(SnapshotCollector::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(snapshot.clone()));
        Exposition {
            registry,
            snapshot,
            encoding: Mutex::new(()),
            part_sizes: (0..=CONSUMER_PARTS).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Encodes `snapshot` and everything else registered, as parts in output order.
    fn encode(&self, snapshot: &Arc<Snapshot>, format: Format) -> Arc<[Bytes]> {
        let _one_at_a_time = self.encoding.lock().expect("encoding lock");
        self.snapshot.set(snapshot.clone());
        let mut parts = self.encode_parts(snapshot, format);
        self.snapshot.clear();
        for (part, size) in parts.iter().zip(&self.part_sizes) {
            size.store(part.len(), Ordering::Relaxed);
        }
        if format == Format::OpenMetrics {
            parts.push("# EOF\n".to_string());
        }
        parts.into_iter().map(Bytes::from).collect()
    }

    /// Encodes the registry and writes each per-consumer family, spread over
    /// the machine's cores (at 10,000 consumers the families are most of the
    /// encoding work); the parts come back in output order.
    fn encode_parts(&self, snapshot: &Snapshot, format: Format) -> Vec<String> {
        let (_, consumers) = snapshot.rows();
        // Every per-consumer family repeats each consumer's labels: rendered once.
        let mut labels = ConsumerLabels::new(&consumers);
        for f in &snapshot.folded {
            labels.push(&f.account, &f.stream, EPHEMERAL_LABEL);
        }
        let size = |i: usize| self.part_sizes[i].load(Ordering::Relaxed);
        // Largest first (by the last scrape), so that no thread is left
        // writing the biggest family (consumer status) alone at the end.
        let mut order: Vec<usize> = (0..=CONSUMER_PARTS).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(size(i)));
        let done: Vec<Mutex<String>> = order.iter().map(|_| Mutex::default()).collect();
        let next = AtomicUsize::new(0);
        let work = || loop {
            let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                return;
            };
            // Sized from the last scrape: megabytes grown by doubling would be copied several times.
            let hint = size(i) * 9 / 8;
            let text = match i.checked_sub(1) {
                None => encode_registry(&self.registry, format, hint),
                Some(part) => {
                    let mut out = String::with_capacity(hint);
                    let rows = (consumers.as_slice(), &labels);
                    write_consumer_part(&mut out, format, snapshot, rows, part);
                    out
                }
            };
            *done[i].lock().expect("part lock") = text;
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
        done.into_iter()
            .map(|m| m.into_inner().expect("part lock"))
            .collect()
    }
}

/// Encodes one registry without the OpenMetrics `# EOF`, which the caller
/// adds once after joining the parts.
pub(crate) fn encode_registry(registry: &Registry, format: Format, capacity: usize) -> String {
    let mut out = String::with_capacity(capacity);
    let written = match format {
        Format::Classic => prometheus_client::encoding::prometheus_text::encode(&mut out, registry),
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_registry(&mut out, registry)
        }
    };
    // Writing into a String cannot fail; an error here would be a bug in an encoder.
    written.expect("encoding metrics into a String");
    out
}
