//! How parts of a `/jsz` reply are kept: smaller than serde would keep them
//! by default, since every consumer of a poll is held at once, and charged
//! to the poll's [`KeptBudget`] as they are parsed.

use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{
    AccountDetail, ClusterInfo, ConsumerInfo, PriorityGroup, StreamDetail, PINNED_CLIENT_POLICY,
};
use crate::sources::kept::{self, KeptBudget};
use crate::sources::parse_error;

/// What the exporter holds for each exported consumer after a poll, besides
/// its parsed fields: its status window and map entry, its rendered labels,
/// its rows in the lists the exposition is written from (about 500 bytes
/// at 100,000 consumers, 830 in all with the parsed fields: counted so that
/// a reply just under the budget still fits in memory once health and text
/// are added).
pub(crate) const HELD_PER_CONSUMER: usize = 512;

/// What a string of `len` bytes takes from the allocator: its bytes and
/// the allocator's header, rounded up to its 16-byte steps, at least 32.
pub(super) fn string_bytes(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    ((len + 8 + 15) & !15).max(32)
}

/// Bytes a parsed value keeps.
pub trait Kept: Sized {
    /// What it owns besides its own size and its charged lists (`list`):
    /// its strings (and, for a consumer, `HELD_PER_CONSUMER`).
    fn own_heap(&self) -> usize;

    /// Its size, what it owns and its lists', all told.
    fn kept_bytes(&self) -> usize {
        size_of::<Self>() + self.own_heap() + self.lists()
    }

    /// What its charged lists keep.
    fn lists(&self) -> usize {
        0
    }
}

fn listed<T: Kept>(items: &[T]) -> usize {
    items.iter().map(|i| i.kept_bytes()).sum()
}

fn cluster_bytes(c: &Option<ClusterInfo>) -> usize {
    c.as_ref().map_or(0, |c| string_bytes(c.leader.len()))
}

impl Kept for String {
    fn own_heap(&self) -> usize {
        string_bytes(self.len())
    }
}

impl Kept for PriorityGroup {
    fn own_heap(&self) -> usize {
        string_bytes(self.group.len()) + string_bytes(self.pinned_client_id.len())
    }
}

impl Kept for ConsumerInfo {
    fn own_heap(&self) -> usize {
        let filter = self
            .config
            .as_ref()
            .map_or(0, |k| string_bytes(k.filter_subject.len()));
        HELD_PER_CONSUMER + string_bytes(self.name.len()) + cluster_bytes(&self.cluster) + filter
    }

    fn lists(&self) -> usize {
        let filters = self
            .config
            .as_ref()
            .map_or(0, |k| listed(&k.filter_subjects));
        filters + listed(&self.priority_groups)
    }
}

impl Kept for StreamDetail {
    fn own_heap(&self) -> usize {
        string_bytes(self.name.len()) + cluster_bytes(&self.cluster)
    }

    fn lists(&self) -> usize {
        listed(&self.consumer_detail)
    }
}

/// A stream cut out of a reply (`None`) keeps nothing here.
impl Kept for Option<StreamDetail> {
    fn own_heap(&self) -> usize {
        self.as_ref().map_or(0, |s| s.own_heap())
    }

    fn lists(&self) -> usize {
        self.as_ref().map_or(0, |s| s.lists())
    }
}

impl<S: Kept> Kept for AccountDetail<S> {
    fn own_heap(&self) -> usize {
        string_bytes(self.name.len()) + string_bytes(self.id.len())
    }

    fn lists(&self) -> usize {
        listed(&self.stream_detail)
    }
}

/// A list of a `/jsz` reply (accounts, streams, consumers and theirs),
/// charged to this thread's budget ([`kept::current`]) as it is parsed: the
/// list's room as it grows and what each item owns (its own lists charge
/// for themselves); a refused charge stops the parse. Kept without the
/// room (up to as much again) the list grew while it was parsed, which
/// adds up over many consumers.
pub(crate) fn list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Kept,
{
    d.deserialize_seq(Charged {
        budget: kept::current(),
        kind: PhantomData,
    })
}

/// [`list`], boxed: lists only read are kept as boxed slices, 8 bytes
/// smaller for every consumer of a poll.
pub(crate) fn boxed_list<'de, D, T>(d: D) -> Result<Box<[T]>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Kept,
{
    list(d).map(Vec::into_boxed_slice)
}

struct Charged<T> {
    budget: std::sync::Arc<KeptBudget>,
    kind: PhantomData<T>,
}

impl<'de, T: Deserialize<'de> + Kept> Visitor<'de> for Charged<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out: Vec<T> = Vec::new();
        let charge = |bytes: usize| {
            if self.budget.charge(bytes) {
                Ok(())
            } else {
                Err(parse_error::refused_in_deserializer(self.budget.refused()))
            }
        };
        while let Some(item) = seq.next_element::<T>()? {
            if out.len() == out.capacity() {
                let room = out.capacity();
                out.reserve(1);
                charge((out.capacity() - room) * size_of::<T>())?;
            }
            charge(item.own_heap())?;
            out.push(item);
        }
        let slack = out.capacity() - out.len();
        out.shrink_to_fit();
        self.budget.release(slack * size_of::<T>());
        Ok(out)
    }
}

/// True for a string that is there and not empty; kept as a flag instead
/// of the string where only that matters.
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(d)?.is_some_and(|s| !s.is_empty()))
}

/// True for the `pinned_client` priority policy.
pub(crate) fn pins_clients<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(d)?.as_deref() == Some(PINNED_CLIENT_POLICY))
}

/// `ack_policy`: true for `none`.
pub(crate) fn acks_none<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(d)?.as_deref() == Some("none"))
}

/// A string kept as its hash: only whether it changed matters (0 when
/// absent).
pub(crate) fn hashed<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use std::hash::{Hash, Hasher};
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(0);
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    Ok(h.finish())
}

/// `discard`: true for `new`.
pub(crate) fn discards_new<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(d)?.as_deref() == Some("new"))
}
