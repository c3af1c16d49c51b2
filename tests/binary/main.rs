//! The exporter as operators run it: the binary, its flags, its HTTP
//! endpoints, TLS and authentication, shutdown, logs; and the test harness.
mod binary_end_to_end;
mod bounded_connections;
mod bounded_shutdown;
mod cli;
#[path = "../common/mod.rs"]
mod common;
mod connection_errors;
mod exporter_metrics;
mod http_endpoints;
mod listen_address;
mod message_data_connection;
mod prometheus3_scrape;
mod readme_quick_start;
mod secrets_in_logs;
mod server_harness;
mod toolkit_flags;
mod web_config;
mod web_config_auth;
mod web_config_reload;
mod web_config_tls;
mod web_support;
