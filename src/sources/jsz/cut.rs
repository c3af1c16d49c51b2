//! The cut of a `/jsz` reply read in pieces (see `split`): each stream of
//! `account_details[].stream_detail[]` goes to its parser as soon as its
//! last byte is read; the rest is the skeleton, with `null` where the
//! streams were. Outside streams the scan follows strings, brackets and the
//! keys on a stream's way from the root; inside one, `stream_end` finds its
//! end. Whitespace runs outside streams are kept as one byte.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};

use super::stream_end::{InStream, StreamBytes};
use crate::sources::kept::KeptBudget;
use crate::sources::kept::{is_space, step_in_string};
use crate::sources::parse_error::ParseError;

/// Text held to be parsed is charged this many times its room: once for
/// itself, once for what its parse may hold besides the values it keeps
/// (serde's scratch as it skips nested lists, the skeleton's strings).
pub(super) const HELD_TEXT: usize = 2;

/// Keys a stream's way from the root passes through; others are `Other`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    None,
    AccountDetails,
    StreamDetail,
    Other,
}

/// An open object or array, and the key it is the value of.
#[derive(Clone, Copy)]
struct Frame {
    object: bool,
    key: Key,
}

/// Longest key worth remembering: the ones looked for are shorter.
const KEY_MAX: usize = 16;

/// Open objects and arrays followed: one more than a stream's depth, so that
/// hostile nesting costs no memory.
const FRAMES_KEPT: usize = 5;

#[derive(Default)]
struct Scan {
    in_string: bool,
    escaped: bool,
    /// The last string outside a stream, up to `KEY_MAX` bytes.
    string: Vec<u8>,
    long_string: bool,
    /// The key just read, waiting for its value.
    key: Option<Key>,
    /// The open objects and arrays, the first `FRAMES_KEPT` of them.
    frames: Vec<Frame>,
    /// Open beyond those: only counted, a stream is never that deep.
    deeper: usize,
    /// Where the scan is in the stream being cut out; depth 0 outside one.
    stream: InStream,
    /// The byte before was whitespace outside a string: a run of them is
    /// kept as its first, so that padding cannot fill the memory.
    after_space: bool,
}

impl Scan {
    /// True at a `{` that opens an element of
    /// `account_details[].stream_detail`.
    fn at_stream(&self) -> bool {
        self.deeper == 0
            && matches!(
                self.frames.as_slice(),
                [
                    Frame {
                        object: true,
                        key: Key::None
                    },
                    Frame {
                        object: false,
                        key: Key::AccountDetails
                    },
                    Frame {
                        object: true,
                        key: Key::None
                    },
                    Frame {
                        object: false,
                        key: Key::StreamDetail
                    },
                ]
            )
    }

    /// Follows byte `b` of a string outside a stream, keeping its first
    /// `KEY_MAX` bytes.
    fn string_byte(&mut self, b: u8) {
        step_in_string(&mut self.in_string, &mut self.escaped, b);
        if !self.in_string {
            // The closing quote: the string read is complete.
            return;
        }
        if self.string.len() < KEY_MAX {
            self.string.push(b);
        } else {
            self.long_string = true;
        }
    }

    /// Follows byte `b` outside strings and streams: strings, objects,
    /// arrays and keys.
    fn structure(&mut self, b: u8) {
        match b {
            b'"' => {
                self.in_string = true;
                self.string.clear();
                self.long_string = false;
            }
            b'{' | b'[' => {
                let key = self.key.take().unwrap_or(Key::None);
                if self.frames.len() < FRAMES_KEPT {
                    self.frames.push(Frame {
                        object: b == b'{',
                        key,
                    });
                } else {
                    self.deeper += 1;
                }
            }
            b'}' | b']' => {
                if self.deeper > 0 {
                    self.deeper -= 1;
                } else {
                    self.frames.pop();
                }
                self.key = None;
            }
            b':' => self.key = Some(self.key_of_string()),
            b',' => self.key = None,
            _ => {}
        }
    }

    fn key_of_string(&self) -> Key {
        match self.string.as_slice() {
            _ if self.long_string => Key::Other,
            b"account_details" => Key::AccountDetails,
            b"stream_detail" => Key::StreamDetail,
            _ => Key::Other,
        }
    }
}

/// Reads `input` to its end, hands each stream to `emit` as soon as its
/// last byte is read (`emit` takes the bytes, leaving room for the next;
/// false stops the reading, as does `stop` once set), and returns the rest: the skeleton, with
/// `null` where the streams were. The room the skeleton and the stream
/// being cut take is charged to `budget` as it grows (a stream's charge
/// goes with it to its parser); a refused charge stops the reading.
pub(super) fn cut(
    input: &mut dyn BufRead,
    (stop, budget): (&AtomicBool, &KeptBudget),
    mut emit: impl FnMut(&mut StreamBytes) -> bool,
) -> Result<Vec<u8>, ParseError> {
    let mut cutter = Cutter::new(budget);
    loop {
        if stop.load(Ordering::Acquire) {
            return Err("the stream parser stopped".into());
        }
        cutter.charge_rooms()?;
        let buf = input.fill_buf().map_err(ParseError::io)?;
        if buf.is_empty() {
            break;
        }
        cutter.cut_piece(buf, &mut emit)?;
        let n = buf.len();
        input.consume(n);
    }
    Ok(cutter.finish())
}

