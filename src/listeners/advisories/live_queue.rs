//! What the live listener received and has not counted yet, bounded in
//! messages (`--advisories-buffer`) and in bytes
//! (`--advisories-buffer-bytes`). The session task only moves messages from
//! the subscription into it and a task of its own counts them, so a burst
//! of large messages cannot make the exporter hold more than the byte bound
//! while the counting (or a dead-letter copy) catches up; past either bound
//! a message is dropped, and the caller counts it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_nats::Message;
use tokio::sync::mpsc;

/// The sending side, in the session task.
pub(super) struct Queue {
    tx: mpsc::UnboundedSender<Message>,
    held: Arc<Held>,
    max_messages: usize,
    max_bytes: usize,
}

/// The receiving side, in the counting task.
pub(super) struct Received {
    rx: mpsc::UnboundedReceiver<Message>,
    held: Arc<Held>,
}

#[derive(Debug, Default)]
struct Held {
    messages: AtomicUsize,
    bytes: AtomicUsize,
}

/// A queue of at most `max_messages` messages and `max_bytes` bytes.
pub(super) fn queue(max_messages: usize, max_bytes: usize) -> (Queue, Received) {
    let (tx, rx) = mpsc::unbounded_channel();
    let held = Arc::new(Held::default());
    let queue = Queue {
        tx,
        held: held.clone(),
        max_messages: max_messages.max(1),
        max_bytes,
    };
    (queue, Received { rx, held })
}

/// The bytes a message holds: what the server sent (subject, headers and
/// payload), at least its payload.
fn size(msg: &Message) -> usize {
    msg.length.max(msg.payload.len())
}

impl Queue {
    /// Queues `msg`; false when it was dropped: the queue holds its most
    /// messages, or the message would take it past its bytes. A message
    /// finding the queue empty is always taken, so one larger than the
    /// byte bound is still counted.
    pub(super) fn push(&self, msg: Message) -> bool {
        let size = size(&msg);
        // One sender: the counts only fall between these loads and the adds.
        let messages = self.held.messages.load(Ordering::Acquire);
        let bytes = self.held.bytes.load(Ordering::Acquire);
        if messages >= self.max_messages
            || (messages > 0 && bytes.saturating_add(size) > self.max_bytes)
        {
            return false;
        }
        self.held.messages.fetch_add(1, Ordering::AcqRel);
        self.held.bytes.fetch_add(size, Ordering::AcqRel);
        match self.tx.send(msg) {
            Ok(()) => true,
            Err(mpsc::error::SendError(msg)) => {
                drop(msg);
                self.held.release(size);
                false
            }
        }
    }

    /// Bytes held now (for tests).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.held.bytes.load(Ordering::Acquire)
    }
}

impl Held {
    fn release(&self, size: usize) {
        self.messages.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(size, Ordering::AcqRel);
    }
}

impl Received {
    /// The next message; `None` once the queue was dropped and emptied.
    pub(super) async fn next(&mut self) -> Option<Message> {
        let msg = self.rx.recv().await?;
        self.held.release(size(&msg));
        Some(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: usize) -> Message {
        Message {
            subject: "$JS.EVENT.ADVISORY.X".into(),
            reply: None,
            payload: vec![b'x'; payload].into(),
            headers: None,
            status: None,
            description: None,
            length: payload + 20,
        }
    }

    #[tokio::test]
    async fn holds_at_most_its_bytes_and_messages() {
        let (queue, mut received) = queue(100, 1_000);
        let taken = (0..50).filter(|_| queue.push(message(230))).count();
        // 250 bytes each: 4 fit in 1,000.
        assert_eq!(taken, 4);
        assert_eq!(queue.bytes(), 1_000);
        received.next().await.unwrap();
        assert_eq!(queue.bytes(), 750);
        assert!(queue.push(message(230)));
        assert!(!queue.push(message(230)));
        // A message larger than the bound is taken when the queue is empty.
        while queue.bytes() > 0 {
            received.next().await.unwrap();
        }
        assert!(queue.push(message(5_000)));
        assert!(!queue.push(message(1)));
        let (few, _received) = super::queue(2, usize::MAX);
        assert_eq!((0..5).filter(|_| few.push(message(1))).count(), 2);
    }
}
