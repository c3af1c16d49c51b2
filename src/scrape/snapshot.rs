//! What one scrape saw, and the collector that encodes it. Polling fills a
//! [`Snapshot`]; [`SnapshotCollector::encode`] only reads it (no I/O).

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::jetstream::account_info::AccountCounts;
use crate::jetstream::account_tiers::TierFigures;
use crate::jetstream::cardinality::budget::{self, plan, priority, BudgetReport};
use crate::jetstream::cardinality::fold::{is_ephemeral, EphemeralFolds, FoldedRow};
use crate::jetstream::cardinality::series::ConsumerSeries;
use crate::jetstream::consumer_health::encode::{
    health_series, write_health_family, HEALTH_FAMILY_COUNT,
};
use crate::jetstream::consumer_health::ConsumerHealthRow;
use crate::jetstream::jsz_families;
use crate::jetstream::leaderless::{Held, LastLed};
use crate::jetstream::origin_gaps::{GapKey, Gaps};
use crate::jetstream::stream_lost::LostData;
use crate::lock::LockOrRecover;
use crate::sources::jsz;
use crate::sources::TargetSnapshot;
use crate::system::poll::SurveyReport;
use crate::text::consumer_labels::ConsumerLabelText;
use crate::text::families::{counter_family, gauge_family};
use crate::text::Format;

/// Everything one scrape saw, finished: the leader of each stream and
/// consumer is chosen once here, not by every part of the exposition.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// One per monitoring URL.
    pub(crate) targets: Vec<TargetSnapshot>,
    /// The streams and consumers to export, from their leaders.
    leaders: jsz::Leaders,
    /// Each exported consumer's health, in the order of [`Snapshot::rows`];
    /// empty when consumer health is off.
    pub(crate) consumer_health: Vec<ConsumerHealthRow>,
    /// Each stream's ephemeral consumers, summed; empty when they are kept.
    pub(crate) folded: Vec<FoldedRow>,
    /// What `--max-jetstream-series` left out; `None` when there is no ceiling.
    pub(crate) budget: Option<BudgetReport>,
    /// The system-account survey's accounting; `None` when polling the
    /// monitoring URLs.
    pub(crate) survey: Option<SurveyReport>,
    /// Lost data of the streams read so far (account, stream, lost).
    pub(crate) stream_lost: Vec<(String, String, LostData)>,
    /// The streams and consumers of the timestamp reader's account.
    pub(crate) account_counts: Option<AccountCounts>,
    /// Its tiers, when tiered.
    pub(crate) account_tiers: Vec<TierFigures>,
    /// Each account's distinct streams and consumers over every server's
    /// `/jsz` lists, by account name.
    account_assets: std::collections::BTreeMap<String, (u64, u64)>,
    /// Each account's JWT limits (operator mode), by account name, from
    /// the first server that gave them.
    account_jwts: std::collections::BTreeMap<String, jsz::account_jwts::JwtLimits>,
    /// What each countable mirror and source skipped, so far.
    pub(crate) origin_gaps: Vec<(GapKey, Gaps)>,
    /// Seconds until each origin's limits remove what its mirror or source
    /// has not copied, where one poll shows both.
    pub(crate) origin_forecasts: Vec<(GapKey, f64)>,
    /// Which per-consumer series are written.
    pub(crate) series: ConsumerSeries,
    /// Streams and consumers written from their last leader's figures.
    held: Held,
}

impl Snapshot {
    /// Each server's `/jsz` poll with the name its leader entries carry.
    fn named_polls(&self) -> Vec<Option<(Option<&str>, &jsz::JszPoll)>> {
        named_polls(&self.targets)
    }

