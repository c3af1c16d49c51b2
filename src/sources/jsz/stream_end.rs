//! Finds where a stream of a `/jsz` reply ends, and keeps the bytes held
//! for it small when a reply pads it.
//!
//! Inside a stream only three bytes matter: `"` (strings, in which nothing
//! else counts), `{` and `}` (the stream ends at the `}` that closes its
//! first `{`). Square brackets need not be followed: in valid JSON the
//! braces balance on their own, and a stream cut at a wrong place is not
//! valid JSON, which its parse then says. So the bytes are read 64 at a
//! time as bit masks of those three bytes; only a block with a brace
//! outside a string, or with a backslash (an escape, rare in `/jsz`), is
//! looked at byte by byte, which is much faster than following every byte
//! of a large reply (`benches/jsz_fetch.rs` measures it).
//!
//! The reply is indented, and a stream is kept as sent, whitespace
//! included, to be parsed from one slice. A stream that grows past
//! [`COMPACT_FROM`] has its runs of whitespace outside strings cut to one
//! byte as it grows, so that padding never makes the bytes held more than
//! twice what is kept.

use crate::sources::kept::{is_space, step_in_string};

/// Bytes of a stream held before its whitespace runs are cut: more than a
/// stream of 100 consumers takes (about 110 KB indented).
pub(super) const COMPACT_FROM: usize = 1 << 20;

/// Where the scan is inside a stream.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct InStream {
    /// Open braces of the stream; 0 outside one.
    pub(crate) depth: usize,
    /// Inside a string.
    pub(crate) in_string: bool,
    /// The byte before was a backslash in a string.
    pub(crate) escaped: bool,
}

/// Where a block of 64 bytes has the bytes that matter: bit `i` for `block[i]`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

/// [`Masks`] 16 bytes at a time with SSE2, which every x86_64 processor has.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn masks(block: &[u8; 64]) -> Masks {
    // SAFETY: the intrinsics only need SSE2, which this target enables
    // (the `cfg` above); none of them reads or writes memory.
    unsafe { sse2_masks(block) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn sse2_masks(block: &[u8; 64]) -> Masks {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x};
    let mut m = Masks::default();
    let (quote, backslash) = (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8));
    let (open, close) = (_mm_set1_epi8(b'{' as i8), _mm_set1_epi8(b'}' as i8));
    for (k, part) in block.chunks_exact(16).enumerate() {
        let low = i64::from_le_bytes(part[..8].try_into().expect("8 bytes"));
        let high = i64::from_le_bytes(part[8..].try_into().expect("8 bytes"));
        let v = _mm_set_epi64x(high, low);
        let shift = 16 * k;
        m.quote |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) as u16) << shift;
        m.backslash |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)) as u16) << shift;
        m.open |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, open)) as u16) << shift;
        m.close |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, close)) as u16) << shift;
    }
    m
}

/// [`Masks`] a byte at a time, elsewhere.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn masks_by_byte(block: &[u8; 64]) -> Masks {
    let mut m = Masks::default();
    for (i, &b) in block.iter().enumerate() {
        let bit = 1 << i;
        match b {
            b'"' => m.quote |= bit,
            b'\\' => m.backslash |= bit,
            b'{' => m.open |= bit,
            b'}' => m.close |= bit,
            _ => {}
        }
    }
    m
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
use masks_by_byte as masks;

/// Each bit set from a set bit of `quotes` on up to the next, that one
/// excluded: the bytes inside strings that open in the block.
fn prefix_xor(mut quotes: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        quotes ^= quotes << shift;
    }
    quotes
}

impl InStream {
    /// Scans `buf` from `from`; returns the index of the `}` that ends the
    /// stream, or `None` when the buffer ends first (the state then goes on
    /// in the next buffer).
    pub(super) fn find_end(&mut self, buf: &[u8], from: usize) -> Option<usize> {
        let mut i = from;
        while i < buf.len() {
            // The buffer's last bytes, or a block that starts escaped: one
            // byte at a time.
            let Some(block) = buf.get(i..i + 64).filter(|_| !self.escaped) else {
                let end = buf.len().min(i + 64);
                if let Some(at) = self.bytes(buf, i, end) {
                    return Some(at);
                }
                i = end;
                continue;
            };
            let block: &[u8; 64] = block.try_into().expect("64 bytes");
            let m = masks(block);
            if m.backslash != 0 {
                if let Some(at) = self.bytes(buf, i, i + 64) {
                    return Some(at);
                }
                i += 64;
                continue;
            }
            let carry = if self.in_string { u64::MAX } else { 0 };
            let strings = prefix_xor(m.quote) ^ carry;
            self.in_string = strings >> 63 == 1;
            let open = m.open & !strings;
            let close = m.close & !strings;
            if open == 0 && (close.count_ones() as usize) < self.depth {
                self.depth -= close.count_ones() as usize;
                i += 64;
                continue;
            }
            let mut braces = open | close;
            while braces != 0 {
                let bit = braces.trailing_zeros();
                braces &= braces - 1;
                if open >> bit & 1 == 1 {
                    self.depth += 1;
                } else {
                    self.depth -= 1;
                    if self.depth == 0 {
                        // A `}` outside a string: the stream ends out of one.
                        self.in_string = false;
                        return Some(i + bit as usize);
                    }
                }
            }
            i += 64;
        }
        None
    }

