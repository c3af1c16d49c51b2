//! Polls every configured server on each scrape and encodes the result.
//!
//! Polling happens when Prometheus scrapes (as the Prometheus guidelines for
//! exporters recommend): the numbers are as fresh as the scrape, and a source
//! that fails or hangs is reported down within the per-request timeout while
//! every other source is still served.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use futures::future::join_all;
use prometheus_client::registry::Registry;
use url::Url;

use crate::config::{Config, Source};
use crate::error::PollError;
use crate::redact::redacted;
use crate::snapshot::{Snapshot, SnapshotCollector, SourceHealth, TargetSnapshot};
use crate::sources::connz::{self, ClosedTracker};
use crate::sources::{endpoint_url, jsz, Fetcher};

/// One monitoring URL and what the exporter remembers about it between scrapes.
#[derive(Debug)]
struct Target {
    url: Url,
    /// The `server` label until the server's name is known, and whenever two
    /// targets would otherwise share one: `host:port`, plus the base path when
    /// another target has the same `host:port`.
    identity: String,
    /// Size of the last /jsz page, to size the next one's buffer.
    jsz_size: AtomicUsize,
    state: Mutex<TargetState>,
}

#[derive(Debug, Default)]
struct TargetState {
    server_name: Option<String>,
    max_pending: Option<i64>,
    closed: ClosedTracker,
    last_success: BTreeMap<Source, f64>,
    errors: BTreeMap<Source, BTreeMap<&'static str, u64>>,
}

/// The exposition format a scraper asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Classic,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

/// The exporter: configuration, HTTP client, targets and the registry that
/// every data source's metrics are encoded from.
#[derive(Debug)]
pub struct Exporter {
    config: Config,
    fetch: Fetcher,
    targets: Vec<Target>,
    registry: Registry,
    /// One registry per per-consumer family, encoded in parallel with `registry`.
    family_registries: Vec<Registry>,
    snapshot: Arc<SnapshotCollector>,
    scrape_lock: tokio::sync::Mutex<()>,
    /// Size of each part of the last exposition, to size the next one's buffers.
    part_sizes: Vec<AtomicUsize>,
}

