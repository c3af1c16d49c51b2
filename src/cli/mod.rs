//! The command line: every flag group gathered into one [`config::Config`],
//! the rules that tie flags of different groups together, the plain settings
//! built from it for the parts below (`settings.rs`), the web configuration
//! file (TLS and basic auth of the metrics endpoint), and the logger the log
//! flags set up.

pub(crate) mod config;
pub(crate) mod connection_args;
pub(crate) mod logging;
mod settings;
pub(crate) mod web_config;
