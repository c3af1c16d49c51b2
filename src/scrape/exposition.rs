//! Encodes a [`Snapshot`] and everything registered as text, streamed while
//! it is written.
//!
//! With many consumers the text is far larger than the snapshot it is
//! written from, and held whole it would be most of the exporter's memory.
//! So it is written in pieces that are sent as soon as they are done: first
//! the registry (the main part), then each per-consumer family a block of
//! consumers at a time. Up to four threads write the pieces, each its own
//! share in turn, and the pieces are sent in order; only a few are held at a
//! time, and a scraper that hangs up stops the writing.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::Stream;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

use crate::jetstream::cardinality::fold::EPHEMERAL_LABEL;
use crate::lock::LockOrRecover;
use crate::scrape::snapshot::{write_consumer_part, Snapshot, SnapshotCollector, CONSUMER_PARTS};
use crate::text::consumer_labels::ConsumerLabelText;
use crate::text::{encode_registry, Format};

/// Consumers per piece of a per-consumer family: large enough that a piece
/// costs little to hand over, small enough that the pieces in flight stay
/// well under a megabyte each (the status family writes seven lines per
/// consumer).
const BLOCK: usize = 1024;

/// The registry and the collector that writes a snapshot's main part into it.
#[derive(Debug)]
pub(crate) struct Exposition {
    registry: Registry,
    snapshot: Arc<SnapshotCollector>,
    /// The collector reads one snapshot slot: one registry encoding at a time.
    encoding: Mutex<()>,
}

impl Default for Exposition {
    fn default() -> Exposition {
        let snapshot = Arc::new(SnapshotCollector::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(snapshot.clone()));
        Exposition {
            registry,
            snapshot,
            encoding: Mutex::new(()),
        }
    }
}

/// A writer stopped before the text's end (it panicked): the text sent so
/// far is not the whole, and the response carrying it is aborted, so that a
/// scraper records a failed scrape instead of a short one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the exposition's writer stopped before the end of the text")]
pub struct ScrapeAborted;

/// What the writing threads send: the pieces in output order, spread over
/// one channel per thread (piece `i` on channel `i % threads`).
struct Pieces {
    /// The main part and how many per-consumer pieces follow it.
    head: oneshot::Receiver<(String, usize)>,
    channels: Vec<mpsc::Receiver<String>>,
}

impl Exposition {
    /// The registry, for the exporter's other parts to register their metrics in.
    pub(crate) fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The text of `snapshot` and everything registered, in `format`, as
    /// pieces in output order, written while they are sent.
    pub(crate) fn stream(
        self: &Arc<Self>,
        snapshot: Arc<Snapshot>,
        format: Format,
    ) -> impl Stream<Item = Result<Bytes, ScrapeAborted>> + Send + 'static {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let (head_tx, head) = oneshot::channel();
        let (senders, channels): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel(1)).unzip();
        let exposition = self.clone();
        // Writing is synchronous and takes long at many consumers: it runs
        // off the async workers.
        tokio::task::spawn_blocking(move || {
            exposition.write(&snapshot, format, head_tx, senders);
        });
        assemble(Pieces { head, channels }, format)
    }

    /// Writes the main part, then every per-consumer piece on `senders.len()`
    /// threads; stops early once the receiving side is gone.
    fn write(
        &self,
        snapshot: &Arc<Snapshot>,
        format: Format,
        head: oneshot::Sender<(String, usize)>,
        senders: Vec<mpsc::Sender<String>>,
    ) {
        let main = self.encode_main(snapshot, format);
        let (_, consumers) = snapshot.rows();
        // The folded ephemerals are written with the last block: there is
        // one even when every consumer is folded.
        let folded = usize::from(!snapshot.folded.is_empty());
        let blocks = consumers.len().div_ceil(BLOCK).max(folded);
        let pieces = CONSUMER_PARTS * blocks;
        // The main part is sent while the labels are rendered.
        if head.send((main, pieces)).is_err() {
            return;
        }
        // Every per-consumer family repeats each consumer's labels: rendered once.
        let mut labels =
            ConsumerLabelText::new(consumers.iter().map(|(a, s, c, _)| (*a, *s, &c.name[..])));
        for f in &snapshot.folded {
            labels.push(&f.account, &f.stream, EPHEMERAL_LABEL);
        }
        let threads = senders.len();
        let write_share = |(first, sender): (usize, mpsc::Sender<String>)| {
            for piece in (first..pieces).step_by(threads) {
                let (part, block) = (piece / blocks, piece % blocks);
                let end = ((block + 1) * BLOCK).min(consumers.len());
                let block: Range<usize> = block * BLOCK..end;
                let mut out = String::new();
                let rows = (consumers.as_slice(), &labels);
                write_consumer_part(&mut out, format, snapshot, rows, (part, block));
                // Up to half of a piece is room it grew into; the pieces
                // waiting to be sent are a few MB at the status family.
                out.shrink_to_fit();
                if sender.blocking_send(out).is_err() {
                    return;
                }
            }
        };
        std::thread::scope(|scope| {
            let mut shares = senders.into_iter().enumerate();
            let own = shares.next();
            for share in shares {
                scope.spawn(move || write_share(share));
            }
            if let Some(share) = own {
                write_share(share);
            }
        });
    }

    /// The registry's text, the snapshot's main part in it.
    fn encode_main(&self, snapshot: &Arc<Snapshot>, format: Format) -> String {
        let _one_at_a_time = self.encoding.lock_or_recover();
        self.snapshot.set(snapshot.clone());
        let text = encode_registry(&self.registry, format, 0);
        self.snapshot.clear();
        text
    }
}

