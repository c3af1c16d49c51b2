//! What the exporter works out about JetStream beyond what one `/jsz` reply
//! says: which consumers get series (cardinality), consumer health over time,
//! message timestamps read over NATS, data a stream lost, and the families
//! written from the chosen streams and consumers.

pub(crate) mod account_info;
pub(crate) mod account_tiers;
#[cfg(test)]
mod arithmetic_properties;
pub(crate) mod cardinality;
pub(crate) mod consumer_health;
pub(crate) mod consumer_status;
pub(crate) mod jsz_families;
pub(crate) mod leaderless;
pub(crate) mod limit_forecast;
pub(crate) mod message_timestamps;
pub(crate) mod metadata_families;
pub(crate) mod origin_forecast;
pub(crate) mod origin_gaps;
pub(crate) mod removed_before_delivery;
pub(crate) mod replicas;
pub(crate) mod seq_ranges;
pub(crate) mod stream_lost;
pub(crate) mod stream_origins;
