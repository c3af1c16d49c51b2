//! Serving the metrics over HTTP: the listening sockets, TLS, and the routes.

pub(crate) mod connection;
pub(crate) mod listen;
pub(crate) mod routes;
pub(crate) mod serve;
mod stream;

use std::net::SocketAddr;

/// The peer address of a connection, as `ConnectInfo` gives it to the routes
/// (the rate limit keeps a bucket per address).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub(crate) SocketAddr);
