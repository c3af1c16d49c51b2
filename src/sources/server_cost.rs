//! What the exporter costs the servers it watches: the flags that lower it,
//! and the bytes each source's reply had, measured as it arrives.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::flags::duration::{parse_duration, parse_window};

/// Flags that lower the work the servers do for the exporter.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServerCostArgs {
    /// A scrape that arrives within this long after a poll completed is
    /// answered from that poll (e.g. 10s for two Prometheus servers of an
    /// HA pair scraping every 15s): the servers are asked once, not once
    /// per scraper. 0 (the default) polls on every scrape that does not
    /// join one under way.
    #[arg(long, env = "NATS_DELIVERY_REUSE_POLL_FOR", default_value = "0", value_parser = parse_window)]
    pub(crate) reuse_poll_for: Duration,

    /// Longest time between two reads of the streams' and consumers'
    /// configuration from /jsz (`config=true`, half of its reply and of the
    /// server's work for it). Between, the configuration last read is kept;
    /// it is read again at once for an account with a new or re-created
    /// stream or consumer, and before a removal that a change could explain
    /// is counted. 0 reads it on every poll.
    #[arg(long, env = "NATS_DELIVERY_JSZ_CONFIG_INTERVAL", default_value = "5m", value_parser = parse_window)]
    pub(crate) jsz_config_interval: Duration,

    /// Deadline of a configuration read that runs beside the scrapes (the
    /// refresh, and the reads for new or re-created streams and consumers,
    /// once a server's configuration has been read): such a read never
    /// delays a scrape, so it is not bound by --timeout.
    #[arg(long, env = "NATS_DELIVERY_JSZ_CONFIG_TIMEOUT", default_value = "1m", value_parser = parse_duration)]
    pub(crate) jsz_config_timeout: Duration,
}

tokio::task_local! {
    /// The bytes of the replies of the source being polled, counted by the
    /// transport as they arrive (see [`counting_reply_bytes`]).
    static REPLY_BYTES: Arc<AtomicU64>;
}

/// Runs `poll` with every reply byte it receives counted into `bytes`.
pub(crate) async fn counting_reply_bytes<T>(
    bytes: Arc<AtomicU64>,
    poll: impl Future<Output = T>,
) -> T {
    REPLY_BYTES.scope(bytes, poll).await
}

/// Counts `n` bytes of a reply of the source being polled (nothing outside
/// [`counting_reply_bytes`]).
pub(super) fn count_reply_bytes(n: usize) {
    let _ = REPLY_BYTES.try_with(|b| b.fetch_add(n as u64, Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_are_counted_per_poll_and_only_inside_one() {
        count_reply_bytes(5);
        let (a, b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let first = counting_reply_bytes(a.clone(), async {
            count_reply_bytes(3);
            tokio::task::yield_now().await;
            count_reply_bytes(4);
        });
        let second = counting_reply_bytes(b.clone(), async { count_reply_bytes(10) });
        futures::join!(first, second);
        assert_eq!(a.load(Ordering::Relaxed), 7);
        assert_eq!(b.load(Ordering::Relaxed), 10);
    }
}
