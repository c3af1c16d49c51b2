//! The command line: every flag group gathered into one [`config::Config`],
//! the rules that tie flags of different groups together, and the web
//! configuration file (TLS and basic auth of the metrics endpoint).

pub mod config;
pub mod web_config;
