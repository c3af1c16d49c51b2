//! Starts real `nats-server` processes for tests.
//!
//! Every server listens on loopback with ports chosen by the server itself
//! (`-1`), read back from its log, so parallel tests never race for a port and
//! never touch 4222/8222. The process and its JetStream store are removed when
//! the [`NatsServer`] is dropped.
//!
//! The binary is found, in order: `$NATS_SERVER_BIN`; `.tools/nats-server-<v>/bin/nats-server`
//! at the workspace root for `$NATS_SERVER_VERSION` (default 2.15.1), as
//! `scripts/install-deps.sh` installs it; `nats-server` on `PATH`.
#![deny(missing_docs)]

pub mod app;
mod binary;
mod cluster;
mod http;
mod netns;
mod ports;
pub mod promtool;
pub mod reference;
pub mod sample;
mod server;
mod supercluster;
pub mod tls;
pub mod wait;

pub use binary::{binary, version_numbers, version_under_test, workspace_root, DEFAULT_VERSION};
pub use cluster::cluster;
pub use http::http_get;
pub use netns::{cluster_in_namespaces, hub_and_leaf, server_in_namespace, Network};
pub use ports::free_port;
pub use server::{Builder, NatsServer};
pub use supercluster::supercluster;
