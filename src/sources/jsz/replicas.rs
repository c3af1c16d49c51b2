//! A replicated group's replicas as the answering server lists them
//! (`cluster.replicas`), folded while parsed into a few counts: the list
//! itself is not kept, since every consumer of a poll is held at once.

use serde::{Deserialize, Deserializer};

/// The replicas the answering server lists for a group: the others when it
/// leads the group, all of them, itself included, when nobody does.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaCounts {
    /// Replicas listed.
    pub(crate) listed: u8,
    /// Of them, current (`current` and not `offline`).
    pub(crate) current: u8,
    /// Of them, `offline`.
    pub(crate) offline: u8,
    /// The most any of them lags (`lag`, Raft log entries).
    pub(crate) lag: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Peer {
    current: bool,
    offline: bool,
    lag: u64,
}

/// Reads `cluster.replicas` into [`ReplicaCounts`].
pub(crate) fn counts<'de, D: Deserializer<'de>>(d: D) -> Result<ReplicaCounts, D::Error> {
    let peers = Option::<Vec<Peer>>::deserialize(d)?.unwrap_or_default();
    let mut out = ReplicaCounts::default();
    for p in peers {
        out.listed = out.listed.saturating_add(1);
        out.current = out
            .current
            .saturating_add(u8::from(p.current && !p.offline));
        out.offline = out.offline.saturating_add(u8::from(p.offline));
        out.lag = out.lag.max(p.lag);
    }
    Ok(out)
}