impl Exporter {
    /// Builds the exporter; fails only if the HTTP client cannot be made.
    pub fn new(config: Config) -> anyhow::Result<Exporter> {
        // The NATS client's TLS asks rustls for the process-wide crypto
        // provider, which must be chosen when two are linked in (reqwest's
        // aws-lc-rs and async-nats' ring); an earlier choice stays.
        let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder();
        if let Some(path) = &config.monitor_tls_ca {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read --monitor-tls-ca {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_default();
            anyhow::ensure!(
                !certs.is_empty(),
                "--monitor-tls-ca {} holds no PEM certificate",
                path.display()
            );
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let fetch = Fetcher::new(http, config.timeout, config.max_reply_size)?;
        let targets = config
            .monitor_urls
            .iter()
            .map(|url| Target {
                identity: identity(url, &config.monitor_urls),
                url: url.clone(),
                jsz_size: AtomicUsize::new(0),
                state: Mutex::default(),
            })
            .collect();
        let mut parts = SnapshotCollector::parts().into_iter();
        let snapshot = Arc::new(parts.next().expect("the main part"));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(snapshot.clone()));
        let family_registries: Vec<Registry> = parts
            .map(|part| {
                let mut r = Registry::default();
                r.register_collector(Box::new(part));
                r
            })
            .collect();
        let part_sizes = (0..=family_registries.len())
            .map(|_| AtomicUsize::new(0))
            .collect();
        Ok(Exporter {
            config,
            fetch,
            targets,
            registry,
            family_registries,
            snapshot,
            scrape_lock: tokio::sync::Mutex::new(()),
            part_sizes,
        })
    }

    /// The registry, for other parts of the exporter (advisory listeners,
    /// application reports) to register their metrics in before serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Polls every server and source, then encodes everything registered.
    pub async fn scrape(&self, format: Format) -> String {
        self.scrape_parts(format).await.concat()
    }

    /// [`Exporter::scrape`] as consecutive parts of the text, to be sent
    /// one after the other without first joining megabytes into one buffer.
    pub async fn scrape_parts(&self, format: Format) -> Vec<String> {
        // One scrape at a time: two scrapers must not double the load on the
        // servers, and the snapshot encoded is the one this scrape polled.
        let _guard = self.scrape_lock.lock().await;
        let mut targets = join_all(self.targets.iter().map(|t| self.poll_target(t))).await;
        distinct_server_labels(&mut targets, &self.targets);
        self.snapshot.set(Snapshot { targets });
        let mut parts = self.encode_parts(format);
        // The parsed replies are not needed past the encoding.
        self.snapshot.clear();
        for (part, size) in parts.iter().zip(&self.part_sizes) {
            size.store(part.len(), Ordering::Relaxed);
        }
        if format == Format::OpenMetrics {
            parts.push("# EOF\n".to_string());
        }
        parts
    }

    /// Encodes the main registry and each per-consumer family's registry,
    /// spread over the machine's cores (at 10,000 consumers the families are
    /// most of the encoding work); the parts come back in output order.
    fn encode_parts(&self, format: Format) -> Vec<String> {
        let registries: Vec<&Registry> = std::iter::once(&self.registry)
            .chain(&self.family_registries)
            .collect();
        let done: Vec<Mutex<String>> = registries.iter().map(|_| Mutex::default()).collect();
        let next = AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(registry) = registries.get(i) else {
                return;
            };
            // Sized from the last scrape: megabytes grown by doubling would be copied several times.
            let hint = self.part_sizes[i].load(Ordering::Relaxed) * 9 / 8;
            *done[i].lock().expect("part lock") = encode(registry, format, hint);
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

    async fn poll_target(&self, target: &Target) -> TargetSnapshot {
        let cfg = &self.config;
        let known_closed = target.state.lock().expect("target lock").closed.known();
        let varz = timed(cfg.polls(Source::Varz), cfg.timeout, async {
            self.fetch
                .get_json::<crate::sources::varz::Varz>(endpoint_url(&target.url, "varz", &[]))
                .await
        });
        let connz = timed(cfg.polls(Source::Connz), cfg.timeout, async {
            let top = connz::poll_top_pending(&self.fetch, &target.url, cfg.connz_top).await?;
            let closed = connz::poll_closed(&self.fetch, &target.url, known_closed).await?;
            Ok((top, closed))
        });
        let jsz = timed(cfg.polls(Source::Jsz), cfg.timeout, async {
            jsz::poll(
                &self.fetch,
                &target.url,
                cfg.jsz_page_size,
                &target.jsz_size,
            )
            .await
        });
        let (varz, connz, jsz) = tokio::join!(varz, connz, jsz);

        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let mut state = target.state.lock().expect("target lock");
        let mut snap = TargetSnapshot::default();
        if let Some((Ok(v), _)) = &varz {
            if let Some(name) = v.server_label() {
                state.server_name = Some(name.to_string());
            }
            if v.max_pending.is_some() {
                state.max_pending = v.max_pending;
            }
        }
        snap.server = state
            .server_name
            .clone()
            .unwrap_or_else(|| target.identity.clone());
        snap.server_name = state.server_name.clone();
        snap.max_pending = state.max_pending;
        let mut record = |source: Source, ok: Result<(), &PollError>, took: Duration| {
            if let Err(e) = ok {
                tracing::warn!(target = %redacted(&target.url), source = source.as_str(), error = %e, "poll failed");
                *state
                    .errors
                    .entry(source)
                    .or_default()
                    .entry(e.kind())
                    .or_insert(0) += 1;
            } else {
                state.last_success.insert(source, now);
            }
            snap.health.push(SourceHealth {
                source,
                up: ok.is_ok(),
                duration: took.as_secs_f64(),
                last_success: state.last_success.get(&source).copied(),
                errors: state.errors.get(&source).cloned().unwrap_or_default(),
            });
        };
        if let Some((result, took)) = varz {
            record(Source::Varz, result.as_ref().map(|_| ()), took);
            snap.varz = result.ok();
        }
        let mut closed_poll = None;
        if let Some((result, took)) = connz {
            record(Source::Connz, result.as_ref().map(|_| ()), took);
            if let Ok((top, closed)) = result {
                snap.top_pending = Some(top);
                closed_poll = Some(closed);
            }
        }
        if let Some((result, took)) = jsz {
            record(Source::Jsz, result.as_ref().map(|_| ()), took);
            snap.jsz = result.ok();
        }
        if let Some(closed) = closed_poll {
            state
                .closed
                .apply(closed, &snap.server, cfg.max_client_names);
        }
        snap.closed = state.closed.counts.clone();
        snap
    }
}

/// Encodes one registry without the OpenMetrics `# EOF`, which the caller
/// adds once after joining the parts.
fn encode(registry: &Registry, format: Format, capacity: usize) -> String {
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

/// Runs `poll` when `enabled`, bounded by `timeout`, and measures it.
async fn timed<T>(
    enabled: bool,
    timeout: Duration,
    poll: impl Future<Output = Result<T, PollError>>,
) -> Option<(Result<T, PollError>, Duration)> {
    if !enabled {
        return None;
    }
    let start = Instant::now();
    let result = match tokio::time::timeout(timeout, poll).await {
        Ok(r) => r,
        Err(_) => Err(PollError::Timeout(timeout)),
    };
    Some((result, start.elapsed()))
}

/// A target's own label: `host:port`, with the base path when another
/// monitoring URL shares that `host:port` (never credentials).
fn identity(url: &Url, all: &[Url]) -> String {
    let shared = all
        .iter()
        .filter(|u| authority(u) == authority(url))
        .count()
        > 1;
    let path = url.path().trim_end_matches('/');
    if shared && !path.is_empty() {
        format!("{}{path}", authority(url))
    } else {
        authority(url)
    }
}

/// Two URLs that reach the same server (through two proxies, say) would
/// report the same `server` name and so emit the same series twice: such
/// targets are labelled by their own identity instead.
fn distinct_server_labels(snaps: &mut [TargetSnapshot], targets: &[Target]) {
    let mut uses: BTreeMap<String, usize> = BTreeMap::new();
    for s in snaps.iter() {
        *uses.entry(s.server.clone()).or_default() += 1;
    }
    for (snap, target) in snaps.iter_mut().zip(targets) {
        if uses[&snap.server] > 1 && snap.server != target.identity {
            let label = target.identity.clone();
            snap.closed = std::mem::take(&mut snap.closed)
                .into_iter()
                .map(|(mut k, n)| {
                    if k.server == snap.server {
                        k.server = label.clone();
                    }
                    (k, n)
                })
                .collect();
            snap.server = label;
        }
    }
}

/// `host:port` of a URL.
fn authority(url: &Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        _ => url.to_string(),
    }
}
