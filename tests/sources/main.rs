//! The monitoring sources over HTTP: each endpoint against real servers,
//! failures and hostile replies, golden exposition files, single flight.
mod account_slow_consumers;
#[path = "../common/mod.rs"]
mod common;
mod endpoint_failures;
mod exposition_pieces;
mod golden;
mod hostile_endpoints;
mod hostile_memory;
mod https_monitoring;
mod jsz_paging_and_leaders;
mod jsz_slow_server;
mod link_pending;
mod link_pending_held;
mod link_support;
mod mutated_exposition;
mod mutated_replies;
mod panic_recovery;
mod plain_settings;
mod server_health;
mod single_flight;
mod slow_consumer_cut;