/// The pieces in order as the text's chunks: a family's header once, before
/// its first sample; the OpenMetrics `# EOF` last. A writer that stopped
/// before its last piece (it panicked) ends the text there with
/// [`ScrapeAborted`].
fn assemble(
    pieces: Pieces,
    format: Format,
) -> impl Stream<Item = Result<Bytes, ScrapeAborted>> + Send + 'static {
    /// Where the assembly is.
    enum Step {
        Head(Pieces),
        Piece {
            pieces: Pieces,
            next: usize,
            count: usize,
            headed: Vec<bool>,
        },
        Done,
    }
    futures::stream::unfold(Step::Head(pieces), move |step| async move {
        let (mut pieces, mut next, count, mut headed) = match step {
            Step::Done => return None,
            Step::Head(mut pieces) => {
                let Ok((main, count)) = (&mut pieces.head).await else {
                    return Some((Err(ScrapeAborted), Step::Done));
                };
                let headed = vec![false; CONSUMER_PARTS];
                let step = Step::Piece {
                    pieces,
                    next: 0,
                    count,
                    headed,
                };
                return Some((Ok(Bytes::from(main)), step));
            }
            Step::Piece {
                pieces,
                next,
                count,
                headed,
            } => (pieces, next, count, headed),
        };
        let threads = pieces.channels.len();
        let blocks = count / CONSUMER_PARTS;
        while next < count {
            // A channel closes early only when its writer is gone.
            let Some(text) = pieces.channels[next % threads].recv().await else {
                return Some((Err(ScrapeAborted), Step::Done));
            };
            let part = next / blocks;
            next += 1;
            if text.is_empty() {
                continue;
            }
            // Every piece of a family opens with its header: sent once.
            let repeated = if std::mem::replace(&mut headed[part], true) {
                header_len(&text)
            } else {
                0
            };
            let text = Bytes::from(text).slice(repeated..);
            return Some((
                Ok(text),
                Step::Piece {
                    pieces,
                    next,
                    count,
                    headed,
                },
            ));
        }
        match format {
            Format::OpenMetrics => Some((Ok(Bytes::from_static(b"# EOF\n")), Step::Done)),
            Format::Classic => None,
        }
    })
}

/// The length of the header lines (`# HELP`, `# TYPE`, `# UNIT`) that open
/// a piece; sample lines start with the metric's name.
fn header_len(text: &str) -> usize {
    let mut len = 0;
    for line in text.split_inclusive('\n') {
        if !line.starts_with('#') {
            break;
        }
        len += line.len();
    }
    len
}
