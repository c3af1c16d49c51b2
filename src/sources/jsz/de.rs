//! How parts of a `/jsz` reply are kept: smaller than serde would keep them
//! by default, since every consumer of a poll is held at once.

use serde::{Deserialize, Deserializer};

use super::PINNED_CLIENT_POLICY;

/// A list kept for the whole poll, without the room (up to as much again)
/// it grew while it was parsed: at 100 consumers a stream that room was
/// 28 of every 128 slots, some 9 MB at 100,000 consumers.
pub fn without_slack<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    let mut v = Vec::<T>::deserialize(d)?;
    v.shrink_to_fit();
    Ok(v)
}

/// True for a string that is there and not empty; kept as a flag instead
/// of the string where only that matters.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(d)?.is_some_and(|s| !s.is_empty()))
}

/// True for the `pinned_client` priority policy.
pub fn pins_clients<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(d)?.as_deref() == Some(PINNED_CLIENT_POLICY))
}
