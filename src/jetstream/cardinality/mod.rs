//! Cardinality under the operator's control: which accounts, streams and
//! consumers are exported ([`JszFilter`]), ephemeral consumers folded into
//! one series per stream ([`fold`]), and a ceiling on the JetStream series
//! of one scrape ([`budget`]).
//!
//! Filtering happens as each `/jsz` page is parsed, before leaders are
//! chosen: a name left out costs no series, no consumer-health memory and
//! no message-timestamp reads.

pub(crate) mod budget;
pub(crate) mod fold;
pub(crate) mod series;

use series::{parse_opt_in, ConsumerSeries, OptInChoice, StatusSeries};

use crate::sources::jsz::patterns::{parse_pattern, NameFilter, Pattern};
use crate::sources::jsz::JszFilter;

/// The cardinality flags.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct CardinalityArgs {
    /// Export only accounts whose name matches this regular expression
    /// (matched against the whole name; repeatable). A single name without
    /// special characters is also sent to the server (`/jsz?acc=`).
    #[arg(long = "include-account", env = "NATS_DELIVERY_INCLUDE_ACCOUNT", value_name = "REGEX", value_parser = parse_pattern)]
    pub(crate) include_accounts: Vec<Pattern>,
    /// Leave out accounts whose name matches (repeatable); wins over --include-account.
    #[arg(long = "exclude-account", env = "NATS_DELIVERY_EXCLUDE_ACCOUNT", value_name = "REGEX", value_parser = parse_pattern)]
    pub(crate) exclude_accounts: Vec<Pattern>,
    /// Export only streams whose name matches (repeatable).
    #[arg(long = "include-stream", env = "NATS_DELIVERY_INCLUDE_STREAM", value_name = "REGEX", value_parser = parse_pattern)]
    pub(crate) include_streams: Vec<Pattern>,
    /// Leave out streams whose name matches (repeatable); wins over --include-stream.
    #[arg(long = "exclude-stream", env = "NATS_DELIVERY_EXCLUDE_STREAM", value_name = "REGEX", value_parser = parse_pattern)]
    pub(crate) exclude_streams: Vec<Pattern>,
    /// Export only consumers whose name matches (repeatable).
    #[arg(long = "include-consumer", env = "NATS_DELIVERY_INCLUDE_CONSUMER", value_name = "REGEX", value_parser = parse_pattern)]
    pub(crate) include_consumers: Vec<Pattern>,
    /// Leave out consumers whose name matches (repeatable); wins over --include-consumer.
    #[arg(long = "exclude-consumer", env = "NATS_DELIVERY_EXCLUDE_CONSUMER", value_name = "REGEX", value_parser = parse_pattern)]
    pub(crate) exclude_consumers: Vec<Pattern>,
    /// Export every ephemeral consumer (no durable name) under its own name,
    /// instead of folding them into one `consumer="__ephemeral__"` series per stream.
    #[arg(long, env = "NATS_DELIVERY_KEEP_EPHEMERAL_CONSUMERS")]
    pub(crate) keep_ephemeral_consumers: bool,
    /// Most JetStream stream, consumer and consumer-health series per
    /// scrape; past it consumer health, then whole consumers of lowest
    /// priority (least num_pending) are left out, and counted. Off by default.
    #[arg(long, env = "NATS_DELIVERY_MAX_JETSTREAM_SERIES", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_jetstream_series: Option<u64>,
    /// How `nats_delivery_consumer_status` is written: `current`, one series
    /// per consumer (its status, at 1), or `all`, one per consumer and
    /// status (1 for the current one, 0 for the six others).
    #[arg(long, env = "NATS_DELIVERY_CONSUMER_STATUS_SERIES", value_enum, default_value_t = StatusSeries::Current)]
    pub(crate) consumer_status_series: StatusSeries,
    /// Per-consumer metrics written only when named here by their full
    /// names (comma-separated or repeated), or `all`:
    /// nats_delivery_consumer_deliveries_total,
    /// _ack_wait_seconds, _last_delivery_age_seconds, _last_ack_age_seconds,
    /// _pause_remaining_seconds, _priority_group_pinned,
    /// _delivery_lag_exact, _oldest_unacked_age_exact.
    #[arg(long, env = "NATS_DELIVERY_CONSUMER_OPT_IN_METRICS", value_name = "METRIC", value_delimiter = ',', value_parser = parse_opt_in)]
    pub(crate) consumer_opt_in_metrics: Vec<OptInChoice>,
}

