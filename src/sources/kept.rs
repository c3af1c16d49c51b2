//! What the replies of one server may keep in memory during one poll
//! (`--max-kept-size`), whatever they send.
//!
//! `--max-reply-size` bounds the bytes read, which bounds time, not memory:
//! a reply of 256 MiB of whitespace keeps nothing, and 256 MiB of tiny
//! valid consumers (`{"name":"a"},` again and again) keep some 20 times
//! what they take to send. So every source of a server charges one
//! [`KeptBudget`] with what it holds as it parses: the text it buffers
//! (never whitespace runs) and the values it keeps; a charge past the limit
//! stops that reply, which leaves its source down with `kind="too_large"`.
//! Charges are upper bounds of the memory they stand for, so the memory a
//! poll holds never passes the limit by more than the reads in flight.

use std::cell::RefCell;
use std::io::{BufRead, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::parse_error::{self, Refused};

/// Bytes charged for every object (`{`) the sources other than `/jsz`
/// parse: twice the largest value they keep per object with its strings'
/// allocations (a connection: 104 bytes and three strings of at least 32),
/// since a list grows by doubling its room. (`/jsz` counts exactly, see
/// its `de`.)
pub(crate) const OBJECT_COST: usize = 416;

/// Bytes charged for every `[`: itself, and the byte serde's scratch takes
/// for it while it skips a nested list.
pub(crate) const LIST_COST: usize = 2;

/// The longest string a reply may hold: nats-server sends none near it
/// (names are at most a few hundred bytes, a client's `CONNECT` at most 4
/// KiB). It bounds serde's scratch, which a string fills before it is kept.
pub(crate) const MAX_STRING: usize = 64 << 10;

/// The memory the replies of one server may keep during one poll.
#[derive(Debug)]
pub struct KeptBudget {
    limit: usize,
    used: AtomicUsize,
    /// The most charged at once (kept for a budget of its own only).
    peak: AtomicUsize,
    /// The budget this one is a share of: every charge is its charge too,
    /// and what is still charged here is given back to it on drop.
    parent: Option<Arc<KeptBudget>>,
}

impl KeptBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Arc<KeptBudget> {
        Arc::new(KeptBudget {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            parent: None,
        })
    }

    /// A share of `parent`, for one part of a reply: it charges `parent`,
    /// counts what that part charged, and gives it all back when dropped
    /// (the part kept then charges `parent` for what it keeps).
    pub(crate) fn share(parent: &Arc<KeptBudget>) -> Arc<KeptBudget> {
        Arc::new(KeptBudget {
            limit: parent.limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            parent: Some(parent.clone()),
        })
    }

    /// A budget nothing passes, where no bound is wanted (tests, benches).
    pub fn unlimited() -> Arc<KeptBudget> {
        KeptBudget::new(usize::MAX)
    }

    /// The limit in bytes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `bytes` more; false (and nothing taken) when that passes the
    /// limit: the reply that asked must stop, with [`KeptBudget::refused`].
    pub(crate) fn charge(&self, bytes: usize) -> bool {
        if let Some(parent) = &self.parent {
            if !parent.charge(bytes) {
                return false;
            }
            self.used.fetch_add(bytes, Ordering::AcqRel);
            return true;
        }
        let charged = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|after| *after <= self.limit)
            });
        if let Ok(before) = charged {
            self.peak.fetch_max(before + bytes, Ordering::AcqRel);
        }
        charged.is_ok()
    }

    /// The most charged at once so far: what was held at the worst moment,
    /// parses under way included.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    /// The error of a reply stopped by a refused charge.
    pub(crate) fn refused(&self) -> Refused {
        Refused { limit: self.limit }
    }

    /// Gives back `bytes` charged before (a buffer freed).
    pub(crate) fn release(&self, bytes: usize) {
        let mut given = 0;
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                given = bytes.min(used);
                Some(used - given)
            });
        if let Some(parent) = &self.parent {
            parent.release(given);
        }
    }

    /// Hands `bytes` charged to this share over to its parent: they stay
    /// charged there when the share is dropped (a part kept whole).
    pub(crate) fn hand_over(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used - bytes.min(used))
            });
    }

    /// Bytes charged now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

impl Drop for KeptBudget {
    fn drop(&mut self) {
        if let Some(parent) = &self.parent {
            parent.release(*self.used.get_mut());
        }
    }
}

