//! The streams' and consumers' configuration read on demand: half of a
//! `/jsz` reply and of the server's work for it, and it seldom changes.
//!
//! The configuration is asked for on the first poll of a server, at
//! least every `--jsz-config-interval`, for an account where a stream or
//! consumer is new or made again (its `created` changed), and at once for
//! one where a consumer's removal count could grow: a filter added since
//! the last read would otherwise pass for removed messages. Between reads
//! each stream's and consumer's configuration is kept, charged to the
//! poll's `--max-kept-size` budget, and filled into the polls that did not
//! ask.
//!
//! Once a server's configuration has been read, the refresh and the reads
//! for new or re-created streams and consumers run beside the scrapes
//! ([`config_background`](super::config_background)); a consumer whose
//! configuration is not known yet starts its removal count again. The
//! read a removal count needs, the first read, and every read with
//! `--jsz-config-interval 0` stay on the scrape path. Every read but the
//! first and those with interval 0 learns each stream as soon as it is
//! parsed ([`config_learned`](super::config_learned)): the poll never holds
//! an account twice, nor one parsed whole with its configuration. Once a
//! configuration has been read, a read that fails (too large for the
//! budget, or late: see [`scrape_path`]) leaves the poll to be answered
//! without configuration, with what is kept, and is tried again at the
//! next poll.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::config_background::{Background, Finished, Job};
use super::config_memory::{own_name, Memory, RemovalCheck, Unseen};
use super::{JszFilter, JszPoll, Reader, Which};
use crate::lock::LockOrRecover;
use crate::poll_error::PollError;
use crate::sources::ServerLink;

/// Accounts read again one by one (`acc=`); more are read again whole.
const ACCOUNTS_READ_ALONE: usize = 4;

/// How one server's `/jsz` configuration is read: the settings and what
/// is kept between reads.
#[derive(Debug, Default)]
pub(crate) struct ConfigOnDemand {
    /// Longest time between two reads; zero reads on every poll.
    pub(crate) interval: Duration,
    /// The removal count's check; `None` never reads for it.
    pub(crate) check: Option<RemovalCheck>,
    /// The time a poll has; zero: a configuration read has no deadline of
    /// its own.
    timeout: Duration,
    /// Configuration reads that failed, answered without configuration.
    failures: AtomicU64,
    /// How long the last poll of every account without configuration
    /// took, in nanoseconds (0: none yet): the time a configuration read
    /// leaves for the poll that answers when it fails.
    plain_nanos: AtomicU64,
    memory: Mutex<Memory>,
    /// The deadline of a read beside the scrapes.
    beside_timeout: Duration,
    /// The read beside the scrapes.
    background: Background,
    /// The last read beside the scrapes did not fit its budget: the next
    /// poll reads on the scrape path.
    here_next: AtomicBool,
}

/// The memory taken out of its place for one poll, put back however the
/// poll ends: cancelled by its timeout too, so that a late poll never
/// makes the next one read everything as if it were the first.
struct Taken<'a> {
    memory: Memory,
    home: &'a Mutex<Memory>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        *self.home.lock_or_recover() = std::mem::take(&mut self.memory);
    }
}

impl ConfigOnDemand {
    /// Reads configuration every `interval`, and before a removal `check`
    /// says could be counted; a poll has `timeout` (zero: no deadline), a
    /// read beside the scrapes `beside_timeout`.
    pub(crate) fn new(
        interval: Duration,
        check: Option<RemovalCheck>,
        timeout: Duration,
        beside_timeout: Duration,
    ) -> ConfigOnDemand {
        ConfigOnDemand {
            interval,
            check,
            timeout,
            failures: AtomicU64::new(0),
            plain_nanos: AtomicU64::new(0),
            memory: Mutex::default(),
            beside_timeout,
            background: Background::default(),
            here_next: AtomicBool::new(false),
        }
    }

    /// The deadline of a read beside the scrapes.
    pub(crate) fn beside_timeout(&self) -> Duration {
        self.beside_timeout
    }

