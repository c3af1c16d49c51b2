//! Answers already read, bounded by entries, the oldest entry evicted first.
//!
//! Only found messages are kept: a stored message's time never changes, so
//! the answer stays right for as long as the message is stored. "No message"
//! is never kept, since the next published message can make it wrong and
//! nothing in the reply says when. A found message that is later removed
//! (limits, purge, delete) makes its entry wrong too: [`Cache::forget_below`]
//! drops the entries below a stream's first sequence; a message removed from
//! the middle of a stream stays cached until evicted.

use std::collections::{BTreeMap, HashMap};

use super::fetch::Stored;
use super::TimestampRequest;

/// The bounded cache.
#[derive(Debug)]
pub(super) struct Cache {
    capacity: usize,
    /// Each answer with its insertion number.
    entries: HashMap<TimestampRequest, (Stored, u64)>,
    /// Insertion number to key: the first is the oldest.
    order: BTreeMap<u64, TimestampRequest>,
    next: u64,
}

impl Cache {
    /// An empty cache holding at most `capacity` answers (at least 1).
    pub(super) fn new(capacity: usize) -> Cache {
        Cache {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
        }
    }

    /// The cached answer to `request`.
    pub(super) fn get(&self, request: &TimestampRequest) -> Option<Stored> {
        self.entries.get(request).map(|(s, _)| *s)
    }

    /// Keeps `found` as the answer to `request`, evicting the oldest entry when full.
    pub(super) fn insert(&mut self, request: TimestampRequest, found: Stored) {
        if let Some((_, n)) = self.entries.remove(&request) {
            self.order.remove(&n);
        }
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.order.insert(self.next, request.clone());
        self.entries.insert(request, (found, self.next));
        self.next += 1;
    }

    /// Drops the answers in `stream` of `account` whose message lies below
    /// `first_seq`, the stream's first stored sequence now: those messages
    /// are gone, and the first message at or after `from_seq` is a later one.
    pub(super) fn forget_below(&mut self, account: &str, stream: &str, first_seq: u64) {
        let gone: Vec<(TimestampRequest, u64)> = self
            .entries
            .iter()
            .filter(|(k, (s, _))| k.account == account && k.stream == stream && s.seq < first_seq)
            .map(|(k, (_, n))| (k.clone(), *n))
            .collect();
        for (key, n) in gone {
            self.entries.remove(&key);
            self.order.remove(&n);
        }
    }

    /// Answers held now.
    pub(super) fn entries(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(stream: &str, from_seq: u64) -> TimestampRequest {
        TimestampRequest {
            account: "A".into(),
            stream: stream.into(),
            from_seq,
            filters: vec![],
        }
    }

    fn at(seq: u64) -> Stored {
        Stored {
            seq,
            unix_seconds: seq as f64,
        }
    }

    #[test]
    fn evicts_the_oldest_and_forgets_removed_messages() {
        let mut c = Cache::new(2);
        c.insert(req("S", 1), at(1));
        c.insert(req("S", 2), at(3));
        c.insert(req("S", 1), at(1)); // re-inserted: now the newest
        c.insert(req("T", 5), at(5));
        assert_eq!(c.entries(), 2);
        assert_eq!(c.get(&req("S", 2)), None);
        assert_eq!(c.get(&req("S", 1)), Some(at(1)));
        assert_eq!(c.get(&req("T", 5)), Some(at(5)));
        c.forget_below("A", "S", 2);
        c.forget_below("A", "T", 5);
        assert_eq!(c.get(&req("S", 1)), None);
        assert_eq!(c.get(&req("T", 5)), Some(at(5)));
        assert_eq!((c.entries(), c.order.len()), (1, 1));
    }
}