thread_local! {
    /// The budget of the reply this thread parses, for deserializers that
    /// cannot be handed one.
    static CURRENT: RefCell<Option<Arc<KeptBudget>>> = const { RefCell::new(None) };
}

/// Runs `f` with `budget` as this thread's budget (see [`current`]).
pub(crate) fn scope<T>(budget: &Arc<KeptBudget>, f: impl FnOnce() -> T) -> T {
    let before = CURRENT.with(|c| c.replace(Some(budget.clone())));
    parse_error::forget_noted_refusal();
    let out = f();
    CURRENT.with(|c| *c.borrow_mut() = before);
    out
}

/// The budget of the reply this thread parses; unlimited outside [`scope`].
pub(crate) fn current() -> Arc<KeptBudget> {
    CURRENT
        .with(|c| c.borrow().clone())
        .unwrap_or_else(KeptBudget::unlimited)
}

/// Costs summed before they are charged: a parser reads a byte at a time.
const CHARGE_BATCH: usize = 4096;

/// A reply's body, read on for a parser that keeps at most what it reads:
/// each byte it hands out is charged, but whitespace outside strings
/// (which no parser keeps), every `{` as [`OBJECT_COST`], every `[` as
/// `LIST_COST`. A refused charge, or a string longer than
/// [`MAX_STRING`], ends the body with an error.
pub(crate) struct ChargedReader<'a> {
    inner: &'a mut dyn BufRead,
    budget: Arc<KeptBudget>,
    in_string: bool,
    escaped: bool,
    /// Bytes of the string being read so far.
    string_len: usize,
    /// The last byte handed out was whitespace outside a string.
    after_space: bool,
    /// Cost read but not yet charged (below [`CHARGE_BATCH`]).
    owed: usize,
}

impl<'a> ChargedReader<'a> {
    /// Reads `inner`, charging `budget`.
    pub(crate) fn new(inner: &'a mut dyn BufRead, budget: Arc<KeptBudget>) -> ChargedReader<'a> {
        ChargedReader {
            inner,
            budget,
            in_string: false,
            escaped: false,
            string_len: 0,
            after_space: false,
            owed: 0,
        }
    }

    /// What `bytes` cost; `None` past [`MAX_STRING`].
    fn cost(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut cost = 0;
        for &b in bytes {
            self.after_space = !self.in_string && is_space(b);
            if self.in_string {
                step_in_string(&mut self.in_string, &mut self.escaped, b);
                self.string_len += 1;
                if self.string_len > MAX_STRING {
                    return None;
                }
                cost += 1;
            } else if !is_space(b) {
                self.in_string = b == b'"';
                self.string_len = 0;
                cost += match b {
                    b'{' => OBJECT_COST,
                    b'[' => LIST_COST,
                    _ => 1,
                };
            }
        }
        Some(cost)
    }
}

impl Read for ChargedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = loop {
            let available = self.inner.fill_buf()?;
            if available.is_empty() {
                break 0;
            }
            // A run of whitespace outside strings reaches the parser as its
            // first byte only: a parser reads a byte at a time, and a reply
            // of endless whitespace is then read as fast as it arrives.
            if !self.in_string && self.after_space {
                let run = available.iter().take_while(|b| is_space(**b)).count();
                if run > 0 {
                    self.inner.consume(run);
                    continue;
                }
            }
            // Up to the first whitespace outside strings, whose run the
            // next read skips.
            let (mut in_string, mut escaped) = (self.in_string, self.escaped);
            let mut n = 0;
            while n < buf.len().min(available.len()) {
                let b = available[n];
                n += 1;
                if in_string {
                    step_in_string(&mut in_string, &mut escaped, b);
                } else if is_space(b) {
                    break;
                } else {
                    in_string = b == b'"';
                }
            }
            buf[..n].copy_from_slice(&available[..n]);
            self.inner.consume(n);
            break n;
        };
        let Some(cost) = self.cost(&buf[..n]) else {
            return Err(std::io::Error::other(format!(
                "a string longer than {MAX_STRING} bytes: not a nats-server reply"
            )));
        };
        self.owed += cost;
        if self.owed < CHARGE_BATCH && n > 0 {
            return Ok(n);
        }
        if !self.budget.charge(std::mem::take(&mut self.owed)) {
            return Err(std::io::Error::other(self.budget.refused()));
        }
        Ok(n)
    }
}