    /// The snapshot of `targets`, with leaders chosen.
    pub(crate) fn finished(targets: Vec<TargetSnapshot>) -> Snapshot {
        let names: Vec<&str> = targets.iter().filter_map(leader_name).collect();
        let leaders = jsz::select_leaders(&named_polls(&targets), &names);
        let listed = targets.iter().filter_map(|t| t.jsz.as_ref());
        let account_assets =
            jsz::account_assets::count(listed.clone().map(|j| &j.account_assets[..]));
        let mut account_jwts = std::collections::BTreeMap::new();
        for (name, limits) in listed.flat_map(|j| &j.account_jwts) {
            account_jwts
                .entry(name.clone())
                .or_insert_with(|| limits.clone());
        }
        Snapshot {
            targets,
            leaders,
            consumer_health: Vec::new(),
            folded: Vec::new(),
            budget: None,
            survey: None,
            stream_lost: Vec::new(),
            account_counts: None,
            account_tiers: Vec::new(),
            account_assets,
            account_jwts,
            origin_gaps: Vec::new(),
            origin_forecasts: Vec::new(),
            series: ConsumerSeries::default(),
            held: Held::default(),
        }
    }

    /// Records what the leaders gave in `last` (at exporter time `now`) and
    /// adds the rows of groups without a leader from it; call it before
    /// anything else reads the rows.
    pub(crate) fn hold_leaderless(&mut self, last: &mut LastLed, now: f64) {
        let held = {
            let polls: Vec<_> = self.targets.iter().map(|t| t.jsz.as_ref()).collect();
            let none = jsz::HeldRows::default();
            let led = self.leaders.each_row(&polls, &none);
            let (orphan_streams, orphan_consumers) = self.leaders.orphans(&polls);
            last.update(led, (&orphan_streams, &orphan_consumers), now)
        };
        self.leaders.hold(held.streams.len(), held.consumers.len());
        self.held = held;
    }

    /// How many rows of [`Snapshot::rows`] come from the polls (the first
    /// ones, before the budget puts them in another order); the rest are held.
    pub(crate) fn led(&self) -> (usize, usize) {
        self.leaders.led()
    }

    /// Keeps the JetStream series under `limit`, see [`crate::jetstream::cardinality::budget`];
    /// call it once consumer health is known. Over the limit, the consumers
    /// (and their health) are put in priority order.
    pub(crate) fn apply_budget(&mut self, limit: u64) {
        let (streams, consumers) = self.rows();
        let series = &self.series;
        let fixed = streams
            .iter()
            .map(|(_, s)| jsz_families::stream_series(s))
            .sum::<u64>()
            + self.folded.len() as u64 * jsz_families::folded_series(series)
            + crate::jetstream::replicas::series(&self.named_polls())
            + self.held.series()
            + self.origin_forecasts.len() as u64;
        let detail: Vec<u64> = consumers
            .iter()
            .map(|(_, _, c, now)| jsz_families::consumer_series(c, *now, series))
            .collect();
        let health: Vec<u64> = (self.consumer_health.iter())
            .map(|h| health_series(h, series))
            .collect();
        // Within the ceiling nothing moves: the consumers are not sorted.
        let wanted = fixed + detail.iter().sum::<u64>() + health.iter().sum::<u64>();
        let order = if wanted > limit {
            priority(&consumers)
        } else {
            (0..consumers.len()).collect()
        };
        let plan = plan(limit, fixed, order, &detail, &health);
        if plan.report.wanted > limit {
            self.leaders.reorder_consumers(&plan.order, plan.keep);
            if !self.consumer_health.is_empty() {
                let health = &self.consumer_health;
                let kept = plan.order[..plan.keep_health].iter().map(|&i| health[i]);
                self.consumer_health = kept.collect();
            }
        }
        self.budget = Some(plan.report);
    }

    /// Folds the ephemeral consumers into one row per stream, remembered in
    /// `folds`, and takes them out of [`Snapshot::rows`] (and so out of
    /// consumer health).
    pub(crate) fn fold_ephemerals(&mut self, folds: &mut EphemeralFolds) {
        let (streams, consumers) = self.rows();
        let keep: Vec<bool> = consumers.iter().map(|r| !is_ephemeral(r.2)).collect();
        let ephemerals: Vec<_> = consumers.iter().filter(|r| is_ephemeral(r.2)).collect();
        let folded = folds.update(&streams, &ephemerals);
        self.leaders.retain_consumers(&keep);
        self.folded = folded;
    }

