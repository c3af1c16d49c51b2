//! Parses a `/jsz` reply read in pieces: each stream of
//! `account_details[].stream_detail[]` is cut out of the bytes as soon as it
//! is complete and parsed from its own slice; the rest (the skeleton, with
//! `null` where the streams were) is parsed last and the streams put back.
//!
//! Why: parsing from a slice is about twice as fast as serde_json's
//! `from_reader`, and a stream is at most a few MB, so the whole reply is
//! never held, only the few streams being parsed. The cut is found by a
//! scan that only follows strings and brackets (inside a stream, braces:
//! see `stream_end`); anything it does not recognise (an escaped key, a
//! repeated key) stays in the skeleton and is parsed there, so the result
//! is always what parsing the whole would give. A stream that is not JSON
//! fails as soon as it ends; the rest of the reply is checked at its end.
//! Whitespace runs outside streams, and inside a stream once it is large,
//! are kept as one byte, so a reply padded with them is never held whole
//! either.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Mutex;

use super::cut::{cut, HELD_TEXT};
use super::de::Kept;
use super::{AccountDetail, Jsz, StreamDetail};
use crate::sources::kept;
use crate::sources::parse_error::ParseError;

/// Parses a `/jsz` reply already held whole (a NATS reply) in one pass:
/// what [`parse`] gives for the same bytes.
pub fn parse_whole(body: &[u8]) -> Result<Jsz, ParseError> {
    serde_json::from_slice(body).map_err(ParseError::json)
}

/// What a parsed stream is kept as: itself ([`parse`]), or a smaller form
/// made from it as soon as it is parsed ([`parse_reduced`]).
pub(crate) type Reduce<'r, S> = &'r (dyn Fn(StreamDetail) -> S + Sync);

/// [`parse_reduced`] of a reply already held whole (a NATS reply): cut
/// as if it were read in pieces, so that only the streams in flight are
/// held parsed before they are reduced.
pub(crate) fn parse_whole_reduced<S: Kept + Send>(
    mut body: &[u8],
    reduce: Reduce<'_, S>,
    in_flight: usize,
) -> Result<Jsz<S>, ParseError> {
    parse_reduced(&mut body, reduce, in_flight)
}

/// Streams cut out but not yet parsed, at most: a few hundred KB each at
/// 100 consumers a stream.
const STREAMS_IN_FLIGHT: usize = 4;

/// The room of a stream parsed is handed back for a later one up to this
/// size (rooms waiting are not charged); a larger one (a stream of
/// thousands of consumers) is freed.
const ROOM_KEPT: usize = 1 << 20;

/// Reads a whole `/jsz` reply from `input` and parses it; errors are
/// serde_json's text, or a refused charge. The streams are parsed on up to two more threads
/// while the reply is still being read and cut: on a loaded machine
/// reading and parsing one after the other kept the exporter's poll behind
/// the server, and parsing is most of the work. The bytes held (the
/// skeleton, the streams not yet parsed) and the consumers parsed are
/// charged to this thread's budget (`kept::current`).
pub fn parse(input: &mut dyn BufRead) -> Result<Jsz, ParseError> {
    parse_reduced(input, &|stream| stream, STREAMS_IN_FLIGHT)
}

/// [`parse`], each stream kept as `reduce` makes it as soon as it is
/// parsed: what is charged for it is then what the reduced form keeps.
/// At most `in_flight` streams wait, cut out, for a parser.
pub(crate) fn parse_reduced<S: Kept + Send>(
    input: &mut dyn BufRead,
    reduce: Reduce<'_, S>,
    in_flight: usize,
) -> Result<Jsz<S>, ParseError> {
    let budget = kept::current();
    // Set by a parser that failed: the reading stops at its next piece of
    // input, not only at the next stream's end (which an endless reply
    // after a broken stream never reaches).
    let failed = AtomicBool::new(false);
    let parsers = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let (to_parsers, cut_out) = std::sync::mpsc::sync_channel(in_flight);
    let cut_out = Mutex::new(cut_out);
    std::thread::scope(|scope| {
        let (give_back, given_back) = std::sync::mpsc::sync_channel(in_flight + 2);
        let (failed, cut_out, budget) = (&failed, &cut_out, &budget);
        let parsers: Vec<_> = (0..parsers)
            .map(|_| {
                let give_back = give_back.clone();
                scope.spawn(move || {
                    kept::scope(budget, || {
                        parse_streams(cut_out, &give_back, failed, reduce)
                    })
                })
            })
            .collect();
        drop(give_back);
        let mut count = 0;
        let skeleton = cut(input, (failed, budget), |stream| {
            let next = given_back.try_recv().unwrap_or_default();
            count += 1;
            // Parsers that stopped have failed: their error is the one to give.
            to_parsers.send((count - 1, stream.take(next))).is_ok()
        });
        drop(to_parsers);
        let mut streams: Vec<Option<S>> = Vec::new();
        streams.resize_with(count, || None);
        let mut first_error: Option<(usize, ParseError)> = None;
        for parser in parsers {
            let parsed = parser
                .join()
                .map_err(|_| "the stream parser panicked".to_string())?;
            match parsed {
                Ok(parsed) => {
                    for (at, stream) in parsed {
                        streams[at] = Some(stream);
                    }
                }
                Err((at, e)) if first_error.as_ref().is_none_or(|(first, _)| at < *first) => {
                    first_error = Some((at, e));
                }
                Err(_) => {}
            }
        }
        // A stream's error concerns bytes before anything the cut failed on.
        if let Some((at, e)) = first_error {
            return Err(e.within(&format!("stream {}", at + 1)));
        }
        let streams = streams.into_iter().collect::<Option<Vec<_>>>();
        let streams = streams.ok_or("the stream parser stopped")?;
        let skeleton = serde_json::from_slice(&skeleton?).map_err(ParseError::json)?;
        put_back(skeleton, streams, reduce)
    })
}

