//! The reads a poll makes through the exporter's own NATS connection (the
//! timestamp reader's): the data lost from its account's streams, and the
//! account's streams, consumers, limits and tiers.

use std::time::Instant;

use super::{unix_now, Poller};
use crate::scrape::snapshot::Snapshot;

impl Poller {
    /// The data lost from the streams of the timestamp reader's account.
    pub(super) async fn find_stream_lost(&self, snapshot: &mut Snapshot, started: Instant) {
        let (Some(reader), Some(timestamps)) = (&self.stream_lost, &self.timestamps) else {
            return;
        };
        let account = timestamps.account();
        let (streams, _) = snapshot.rows();
        let names: Vec<&str> = streams
            .iter()
            .filter(|(a, _)| *a == account)
            .map(|(_, s)| s.name.as_str())
            .collect();
        let left = self.settings.timeout.saturating_sub(started.elapsed());
        let known = reader.read(&names, left).await;
        snapshot.stream_lost = known
            .into_iter()
            .map(|(stream, lost)| (account.clone(), stream, lost))
            .collect();
    }

    /// The streams and consumers of the timestamp reader's account, and
    /// their limits.
    pub(super) async fn read_account_counts(&self, snapshot: &mut Snapshot, started: Instant) {
        let Some(timestamps) = &self.timestamps else {
            return;
        };
        let left = self.settings.timeout.saturating_sub(started.elapsed());
        let (client, account) = (timestamps.client(), timestamps.account());
        let counts = crate::jetstream::account_info::read(&client, &account, left).await;
        if let Some(c) = &counts {
            snapshot.account_tiers = self.tier_rates.update(&c.account, &c.tiers, unix_now());
        }
        snapshot.account_counts = counts;
    }
}