    /// One poll of every page, asking for the configuration only where it
    /// is due; every stream and consumer has its configuration all the same.
    pub(crate) async fn poll(
        &self,
        link: &ServerLink<'_>,
        page_size: u32,
        filter: &JszFilter,
    ) -> Result<JszPoll, PollError> {
        let started = Instant::now();
        let memory = std::mem::take(&mut *self.memory.lock_or_recover());
        let mut taken = Taken {
            memory,
            home: &self.memory,
        };
        let reader = Reader {
            link,
            page_size,
            filter,
        };
        let took_in = self.take_in(&mut taken.memory);
        // What is kept, and what a read beside the scrapes may keep, are
        // held all through the poll: charged from its start.
        let before = taken.memory.kept_bytes();
        if !link.kept().charge(before) {
            taken.memory = Memory::default();
            return Err(PollError::TooMuchKept(link.kept().limit()));
        }
        let mut reserved = self.background.reserved();
        if !link.kept().charge(reserved) {
            self.give_way();
            reserved = 0;
        }
        let mut polled = self.poll_with(&mut taken.memory, reader, started).await;
        if matches!(polled, Err(PollError::TooMuchKept(_))) && reserved > 0 {
            // The scrape comes first: the read beside it gives way, and
            // this poll reads on the scrape path.
            self.give_way();
            link.kept().release(reserved);
            polled = self.poll_with(&mut taken.memory, reader, started).await;
        }
        let mut polled = polled?;
        polled.config_read |= took_in;
        polled.config_read_failures = self.failures.load(Ordering::Relaxed);
        polled.config_age = taken.memory.age();
        Ok(polled)
    }

    /// Whether a read beside the scrapes is under way.
    pub(crate) fn reading_beside(&self) -> bool {
        self.background.running()
    }

    /// A poll without configuration, the reads a removal count needs on the
    /// scrape path and the others beside it; all on the scrape path for the
    /// first read, with `--jsz-config-interval 0`, and after a read beside
    /// did not fit.
    async fn poll_with(
        &self,
        memory: &mut Memory,
        reader: Reader<'_, '_>,
        started: Instant,
    ) -> Result<JszPoll, PollError> {
        let here = self.here_next.swap(false, Ordering::Relaxed);
        if here || self.interval.is_zero() || !memory.read_before() {
            return self.poll_here(memory, reader, started).await;
        }
        let kept_before = memory.kept_bytes();
        let polled = self.plain_poll(reader).await?;
        let stale = memory.stale_accounts(&polled, self.check);
        let due = memory.due(self.interval);
        let beside = if due {
            polled.accounts.iter().map(own_name).cloned().collect()
        } else {
            stale.unknown
        };
        let polled = self
            .read_here(memory, reader, polled, stale.counting, false, started)
            .await?;
        if due || !beside.is_empty() {
            let grown = memory.kept_bytes().saturating_sub(kept_before);
            self.start_beside(reader, beside, due, grown);
        }
        Ok(polled)
    }

    /// Starts a read of `accounts` (`refresh`: all) beside the scrapes,
    /// unless one is under way, with what this poll leaves of its budget
    /// at its worst moment so far, less room for the next polls to grow:
    /// what is kept grew by `grown` bytes in this poll (the next one holds
    /// that from its start), and a thirty-second of that moment (at least a
    /// sixty-fourth of the limit); a poll that outgrows it stops the read.
    /// The budget is charged to this poll.
    fn start_beside(
        &self,
        reader: Reader<'_, '_>,
        accounts: BTreeSet<String>,
        refresh: bool,
        grown: usize,
    ) {
        if self.background.busy() {
            return;
        }
        let kept = reader.link.kept();
        let held = kept.peak();
        let margin = grown.saturating_add((held / 32).max(kept.limit() / 64));
        let budget = kept.limit().saturating_sub(held.saturating_add(margin));
        let job = Job {
            link: reader.link.detached(self.beside_timeout),
            page_size: reader.page_size,
            filter: reader.filter.clone(),
            accounts,
            refresh,
            budget,
            deadline: self.beside_timeout,
        };
        if self.background.start(job) && !kept.charge(budget) {
            self.give_way();
        }
    }

    /// The read beside the scrapes stops; the next poll reads here.
    fn give_way(&self) {
        self.background.abort();
        self.here_next.store(true, Ordering::Relaxed);
    }

    /// Takes in what the last read beside the scrapes brought; whether it
    /// brought configuration.
    fn take_in(&self, memory: &mut Memory) -> bool {
        let Some(Finished { outcome, refreshed }) = self.background.take() else {
            return false;
        };
        match outcome {
            Ok(part) => {
                memory.absorb(part, refreshed, Unseen::Skipped);
                true
            }
            Err(error) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if matches!(error, PollError::TooMuchKept(_)) {
                    self.here_next.store(true, Ordering::Relaxed);
                }
                tracing::warn!(%error, "/jsz configuration read beside the scrapes failed; the scrapes go on with the configuration kept");
                false
            }
        }
    }

    /// Every account without configuration; the time it took is kept.
    async fn plain_poll(&self, reader: Reader<'_, '_>) -> Result<JszPoll, PollError> {
        let plain = Instant::now();
        let polled = reader.read(Which::All, false).await?;
        let took = u64::try_from(plain.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.plain_nanos.store(took, Ordering::Relaxed);
        Ok(polled)
    }
}

#[path = "config_scrape_path.rs"]
mod scrape_path;
