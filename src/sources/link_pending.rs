//! What `/routez` and `/gatewayz` have in common: server-to-server
//! connections whose outbound buffer (pending bytes) is shown next to the
//! server's `max_pending`, like client connections from `/connz`.
//!
//! The limit means something else for these connections. Only client
//! connections are cut when their pending bytes pass `max_pending`
//! (`client.go` checks `c.kind == CLIENT`); a route, gateway or leaf node
//! connection is cut (or, 2.14+, retried) only when a write passes
//! `write_deadline`. But from 75 % of `max_pending` (50 % before 2.10) the
//! server stalls the client publishers whose messages go out through that
//! connection, and every message waiting there is lost if it is cut.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use crate::text::families::gauge_family;

/// One server-to-server connection: its labels after `server`, and its pending bytes.
pub(super) type PendingRow<'a> = (Vec<(&'static str, &'a str)>, i64);

/// Writes `<prefix>_pending_bytes` and `<prefix>_pending_ratio` (pending
/// bytes over the server's `max_pending`, where it is known) for `rows` of
/// (server, its `max_pending`, one connection).
pub(super) fn encode<'a>(
    enc: &mut DescriptorEncoder,
    prefix: &str,
    [help_bytes, help_ratio]: [&str; 2],
    rows: &'a [(&'a str, Option<i64>, PendingRow<'a>)],
) -> fmt::Result {
    fn labels<'a>(
        server: &'a str,
        row: &[(&'static str, &'a str)],
    ) -> Vec<(&'static str, &'a str)> {
        let mut all = vec![("server", server)];
        all.extend_from_slice(row);
        all
    }
    gauge_family(
        enc,
        &format!("{prefix}_pending_bytes"),
        help_bytes,
        rows.iter()
            .map(|(server, _, (row, pending))| (labels(server, row), *pending)),
    )?;
    gauge_family(
        enc,
        &format!("{prefix}_pending_ratio"),
        help_ratio,
        rows.iter().filter_map(|(server, max, (row, pending))| {
            let max = max.filter(|m| *m > 0)?;
            Some((labels(server, row), *pending as f64 / max as f64))
        }),
    )
}
