//! The configuration reads on a scrape's path: the first read of a server
//! and every one with `--jsz-config-interval 0` (whole, with the
//! configuration, read again without it when that fails), and the reads
//! of stale accounts (learned stream by stream into what is kept, the
//! poll answered with what is kept when they fail).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::config_learned::{learn, LearnedAccounts};
use super::super::config_memory::{keep, own_name, Memory, Unseen};
use super::super::de::Kept;
use super::super::{JszPoll, Reader, Which};
use super::{ConfigOnDemand, ACCOUNTS_READ_ALONE};
use crate::poll_error::PollError;
use crate::sources::kept::KeptBudget;

impl ConfigOnDemand {
    /// Every read on the scrape path: the first, and every one with
    /// `--jsz-config-interval 0`, whole with the configuration; otherwise a
    /// poll without it and a read of the configuration of the accounts
    /// found stale (of every account when due).
    pub(super) async fn poll_here(
        &self,
        memory: &mut Memory,
        reader: Reader<'_, '_>,
        started: Instant,
    ) -> Result<JszPoll, PollError> {
        if !memory.read_before() || self.interval.is_zero() {
            // The first read has nothing to fall back on.
            let read = if memory.read_before() {
                self.config_read(reader, Which::All, started).await
            } else {
                Ok(reader.read(Which::All, true).await?)
            };
            return match read {
                Ok(polled) => keep(memory, reader.link, polled, true),
                Err(e) => {
                    let polled = JszPoll::default();
                    self.fall_back(memory, reader, Which::All, polled, e).await
                }
            };
        }
        let polled = self.plain_poll(reader).await?;
        let due = memory.due(self.interval);
        let stale = if due {
            polled.accounts.iter().map(own_name).cloned().collect()
        } else {
            memory.stale_accounts(&polled, self.check).all()
        };
        self.read_here(memory, reader, polled, stale, due, started)
            .await
    }

    /// Reads the configuration of the `stale` accounts of `polled` (more
    /// than a few: of all; `refresh`: they are all), learned stream by
    /// stream into what is kept, then keeps the poll with it.
    pub(super) async fn read_here(
        &self,
        memory: &mut Memory,
        reader: Reader<'_, '_>,
        mut polled: JszPoll,
        stale: BTreeSet<String>,
        refresh: bool,
        started: Instant,
    ) -> Result<JszPoll, PollError> {
        if stale.is_empty() {
            return keep(memory, reader.link, polled, false);
        }
        let which = if stale.len() > ACCOUNTS_READ_ALONE {
            Which::All
        } else {
            Which::Accounts(&stale)
        };
        let begun = Instant::now();
        let learned = match self.config_learn(reader, which, started).await {
            Ok(learned) => learned,
            Err(e) => return Ok(self.answer_without(memory, polled, e)),
        };
        let before = memory.kept_bytes();
        let refreshed = refresh || matches!(which, Which::All);
        memory.absorb(learned, refreshed.then_some(begun), Unseen::Kept);
        let grown = memory.kept_bytes().saturating_sub(before);
        if !reader.link.kept().charge(grown) {
            *memory = Memory::default();
            return Err(PollError::TooMuchKept(reader.link.kept().limit()));
        }
        polled.config_read = true;
        keep(memory, reader.link, polled, false)
    }

    /// Reads the configuration of `which` as [`learn`] learns it, charged
    /// to a share of the poll's budget (given back once it is taken in),
    /// within what is left of the poll's time but a tenth of it.
    async fn config_learn(
        &self,
        reader: Reader<'_, '_>,
        which: Which<'_>,
        started: Instant,
    ) -> Result<LearnedAccounts, PollError> {
        let share = KeptBudget::share(reader.link.kept());
        let link = reader.link.with_kept(&share);
        let part = Reader {
            link: &link,
            ..reader
        };
        let read = learn(part, which);
        if self.timeout.is_zero() {
            return read.await;
        }
        // A failed read leaves the poll as it is: only taking in what was
        // learned is left to do after it.
        let left = self.timeout.saturating_sub(started.elapsed());
        let left = left.saturating_sub(self.timeout / 10);
        tokio::time::timeout(left, read)
            .await
            .map_err(|_| PollError::Timeout(left))?
    }

    /// Reads `which` with its configuration, charged to a share of the
    /// poll's budget (all given back if it fails), within its deadline.
    async fn config_read(
        &self,
        reader: Reader<'_, '_>,
        which: Which<'_>,
        started: Instant,
    ) -> Result<JszPoll, PollError> {
        let share = KeptBudget::share(reader.link.kept());
        let link = reader.link.with_kept(&share);
        let part = Reader {
            link: &link,
            ..reader
        };
        let read = part.read(which, true);
        let fresh = if self.timeout.is_zero() {
            read.await?
        } else {
            let left = self.deadline(started);
            tokio::time::timeout(left, read)
                .await
                .map_err(|_| PollError::Timeout(left))??
        };
        share.hand_over(fresh.accounts.iter().map(Kept::kept_bytes).sum());
        Ok(fresh)
    }

    /// The time a configuration read that is read again without it when it
    /// fails has: what is left of the poll's, but for what the last poll
    /// without configuration took and a quarter more (at least a quarter of
    /// what is left; half when there was none).
    fn deadline(&self, started: Instant) -> Duration {
        let left = self.timeout.saturating_sub(started.elapsed());
        let plain = Duration::from_nanos(self.plain_nanos.load(Ordering::Relaxed));
        let reserve = if plain.is_zero() {
            left / 2
        } else {
            (plain * 5 / 4).max(left / 4)
        };
        left.saturating_sub(reserve).max(left / 4)
    }

    /// After a configuration read of `which` failed with `error`: reads
    /// them without configuration into `polled`, which gets what is kept
    /// (and keeps it as it was).
    async fn fall_back(
        &self,
        memory: &mut Memory,
        reader: Reader<'_, '_>,
        which: Which<'_>,
        mut polled: JszPoll,
        error: PollError,
    ) -> Result<JszPoll, PollError> {
        let mut again = reader.read(which, false).await?;
        polled.now = polled.now.or(again.now);
        polled.accounts.append(&mut again.accounts);
        polled.account_assets.append(&mut again.account_assets);
        Ok(self.answer_without(memory, polled, error))
    }

    /// After a configuration read failed with `error`: `polled` gets what is
    /// kept (which stays as it was).
    fn answer_without(&self, memory: &Memory, mut polled: JszPoll, error: PollError) -> JszPoll {
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "/jsz configuration read failed; answered without it, with the configuration kept");
        memory.fill(&mut polled, self.check);
        polled.config_read = false;
        polled
    }
}
