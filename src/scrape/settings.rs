//! What the scrape engine takes from the configuration, as plain values:
//! the command line builds them in one place (`cli/settings.rs`), and a
//! program or a test can write them without flags.

use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use crate::jetstream::cardinality::series::ConsumerSeries;
use crate::sources::SourceSettings;

/// The settings of an [`Exporter`](crate::scrape::exporter::Exporter) and
/// its poller.
#[derive(Debug, Clone)]
pub struct ScrapeSettings {
    /// The monitoring URLs, one per server (none are read when polling
    /// through the system account).
    pub monitor_urls: Vec<Url>,
    /// PEM file with the CA certificates of https monitoring endpoints,
    /// besides the system's roots.
    pub monitor_tls_ca: Option<PathBuf>,
    /// Time allowed for each monitoring request, reply included.
    pub timeout: Duration,
    /// Largest monitoring reply accepted, in bytes.
    pub max_reply_size: usize,
    /// Most memory the replies of one server may keep in one poll, in bytes.
    pub max_kept_size: usize,
    /// A scrape this soon after a completed poll is answered from it; zero
    /// polls for every scrape that does not join one under way.
    pub reuse_poll_for: Duration,
    /// The sources to poll and their own settings. With
    /// `jsz_removal_check` `None`, the poller gives `/jsz` the removal
    /// count's own check.
    pub sources: SourceSettings,
    /// Span of consumer history behind the consumer status; zero turns
    /// consumer status and lag off.
    pub consumer_status_window: Duration,
    /// Message timestamps read per scrape, with a timestamp reader.
    pub consumer_timestamp_reads: u32,
    /// Which per-consumer series are written.
    pub consumer_series: ConsumerSeries,
    /// Ephemeral consumers are exported one by one instead of folded.
    pub keep_ephemeral_consumers: bool,
    /// Most JetStream series a scrape writes; `None` for no ceiling.
    pub max_jetstream_series: Option<u64>,
}