    /// `find_end` over `buf[from..to]` one byte at a time.
    fn bytes(&mut self, buf: &[u8], from: usize, to: usize) -> Option<usize> {
        for (at, &b) in buf.iter().enumerate().take(to).skip(from) {
            if self.in_string {
                step_in_string(&mut self.in_string, &mut self.escaped, b);
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' => self.depth += 1,
                b'}' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Some(at);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// A stream's bytes as they are cut out, compacted once they grow large.
#[derive(Debug, Default)]
pub(super) struct StreamBytes {
    /// The bytes held.
    pub(crate) bytes: Vec<u8>,
    /// `bytes[..compacted]` has had its whitespace runs cut.
    compacted: usize,
    /// The state at `compacted`: in a string, after a backslash in one,
    /// after whitespace outside one.
    in_string: bool,
    escaped: bool,
    after_space: bool,
    /// Compact again once the bytes held pass this.
    limit: usize,
}

impl StreamBytes {
    /// Appends `more`, cutting whitespace runs once the stream is large.
    pub(super) fn extend(&mut self, more: &[u8]) {
        self.bytes.extend_from_slice(more);
        if self.bytes.len() > self.limit.max(COMPACT_FROM) {
            self.compact();
            self.limit = 2 * self.bytes.len();
        }
    }

    /// Takes the stream's bytes, leaving `room` (emptied) for the next one.
    pub(super) fn take(&mut self, mut room: Vec<u8>) -> Vec<u8> {
        room.clear();
        let next = StreamBytes {
            bytes: room,
            ..StreamBytes::default()
        };
        std::mem::replace(self, next).bytes
    }

    /// Cuts every run of whitespace outside strings past `compacted` to its
    /// first byte, in place.
    fn compact(&mut self) {
        let mut kept = self.compacted;
        for read in self.compacted..self.bytes.len() {
            let b = self.bytes[read];
            if self.in_string {
                step_in_string(&mut self.in_string, &mut self.escaped, b);
            } else if is_space(b) {
                if self.after_space {
                    continue;
                }
                self.after_space = true;
            } else {
                self.after_space = false;
                self.in_string = b == b'"';
            }
            self.bytes[kept] = b;
            kept += 1;
        }
        self.bytes.truncate(kept);
        self.compacted = kept;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where each way finds the end: 64 at a time, and byte by byte.
    fn ends(text: &[u8]) -> (Option<usize>, Option<usize>) {
        let start = InStream {
            depth: 1,
            ..InStream::default()
        };
        let (mut blocks, mut bytes) = (start, start);
        (blocks.find_end(text, 0), bytes.bytes(text, 0, text.len()))
    }

    #[test]
    fn blocks_find_the_end_bytes_find() {
        let unit = r#""a":{"b":"}{\"}","c":[1,{"d":"x"}]},"e":"\\","f":{}"#;
        for pad in 0..130 {
            for repeat in 1..4 {
                let body = format!("{}{}}} tail {{", " ".repeat(pad), unit.repeat(repeat));
                let (blocks, bytes) = ends(body.as_bytes());
                assert_eq!(blocks, bytes, "pad {pad}, repeat {repeat}");
                assert_eq!(bytes, Some(body.len() - 8), "pad {pad}");
            }
        }
    }

    #[test]
    fn both_ways_of_finding_the_bytes_agree() {
        let mut block = [b'a'; 64];
        for (i, b) in block.iter_mut().enumerate() {
            *b = b"\"\\{}x "[i * 7 % 6];
        }
        assert_eq!(masks(&block), masks_by_byte(&block));
        assert_ne!(masks(&block).quote, 0);
    }

    #[test]
    fn the_state_goes_on_across_buffers() {
        let body = format!("{}\"{{}}{}\"}}", " ".repeat(70), "x".repeat(100));
        for cut in 0..body.len() {
            let mut s = InStream {
                depth: 1,
                ..InStream::default()
            };
            let (first, second) = body.as_bytes().split_at(cut);
            let found = s
                .find_end(first, 0)
                .or_else(|| s.find_end(second, 0).map(|at| at + cut));
            assert_eq!(found, Some(body.len() - 1), "cut at {cut}");
        }
    }

    #[test]
    fn escapes_at_every_block_end_cost_no_stack() {
        // A backslash as the last byte of every block: each next block
        // starts escaped and is read byte by byte.
        let block = format!("{}\\", "a".repeat(63));
        let body = format!("\"{}\\{}x\"}}", "a".repeat(62), block.repeat(200_000));
        let mut s = InStream {
            depth: 1,
            ..InStream::default()
        };
        assert_eq!(s.find_end(body.as_bytes(), 0), Some(body.len() - 1));
    }

    #[test]
    fn padding_is_cut_once_a_stream_is_large() {
        let mut s = StreamBytes::default();
        s.extend(b"{\"k\": \"  two  spaces  \",");
        for _ in 0..1000 {
            s.extend(&[b' '; 10_000]);
            s.extend(b"\"v\" ,");
        }
        assert!(
            s.bytes.len() < 2 * (COMPACT_FROM + 10_005),
            "{}",
            s.bytes.len()
        );
        s.compact();
        let text = String::from_utf8(s.take(Vec::new())).unwrap();
        let kept = format!("{{\"k\": \"  two  spaces  \",{}", " \"v\" ,".repeat(1000));
        assert_eq!(text, kept);
    }
}