/// Parses the streams `cut_out` hands out, each with its place in the
/// reply, until there are no more; the first that fails stops the rest:
/// from then on every parser only takes the streams the cut still hands
/// out, unparsed, so that the cut never waits for a parser that stopped.
fn parse_streams<S: Kept>(
    cut_out: &Mutex<Receiver<(usize, Vec<u8>)>>,
    give_back: &SyncSender<Vec<u8>>,
    failed: &AtomicBool,
    reduce: Reduce<'_, S>,
) -> Result<Vec<(usize, S)>, (usize, ParseError)> {
    let budget = kept::current();
    let mut streams = Vec::new();
    let mut error = None;
    loop {
        // Nothing panics while holding the lock: a poisoned one still works.
        let next = cut_out.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok((at, mut bytes)) = next else {
            return error.map_or(Ok(streams), Err);
        };
        if !failed.load(Ordering::Acquire) {
            let parsed = serde_json::from_slice::<StreamDetail>(&bytes)
                .map_err(ParseError::json)
                .and_then(|stream| {
                    // The stream itself and the room of this list, as its
                    // consumers' list charges for them.
                    let room = streams.capacity();
                    if streams.len() == room {
                        streams.reserve(1);
                    }
                    let more = (streams.capacity() - room) * size_of::<(usize, S)>();
                    if !budget.charge(more + stream.own_heap()) {
                        return Err(budget.refused().into());
                    }
                    // What its lists charged as they were parsed, and its
                    // own heap, become what the reduced form keeps.
                    let parsed = stream.own_heap() + stream.lists();
                    let reduced = reduce(stream);
                    let keeps = reduced.own_heap() + reduced.lists();
                    budget.release(parsed.saturating_sub(keeps));
                    if budget.charge(keeps.saturating_sub(parsed)) {
                        Ok(reduced)
                    } else {
                        Err(budget.refused().into())
                    }
                });
            match parsed {
                Ok(parsed) => streams.push((at, parsed)),
                Err(e) => {
                    failed.store(true, Ordering::Release);
                    error = Some((at, e));
                }
            }
        }
        // The cut charged the bytes' room; parsed (or passed over), they
        // are given back (what the stream keeps is charged by its parse).
        budget.release(HELD_TEXT * bytes.capacity());
        bytes.clear();
        // Its room serves a later stream; never waited for.
        if bytes.capacity() <= ROOM_KEPT {
            let _ = give_back.try_send(bytes);
        }
    }
}

/// Puts the parsed streams back into the skeleton where they were cut out;
/// the streams the skeleton kept are reduced there.
fn put_back<S>(
    skeleton: Jsz<Option<StreamDetail>>,
    streams: Vec<S>,
    reduce: Reduce<'_, S>,
) -> Result<Jsz<S>, ParseError> {
    // A `null` is a stream cut out, or a `null` in the reply, which is not a
    // stream: then there are more of them than streams cut out.
    let mut cut = streams.into_iter();
    let mut restore = |kept: Option<StreamDetail>| match kept {
        Some(stream) => Ok(reduce(stream)),
        None => cut.next().ok_or("a stream is null; the reply is not /jsz"),
    };
    let mut account_details = Vec::with_capacity(skeleton.account_details.len());
    for a in skeleton.account_details {
        account_details.push(AccountDetail {
            name: a.name,
            id: a.id,
            memory: a.memory,
            storage: a.storage,
            reserved_memory: a.reserved_memory,
            reserved_storage: a.reserved_storage,
            stream_detail: a
                .stream_detail
                .into_iter()
                .map(&mut restore)
                .collect::<Result<_, _>>()?,
        });
    }
    if cut.next().is_some() {
        return Err("streams cut out but not found again; the reply is not JSON".into());
    }
    Ok(Jsz {
        now: skeleton.now,
        disabled: skeleton.disabled,
        total: skeleton.total,
        account_details,
    })
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
