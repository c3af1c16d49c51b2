//! JetStream consumers and streams: the `/jsz` families, cardinality limits,
//! consumer health, message timestamps, priority groups, lost stream data, what
//! an alert sees of a stalled consumer, accounts filling.
mod account_counts;
mod account_jwts;
mod account_storage;
mod account_tiers;
mod cardinality;
mod cardinality_budget;
mod cardinality_request;
#[path = "../common/mod.rs"]
mod common;
mod config_beside;
mod config_jump;
mod config_on_demand;
mod config_read_fails;
mod consumer_health;
mod consumer_health_lag;
mod consumer_reset;
mod jetstream_consumer;
mod lag_threshold;
mod leaderless_cluster;
mod message_timestamps;
mod message_timestamps_access;
mod message_timestamps_support;
mod metadata_labels;
mod natscli_second_opinion;
mod operator_jwts;
mod origin_forecast;
mod origin_leaf_cut;
mod origin_leaf_cut_alert;
mod priority_groups;
mod removal_forecast;
mod removed_before_delivery;
mod removed_before_delivery_bounds;
mod removed_before_delivery_cluster;
mod removed_before_delivery_cluster_diagnostics;
mod removed_before_delivery_cluster_support;
mod removed_before_delivery_cluster_truth;
mod removed_before_delivery_restart;
mod removed_before_delivery_support;
mod series_per_consumer;
mod stall_alert_series;
mod stream_lost;
mod stream_origins;
