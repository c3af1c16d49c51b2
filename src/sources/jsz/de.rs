//! How parts of a `/jsz` reply are kept: smaller than serde would keep them
//! by default, since every consumer of a poll is held at once, and charged
//! to the poll's [`KeptBudget`] as they are parsed.

use std::fmt;
use std::marker::PhantomData;
use std::mem::{size_of, size_of_val};
use std::sync::Arc;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{
    AccountDetail, ClusterInfo, ConsumerConfig, ConsumerInfo, Metadata, OriginInfo, PriorityGroup,
    StreamDetail, PINNED_CLIENT_POLICY,
};
use crate::sources::kept::{self, KeptBudget};
use crate::sources::parse_error;

/// What the exporter holds for each exported consumer after a poll, besides
/// its parsed fields: its status window and map entry, its rendered labels,
/// its rows in the lists the exposition is written from (about 500 bytes
/// at 100,000 consumers, 700 in all with the parsed fields: counted so that
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

    /// Takes over the values it holds that are equal to `previous`'s (the
    /// item before it in its list), so that a run of equal ones is held once.
    fn share_with(&mut self, _previous: &Self) {}

    /// What it holds besides [`Kept::kept_bytes`] that `previous` (the item
    /// before it in its list) does not hold too: what a run of values
    /// shared by [`Kept::share_with`] keeps is counted at its first.
    fn unshared(&self, _previous: Option<&Self>) -> usize {
        0
    }
}

fn listed<T: Kept>(items: &[T]) -> usize {
    let mut previous = None;
    items
        .iter()
        .map(|i| {
            let bytes = i.kept_bytes() + i.unshared(previous);
            previous = Some(i);
            bytes
        })
        .sum()
}

/// What a consumer's configuration keeps, shared (`Arc`): its counts and
/// its own size, and its strings.
pub(super) fn config_bytes(c: &ConsumerConfig) -> usize {
    let filters: usize = c.filter_subjects.iter().map(Kept::kept_bytes).sum();
    let own = size_of::<ConsumerConfig>() + string_bytes(c.filter_subject.len());
    ARC_COUNTS + own + filters + metadata_bytes(&c.metadata)
}

/// What the metadata kept of a stream or consumer holds on the heap: its
/// box, its list of values and each value.
pub(super) fn metadata_bytes(m: &Option<Box<Metadata>>) -> usize {
    m.as_ref().map_or(0, |m| {
        let values = m.values.iter().flatten().map(|v| string_bytes(v.len()));
        string_bytes(size_of::<Metadata>())
            + string_bytes(size_of_val::<[Option<Box<str>>]>(&m.values))
            + values.sum::<usize>()
    })
}

/// The two counts an `Arc` keeps before its value.
const ARC_COUNTS: usize = 16;

fn cluster_bytes(c: &Option<ClusterInfo>) -> usize {
    c.as_ref().map_or(0, |c| string_bytes(c.leader.len()))
}

impl Kept for String {
    fn own_heap(&self) -> usize {
        string_bytes(self.len())
    }
}

impl Kept for OriginInfo {
    fn own_heap(&self) -> usize {
        let api = self
            .external
            .as_ref()
            .map_or(0, |e| string_bytes(e.api.len()));
        string_bytes(self.name.len()) + string_bytes(self.filter_subject.len()) + api
    }
}

impl Kept for PriorityGroup {
    fn own_heap(&self) -> usize {
        string_bytes(self.group.len()) + string_bytes(self.pinned_client_id.len())
    }
}

impl Kept for ConsumerInfo {
    fn own_heap(&self) -> usize {
        let boxed = string_bytes(size_of::<Box<[PriorityGroup]>>());
        let groups = self.groups.as_ref().map_or(0, |_| boxed);
        HELD_PER_CONSUMER + string_bytes(self.name.len()) + cluster_bytes(&self.cluster) + groups
    }

    fn lists(&self) -> usize {
        listed(self.priority_groups())
    }

    /// Consumers of a stream are mostly made alike: one configuration is
    /// held for a run of equal ones (the one parsed for each is let go).
    fn share_with(&mut self, previous: &Self) {
        if let (Some(mine), Some(theirs)) = (&mut self.config, &previous.config) {
            if mine == theirs {
                *mine = theirs.clone();
            }
        }
    }

    fn unshared(&self, previous: Option<&Self>) -> usize {
        match (&self.config, previous.and_then(|p| p.config.as_ref())) {
            (Some(mine), Some(theirs)) if Arc::ptr_eq(mine, theirs) => 0,
            (Some(mine), _) => config_bytes(mine),
            (None, _) => 0,
        }
    }
}

