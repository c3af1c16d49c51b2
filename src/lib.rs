//! nats-delivery-exporter: Prometheus metrics for where NATS loses messages.
//!
//! The binary polls nats-server monitoring endpoints on every scrape
//! ([`scrape::exporter::Exporter`]), one module per endpoint under
//! [`sources`], and serves the result over HTTP ([`http::routes::router`]).
//! ARCHITECTURE.md gives the layers and which may use which.
#![deny(missing_docs)]

pub mod cli;
mod flags;
pub mod http;
pub mod jetstream;
pub mod listeners;
mod lock;
pub mod nats;
mod poll_error;
pub mod redact;
pub mod scrape;
pub mod sources;
pub mod system;
pub mod text;
