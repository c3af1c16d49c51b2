//! What the exporter works out about JetStream beyond what one `/jsz` reply
//! says: which consumers get series (cardinality), consumer health over time,
//! message timestamps read over NATS, data a stream lost, and the families
//! written from the chosen streams and consumers.

pub(crate) mod cardinality;
pub mod consumer_health;
pub(crate) mod consumer_status;
pub(crate) mod jsz_families;
pub mod limit_forecast;
pub mod message_timestamps;
pub mod removed_before_delivery;
pub mod replicas;
pub(crate) mod seq_ranges;
pub mod stream_lost;
