//! nats-delivery-exporter: Prometheus metrics for where NATS loses messages.
//!
//! The binary polls nats-server monitoring endpoints on every scrape
//! ([`exporter::Exporter`]), one module per endpoint under [`sources`], and
//! serves the result over HTTP ([`http::router`]).
#![deny(missing_docs)]

pub mod advisories;
pub mod args;
pub mod byte_size;
pub mod cardinality;
pub mod client_reports;
pub mod config;
pub mod consumer_health;
pub mod consumer_text;
pub mod duration;
pub mod encode;
pub mod error;
pub mod exporter;
pub mod exposition;
pub mod flag_values;
pub mod http;
pub mod listener;
pub mod message_timestamps;
pub mod nats_connection;
pub mod poller;
pub mod process_metrics;
pub mod redact;
pub mod seq_ranges;
pub mod serve;
pub mod snapshot;
pub mod sources;
pub mod stream_lost;
pub mod survey;
pub mod system_events;
pub mod system_poll;
pub mod web_config;