/// The cut under way: the scan, the skeleton and the stream being cut out,
/// with the room of each as charged to the budget.
struct Cutter<'a> {
    scan: Scan,
    skeleton: Vec<u8>,
    stream: StreamBytes,
    skeleton_charged: usize,
    stream_charged: usize,
    budget: &'a KeptBudget,
}

/// Charges `budget` with what `room` holds beyond `charged` (and counts it
/// in); a refusal is the budget's error.
fn charge_growth(budget: &KeptBudget, room: usize, charged: &mut usize) -> Result<(), ParseError> {
    let more = room.saturating_sub(*charged);
    *charged = (*charged).max(room);
    if budget.charge(more) {
        Ok(())
    } else {
        Err(budget.refused().into())
    }
}

impl<'a> Cutter<'a> {
    fn new(budget: &'a KeptBudget) -> Cutter<'a> {
        Cutter {
            scan: Scan::default(),
            skeleton: Vec::new(),
            stream: StreamBytes::default(),
            skeleton_charged: 0,
            stream_charged: 0,
            budget,
        }
    }

    /// Charges what the skeleton and the stream being cut have grown by.
    fn charge_rooms(&mut self) -> Result<(), ParseError> {
        let skeleton = HELD_TEXT * self.skeleton.capacity();
        charge_growth(self.budget, skeleton, &mut self.skeleton_charged)?;
        let stream = HELD_TEXT * self.stream.bytes.capacity();
        charge_growth(self.budget, stream, &mut self.stream_charged)
    }

    /// Cuts one piece of the input: each byte goes to the stream being cut
    /// out or to the skeleton, and every stream completed goes to `emit`.
    fn cut_piece(
        &mut self,
        buf: &[u8],
        emit: &mut impl FnMut(&mut StreamBytes) -> bool,
    ) -> Result<(), ParseError> {
        // Bytes from `run` on go to the stream being cut out, or else to
        // the skeleton.
        let mut run = 0;
        let mut i = 0;
        while i < buf.len() {
            if self.scan.stream.depth > 0 {
                // Inside a stream, most of the reply: see `stream_end`.
                let Some(at) = self.scan.stream.find_end(buf, i) else {
                    break;
                };
                self.stream.extend(&buf[run..=at]);
                run = at + 1;
                i = at + 1;
                self.hand_over(emit)?;
                continue;
            }
            i += 1;
            run = self.step_outside(buf, run, i);
        }
        let rest = &buf[run..];
        if self.scan.stream.depth > 0 {
            self.stream.extend(rest);
        } else {
            self.skeleton.extend_from_slice(rest);
        }
        Ok(())
    }

    /// Hands the stream just completed to `emit`.
    fn hand_over(
        &mut self,
        emit: &mut impl FnMut(&mut StreamBytes) -> bool,
    ) -> Result<(), ParseError> {
        // The stream's room goes charged to its parser, which gives it
        // back; the next stream's room is charged anew.
        let room = HELD_TEXT * self.stream.bytes.capacity();
        charge_growth(self.budget, room, &mut self.stream_charged)?;
        self.stream_charged = 0;
        if emit(&mut self.stream) {
            Ok(())
        } else {
            Err("the stream parser stopped".into())
        }
    }

    /// Follows `buf[i - 1]`, a byte outside any stream, whose run of bytes
    /// not yet kept starts at `run`; returns where that run starts now.
    fn step_outside(&mut self, buf: &[u8], run: usize, i: usize) -> usize {
        let (scan, b) = (&mut self.scan, buf[i - 1]);
        if !scan.in_string && is_space(b) {
            let after_space = std::mem::replace(&mut scan.after_space, true);
            if after_space {
                self.skeleton.extend_from_slice(&buf[run..i - 1]);
                return i;
            }
            return run;
        }
        scan.after_space = false;
        if scan.in_string {
            scan.string_byte(b);
        } else if b == b'{' && scan.at_stream() {
            self.skeleton.extend_from_slice(&buf[run..i - 1]);
            self.skeleton.extend_from_slice(b"null");
            scan.stream.depth = 1;
            return i - 1;
        } else {
            scan.structure(b);
        }
        run
    }

    /// The skeleton, once the input has ended.
    fn finish(mut self) -> Vec<u8> {
        if self.scan.stream.depth > 0 {
            // Cut short inside a stream: the skeleton alone could look complete.
            self.skeleton.extend_from_slice(&self.stream.bytes);
        }
        self.skeleton
    }
}