impl CardinalityArgs {
    /// The per-consumer series these flags write.
    pub(crate) fn consumer_series(&self) -> ConsumerSeries {
        ConsumerSeries::new(self.consumer_status_series, &self.consumer_opt_in_metrics)
    }

    /// The name filters these flags give.
    pub(crate) fn filter(&self) -> JszFilter {
        let filter = |include: &[Pattern], exclude: &[Pattern]| NameFilter {
            include: include.to_vec(),
            exclude: exclude.to_vec(),
        };
        JszFilter {
            accounts: filter(&self.include_accounts, &self.exclude_accounts),
            streams: filter(&self.include_streams, &self.exclude_streams),
            consumers: filter(&self.include_consumers, &self.exclude_consumers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::jsz::Jsz;

    #[test]
    fn filters_accounts_streams_and_consumers() {
        let json = r#"{"account_details":[
            {"name":"A","id":"A","stream_detail":[
                {"name":"ORDERS","consumer_detail":[{"name":"billing"},{"name":"audit"}]},
                {"name":"TMP","consumer_detail":[{"name":"x"}]}]},
            {"name":"tag","id":"PUBKEY","stream_detail":[{"name":"ORDERS"}]},
            {"name":"B","id":"B","stream_detail":[{"name":"ORDERS"}]}]}"#;
        let parse = |p: &str| parse_pattern(p).unwrap();
        let args = CardinalityArgs {
            exclude_accounts: vec![parse("B")],
            exclude_streams: vec![parse("TMP")],
            include_consumers: vec![parse("b.*"), parse("audit")],
            exclude_consumers: vec![parse("audit")],
            ..CardinalityArgs::default()
        };
        let mut jsz: Jsz = serde_json::from_str(json).unwrap();
        args.filter().apply(&mut jsz.account_details);
        let kept: Vec<_> = jsz
            .account_details
            .iter()
            .flat_map(|a| {
                a.stream_detail.iter().map(move |s| {
                    let consumers: Vec<_> = s.consumer_detail.iter().map(|c| &c.name).collect();
                    format!("{}/{}/{consumers:?}", a.name, s.name)
                })
            })
            .collect();
        assert_eq!(kept, ["A/ORDERS/[\"billing\"]", "tag/ORDERS/[]"]);
        // An account is also found by its id.
        let args = CardinalityArgs {
            include_accounts: vec![parse("PUBKEY")],
            ..CardinalityArgs::default()
        };
        let mut jsz: Jsz = serde_json::from_str(json).unwrap();
        args.filter().apply(&mut jsz.account_details);
        assert_eq!(jsz.account_details.len(), 1);
        assert_eq!(jsz.account_details[0].name, "tag");
        assert_eq!(args.filter().server_account(), Some("PUBKEY"));
        // Excluded by either name.
        for name in ["tag", "PUBKEY"] {
            let args = CardinalityArgs {
                exclude_accounts: vec![parse(name)],
                ..CardinalityArgs::default()
            };
            let mut jsz: Jsz = serde_json::from_str(json).unwrap();
            args.filter().apply(&mut jsz.account_details);
            let names: Vec<_> = jsz
                .account_details
                .iter()
                .map(|a| a.name.as_str())
                .collect();
            assert_eq!(names, ["A", "B"], "{name}");
        }
    }
}
