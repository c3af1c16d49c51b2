//! The canary's books: which messages are out, and what became of each.
//!
//! Every message is in exactly one place: out (sent, its deadline not yet
//! passed), received (read back before its deadline) or lost (its deadline
//! passed first). So `produced == received + lost + pending` at every
//! reading, which is what makes the loss count exact. A message read back
//! after it was counted lost stays lost and is counted late as well.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What one canary message became when it was read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arrival {
    /// Back before its deadline, after this long.
    InTime(Duration),
    /// Back after its deadline: counted lost already.
    Late,
    /// A sequence this canary never sent (another client wrote on its
    /// subject, or the payload is not a sequence).
    Unknown,
}

/// The canary's counts of one account; kept behind the listener's lock.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The next message's sequence (the first is 1).
    next: u64,
    /// Messages out: sequence and the moment it was handed to the client.
    out: BTreeMap<u64, Instant>,
    /// Messages handed to the client for publishing.
    pub(crate) produced: u64,
    /// Messages the stream acknowledged.
    pub(crate) acknowledged: u64,
    /// Messages read back before their deadline.
    pub(crate) received: u64,
    /// Messages whose deadline passed before they were read back.
    pub(crate) lost: u64,
    /// Messages read back after their deadline (a subset of `lost`).
    pub(crate) late: u64,
}

impl Ledger {
    /// Takes the next message out at `now`; returns its sequence.
    pub(crate) fn send(&mut self, now: Instant) -> u64 {
        self.next += 1;
        self.produced += 1;
        self.out.insert(self.next, now);
        self.next
    }

    /// Messages out, their deadline not passed at the last expiry.
    pub(crate) fn pending(&self) -> u64 {
        self.out.len() as u64
    }

    /// Counts as lost every message out for longer than `deadline` at `now`.
    /// Returns how many.
    pub(crate) fn expire(&mut self, now: Instant, deadline: Duration) -> u64 {
        let before = self.out.len();
        self.out
            .retain(|_, sent| now.saturating_duration_since(*sent) <= deadline);
        let expired = (before - self.out.len()) as u64;
        self.lost += expired;
        expired
    }

    /// Records message `seq` read back at `now`. A message not expired yet
    /// that is past its deadline is lost all the same: its deadline is the
    /// rule, not when the expiry last ran.
    pub(crate) fn arrive(&mut self, seq: u64, now: Instant, deadline: Duration) -> Arrival {
        match self.out.remove(&seq) {
            Some(sent) => {
                let took = now.saturating_duration_since(sent);
                if took <= deadline {
                    self.received += 1;
                    Arrival::InTime(took)
                } else {
                    self.lost += 1;
                    self.late += 1;
                    Arrival::Late
                }
            }
            None if seq >= 1 && seq <= self.next => {
                self.late += 1;
                Arrival::Late
            }
            None => Arrival::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_secs(5);

    #[test]
    fn every_message_is_in_one_place() {
        let t0 = Instant::now();
        let mut l = Ledger::default();
        let a = l.send(t0);
        let b = l.send(t0);
        let c = l.send(t0 + Duration::from_secs(3));
        assert_eq!((a, b, c), (1, 2, 3));
        assert_eq!(
            l.arrive(a, t0 + Duration::from_millis(20), DEADLINE),
            Arrival::InTime(Duration::from_millis(20))
        );
        // b's deadline passes, c's does not.
        assert_eq!(l.expire(t0 + Duration::from_secs(6), DEADLINE), 1);
        assert_eq!((l.produced, l.received, l.lost, l.pending()), (3, 1, 1, 1));
        assert_eq!(
            l.arrive(b, t0 + Duration::from_secs(7), DEADLINE),
            Arrival::Late
        );
        // Past its deadline but not expired yet: lost and late at once.
        assert_eq!(
            l.arrive(c, t0 + Duration::from_secs(9), DEADLINE),
            Arrival::Late
        );
        assert_eq!((l.received, l.lost, l.late, l.pending()), (1, 2, 2, 0));
        assert_eq!(l.produced, l.received + l.lost + l.pending());
        assert_eq!(l.arrive(99, t0, DEADLINE), Arrival::Unknown);
        assert_eq!(l.arrive(0, t0, DEADLINE), Arrival::Unknown);
    }
}