    /// The streams and consumers to export, each from its leader.
    pub(crate) fn rows(&self) -> (Vec<jsz::StreamRow<'_>>, Vec<jsz::ConsumerRow<'_>>) {
        let polls: Vec<_> = self.targets.iter().map(|t| t.jsz.as_ref()).collect();
        self.leaders.rows(&polls, &self.held.rows())
    }
}

/// How many per-consumer parts of the exposition follow the main one (the
/// collector's): one per family, the /jsz ones then the health ones. The
/// exporter writes the parts on several threads and joins the text in order.
pub(crate) const CONSUMER_PARTS: usize = jsz_families::CONSUMER_FAMILY_COUNT + HEALTH_FAMILY_COUNT;

/// Appends per-consumer part `index` (below [`CONSUMER_PARTS`]) of `snap`
/// for the consumers in `block`: `consumers` are all of them, with their
/// rendered `labels`, followed by those of the folded ephemerals, which
/// are written with the last block. Written block by block, a family's text
/// is its blocks' text in order, each block's starting with the family's
/// header lines.
pub(crate) fn write_consumer_part(
    out: &mut String,
    format: Format,
    snap: &Snapshot,
    (consumers, labels): (&[jsz::ConsumerRow], &ConsumerLabelText),
    (index, block): (usize, Range<usize>),
) {
    let block_labels = labels.from(block.start);
    match index.checked_sub(jsz_families::CONSUMER_FAMILY_COUNT) {
        None => {
            // The folded ephemerals follow the last block's consumers.
            let last = block.end == consumers.len();
            let folded = if last { snap.folded.as_slice() } else { &[] };
            let rows = (&consumers[block], folded);
            let family = (index, &snap.series);
            jsz_families::write_consumer_family(out, format, rows, block_labels, family)
        }
        Some(i) => {
            // Health is known for the first `consumer_health.len()` consumers.
            let health = &snap.consumer_health;
            let known = block.start.min(health.len())..block.end.min(health.len());
            write_health_family(out, format, block_labels, &health[known], (i, &snap.series))
        }
    }
}

/// A collector registered once; the scrape hands it each new snapshot. It
/// writes the main part: health, every source's families, and streams.
#[derive(Debug, Default)]
pub(crate) struct SnapshotCollector {
    latest: Mutex<Option<Arc<Snapshot>>>,
}

impl SnapshotCollector {
    /// Makes `snapshot` the one the next encode writes.
    pub(crate) fn set(&self, snapshot: Arc<Snapshot>) {
        *self.latest.lock_or_recover() = Some(snapshot);
    }

    /// Frees the snapshot once it is written.
    pub(crate) fn clear(&self) {
        *self.latest.lock_or_recover() = None;
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let Some(snap) = self.latest.lock_or_recover().clone() else {
            return Ok(());
        };
        let (streams, _) = snap.rows();
        encode_health(&mut enc, &snap)?;
        if let Some(survey) = &snap.survey {
            crate::system::poll::report::encode(&mut enc, survey)?;
        }
        crate::sources::encode_sources(&mut enc, &snap.targets)?;
        if let Some(report) = &snap.budget {
            budget::encode(&mut enc, report)?;
        }
        jsz_families::encode_streams(&mut enc, &streams)?;
        snap.held.encode(&mut enc)?;
        crate::jetstream::replicas::encode(&mut enc, &snap.named_polls())?;
        crate::jetstream::origin_gaps::encode(&mut enc, &snap.origin_gaps)?;
        crate::jetstream::origin_forecast::encode(&mut enc, &snap.origin_forecasts)?;
        crate::jetstream::stream_lost::encode(&mut enc, &snap.stream_lost)?;
        let counts = crate::jetstream::account_info::merged(
            snap.account_counts.as_ref(),
            &snap.account_assets,
            &snap.account_jwts,
        );
        crate::jetstream::account_info::encode(&mut enc, &counts)?;
        let reader =
            (snap.account_counts.as_ref()).map(|c| (c.account.as_str(), &snap.account_tiers[..]));
        crate::jetstream::account_tiers::encode(&mut enc, reader, &snap.account_jwts)?;
        Ok(())
    }
}