impl Kept for StreamDetail {
    fn own_heap(&self) -> usize {
        let metadata = self
            .config
            .as_ref()
            .map_or(0, |c| metadata_bytes(&c.metadata));
        let mirror = self
            .mirror
            .as_deref()
            .map_or(0, |m| string_bytes(m.kept_bytes()));
        let sources = self
            .sources
            .as_ref()
            .map_or(0, |_| string_bytes(size_of::<Box<[OriginInfo]>>()));
        string_bytes(self.name.len()) + cluster_bytes(&self.cluster) + metadata + mirror + sources
    }

    fn lists(&self) -> usize {
        let sources = self.sources.as_deref().map_or(&[][..], |s| s);
        listed(&self.consumer_detail) + listed(sources)
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
/// room it is read into and what each item owns (its own lists charge for
/// themselves); a refused charge stops the parse. Kept in a list of its
/// exact length, without the room it was read into.
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

/// A value parsed into an `Arc`, for a list to share among equal items
/// ([`Kept::share_with`]).
pub(crate) fn shared<'de, D, T>(d: D) -> Result<Option<Arc<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.map(Arc::new))
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

/// Items a list is read in at a time (see [`Charged`]'s `visit_seq`).
const BLOCK_ITEMS: usize = 16;

struct Charged<T> {
    budget: Arc<KeptBudget>,
    kind: PhantomData<T>,
}

impl<'de, T: Deserialize<'de> + Kept> Visitor<'de> for Charged<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let charge = |bytes: usize| {
            if self.budget.charge(bytes) {
                Ok(())
            } else {
                Err(parse_error::refused_in_deserializer(self.budget.refused()))
            }
        };
        // Read into blocks, then moved into one list of the exact length: a
        // list grown by doubling leaves each room it outgrew behind, holes
        // that blocks outliving the poll settle in, and the next poll's
        // lists, which no longer fit between them, took new memory.
        let mut blocks: Vec<Vec<T>> = Vec::new();
        let mut len = 0;
        while let Some(mut item) = seq.next_element::<T>()? {
            let previous = blocks.last().and_then(|b| b.last());
            if let Some(previous) = previous {
                item.share_with(previous);
            }
            charge(item.own_heap() + item.unshared(previous))?;
            if blocks.last().is_none_or(|b| b.len() == BLOCK_ITEMS) {
                if blocks.len() == blocks.capacity() {
                    let room = blocks.capacity();
                    blocks.reserve(1);
                    charge((blocks.capacity() - room) * size_of::<Vec<T>>())?;
                }
                charge(BLOCK_ITEMS * size_of::<T>())?;
                blocks.push(Vec::with_capacity(BLOCK_ITEMS));
            }
            blocks.last_mut().expect("a block with room").push(item);
            len += 1;
        }
        charge(len * size_of::<T>())?;
        let held =
            blocks.len() * BLOCK_ITEMS * size_of::<T>() + blocks.capacity() * size_of::<Vec<T>>();
        let mut out = Vec::with_capacity(len);
        for block in blocks {
            out.extend(block);
        }
        self.budget.release(held);
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

/// A timestamp as Unix seconds ([`crate::sources::timestamp`]), NaN when
/// absent or never.
pub(crate) fn seconds_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(crate::sources::timestamp(d)?.unwrap_or(f64::NAN))
}

/// A list kept only when not empty, behind one pointer: 8 bytes.
pub(crate) type ThinList<T> = Option<Box<Box<[T]>>>;

/// [`list`] kept only when not empty, behind one pointer.
pub(crate) fn list_if_any<'de, D, T>(d: D) -> Result<ThinList<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Kept,
{
    let items = boxed_list(d)?;
    Ok((!items.is_empty()).then(|| Box::new(items)))
}

/// Nanoseconds the server may leave out: 8 bytes where an `Option<i64>`
/// takes 16, for every consumer of a poll (`i64::MIN` stands for none).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Nanos(i64);

impl Nanos {
    /// The nanoseconds, if the server sent them.
    pub(crate) fn get(self) -> Option<i64> {
        Some(self.0).filter(|n| *n != i64::MIN)
    }
}

impl Default for Nanos {
    fn default() -> Nanos {
        Nanos(i64::MIN)
    }
}

impl fmt::Debug for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl<'de> Deserialize<'de> for Nanos {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Nanos, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.map_or_else(Nanos::default, Nanos))
    }
}

/// `discard`: true for `new`.
pub(crate) fn discards_new<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(d)?.as_deref() == Some("new"))
}
