//! The bounds of the exporter's HTTP connections (`http/serve.rs` applies
//! them): a client that trickles its headers, keeps connections open doing
//! nothing, or opens many cannot take the port from Prometheus.

use std::time::Duration;

use crate::flags::duration::parse_duration;

/// Flags bounding the HTTP server's connections.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Time a client has to send a request's headers, counted from when the
    /// connection waits for a request (so over HTTP/1 it also bounds the time
    /// between two requests of one connection); past it the connection is
    /// closed.
    #[arg(long = "web.header-read-timeout", env = "NATS_DELIVERY_WEB_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,

    /// A connection that reads and writes nothing for this long is closed (an
    /// answer in progress is finished first).
    #[arg(long = "web.idle-timeout", env = "NATS_DELIVERY_WEB_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Most connections open at once, over every listening address; past it a
    /// new connection waits in the kernel's backlog until one closes.
    #[arg(long = "web.max-connections", env = "NATS_DELIVERY_WEB_MAX_CONNECTIONS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
}