fn named_polls(targets: &[TargetSnapshot]) -> Vec<Option<(Option<&str>, &jsz::JszPoll)>> {
    (targets.iter())
        .map(|t| t.jsz.as_ref().map(|j| (leader_name(t), j)))
        .collect()
}

/// The name clustered streams and consumers give as their leader: the
/// server_name from this scrape's /varz or, when /varz failed, the last known.
fn leader_name(t: &TargetSnapshot) -> Option<&str> {
    t.server_name.as_deref()
}

fn encode_health(enc: &mut DescriptorEncoder, snap: &Snapshot) -> fmt::Result {
    let rows = || {
        snap.targets
            .iter()
            .flat_map(|t| t.health.iter().map(move |h| (t.server.as_str(), h)))
    };
    gauge_family(
        enc,
        "nats_delivery_up",
        "Whether the last poll of this source of this server succeeded (1) or failed (0).",
        rows().map(|(s, h)| {
            (
                [("server", s), ("source", h.source.as_str())],
                u64::from(h.up),
            )
        }),
    )?;
    gauge_family(
        enc,
        "nats_delivery_scrape_duration_seconds",
        "How long the last poll of this source of this server took.",
        rows().map(|(s, h)| ([("server", s), ("source", h.source.as_str())], h.duration)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_scrape_reply_bytes",
        "Bytes the server sent for the last poll of this source of this server (every page and request; 0 when it failed before any).",
        rows().map(|(s, h)| {
            (
                [("server", s), ("source", h.source.as_str())],
                h.reply_bytes,
            )
        }),
    )?;
    gauge_family(
        enc,
        "nats_delivery_jsz_config_read",
        "Whether the last /jsz poll of this server asked for the streams' and consumers' configuration (1), of every account or of some, or took in what a read beside the scrapes brought, or took it all from the last read (0).",
        snap.targets.iter().filter_map(|t| {
            let jsz = t.jsz.as_ref()?;
            Some(([("server", t.server.as_str())], u64::from(jsz.config_read)))
        }),
    )?;
    counter_family(
        enc,
        "nats_delivery_jsz_config_read_failures",
        "Reads of the streams' and consumers' configuration from this server that failed (too large for --max-kept-size, or late), on the scrape path or beside it; the /jsz polls were answered without it, with the configuration kept from the last read.",
        snap.targets.iter().filter_map(|t| {
            let jsz = t.jsz.as_ref()?;
            Some(([("server", t.server.as_str())], jsz.config_read_failures))
        }),
    )?;
    gauge_family(
        enc,
        "nats_delivery_jsz_config_age_seconds",
        "Seconds since the last read of the configuration of every account of this server began: how old the configuration kept between reads can be.",
        snap.targets.iter().filter_map(|t| {
            let age = t.jsz.as_ref()?.config_age?;
            Some(([("server", t.server.as_str())], age))
        }),
    )?;
    gauge_family(
        enc,
        "nats_delivery_last_success_timestamp_seconds",
        "Unix time of the last successful poll of this source of this server.",
        rows().filter_map(|(s, h)| {
            h.last_success
                .map(|t| ([("server", s), ("source", h.source.as_str())], t))
        }),
    )?;
    counter_family(
        enc,
        "nats_delivery_scrape_errors",
        "Failed polls of this source of this server, by kind of failure.",
        rows().flat_map(|(s, h)| {
            h.errors.iter().map(move |(kind, n)| {
                (
                    [
                        ("server", s),
                        ("source", h.source.as_str()),
                        ("kind", *kind),
                    ],
                    *n,
                )
            })
        }),
    )
}
