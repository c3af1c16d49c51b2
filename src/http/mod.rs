//! Serving the metrics over HTTP: the listening sockets, TLS, and the routes.

pub(crate) mod listen;
pub(crate) mod routes;
pub(crate) mod serve;
