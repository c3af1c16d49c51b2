//! Serving the metrics over HTTP: the listening socket, TLS, and the routes.

pub mod routes;
pub mod serve;
