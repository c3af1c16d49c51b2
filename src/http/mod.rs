//! Serving the metrics over HTTP: the listening sockets, TLS, and the routes.

pub mod listen;
pub mod routes;
pub mod serve;