/// JSON's whitespace.
pub(crate) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// Follows a string over its byte `b`: after a backslash the byte is
/// escaped; an unescaped `"` ends the string (`in_string` false).
pub(crate) fn step_in_string(in_string: &mut bool, escaped: &mut bool, b: u8) {
    if *escaped {
        *escaped = false;
    } else if b == b'\\' {
        *escaped = true;
    } else if b == b'"' {
        *in_string = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit_and_are_given_back() {
        let b = KeptBudget::new(100);
        assert!(b.charge(60) && b.charge(40));
        assert!(!b.charge(1));
        assert_eq!(b.used(), 100);
        b.release(50);
        assert!(b.charge(50));
        assert!(KeptBudget::unlimited().charge(usize::MAX));
    }

    #[test]
    fn a_share_charges_its_parent_and_gives_back_on_drop() {
        let parent = KeptBudget::new(100);
        assert!(parent.charge(30));
        let part = KeptBudget::share(&parent);
        assert!(part.charge(50));
        assert_eq!((part.used(), parent.used()), (50, 80));
        assert!(!part.charge(30));
        assert_eq!((part.used(), parent.used()), (50, 80));
        part.release(20);
        assert_eq!((part.used(), parent.used()), (30, 60));
        drop(part);
        assert_eq!(parent.used(), 30);
        // What a share hands over stays charged to its parent.
        let part = KeptBudget::share(&parent);
        assert!(part.charge(50));
        part.hand_over(20);
        assert_eq!((part.used(), parent.used()), (30, 80));
        drop(part);
        assert_eq!(parent.used(), 50);
    }

    #[test]
    fn a_reader_charges_what_a_parser_can_keep() {
        let charged = |text: &str| {
            let b = KeptBudget::unlimited();
            let mut input = text.as_bytes();
            let mut out = Vec::new();
            ChargedReader::new(&mut input, b.clone())
                .read_to_end(&mut out)
                .unwrap();
            // What a parser reads is the text, whitespace runs cut to one.
            let runs_cut = text.replace("  ", " ").replace("\n\n", "\n");
            assert_eq!(String::from_utf8(out).unwrap(), runs_cut);
            b.used()
        };
        // Whitespace outside strings is free; inside, it is text kept.
        assert_eq!(charged("  [1, 2]\n\n"), 4 + LIST_COST);
        // A run of whitespace reaches the parser as one byte.
        let mut input: &[u8] = b"[1,  \n  2]  ";
        let mut out = Vec::new();
        ChargedReader::new(&mut input, KeptBudget::unlimited())
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, b"[1, 2] ");
        let json: Vec<u8> = serde_json::from_reader(ChargedReader::new(
            &mut &b"[1 ,\t\t 2]"[..],
            KeptBudget::unlimited(),
        ))
        .unwrap();
        assert_eq!(json, [1, 2]);
        assert_eq!(charged(r#""a b""#), 5);
        // An escaped quote does not end a string.
        assert_eq!(charged(r#""a\" {" {}"#), 7 + OBJECT_COST + 1);
        // A refused charge ends the body with an error.
        let b = KeptBudget::new(1000);
        let mut endless = std::io::BufReader::new(std::io::repeat(b'1'));
        let mut reader = ChargedReader::new(&mut endless, b.clone());
        let e = std::io::copy(&mut reader, &mut std::io::sink()).unwrap_err();
        assert!(e.to_string().contains(parse_error::REFUSED), "{e}");
        // A string without end is refused at its limit, whatever the budget.
        let quote: &[u8] = b"\"";
        let mut endless = std::io::BufReader::new(quote.chain(std::io::repeat(b'a')));
        let mut reader = ChargedReader::new(&mut endless, KeptBudget::unlimited());
        let e = std::io::copy(&mut reader, &mut std::io::sink()).unwrap_err();
        assert!(e.to_string().contains("longer than 65536"), "{e}");
    }

    #[test]
    fn a_thread_sees_the_budget_of_its_scope() {
        let b = KeptBudget::new(7);
        assert_eq!(current().limit(), usize::MAX);
        scope(&b, || assert_eq!(current().limit(), 7));
        assert_eq!(current().limit(), usize::MAX);
    }
}
