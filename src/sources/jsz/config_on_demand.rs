//! The streams' and consumers' configuration read on demand: half of a
//! `/jsz` reply and of the server's work for it, and it seldom changes.
//!
//! The configuration is asked for (`config=true`) on the first poll, at
//! least every `--jsz-config-interval`, and at once for an account where a
//! stream or consumer is new or made again (its `created` changed), or
//! where a consumer's removal count could grow: a filter added since the
//! last read would otherwise pass for removed messages. Between reads each
//! stream's and consumer's configuration is kept, charged to the poll's
//! `--max-kept-size` budget, and filled into the polls that did not ask.
//!
//! An account read again with its configuration is let go from the poll
//! first: the poll never holds two copies of it. Once a configuration has
//! been read, a read that fails (too large for the budget, or late: it
//! leaves a poll without configuration what the last one took and a
//! quarter more of the poll's time, at least a quarter of what is left) leaves the poll to be
//! answered without configuration, with what is kept, and is tried again
//! at the next poll.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::config_memory::{own_name, Memory, RemovalCheck};
use super::de::Kept;
use super::{AccountDetail, JszFilter, JszPoll};
use crate::lock::LockOrRecover;
use crate::poll_error::PollError;
use crate::sources::kept::KeptBudget;
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

/// Which accounts to read: all, or these (by the name the server knows).
#[derive(Clone, Copy)]
enum Which<'s> {
    All,
    Accounts(&'s BTreeSet<String>),
}

/// What one poll reads with: the link, the page size, the filter.
#[derive(Clone, Copy)]
struct Reader<'r, 'l> {
    link: &'r ServerLink<'l>,
    page_size: u32,
    filter: &'r JszFilter,
}

impl ConfigOnDemand {
    /// Reads configuration every `interval`, and before a removal `check`
    /// says could be counted; a poll has `timeout` (zero: no deadline).
    pub(crate) fn new(
        interval: Duration,
        check: Option<RemovalCheck>,
        timeout: Duration,
    ) -> ConfigOnDemand {
        ConfigOnDemand {
            interval,
            check,
            timeout,
            failures: AtomicU64::new(0),
            plain_nanos: AtomicU64::new(0),
            memory: Mutex::default(),
        }
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
        // What is kept is held all through the poll: charged from its start.
        let before = taken.memory.kept_bytes();
        if !link.kept().charge(before) {
            taken.memory = Memory::default();
            return Err(PollError::TooMuchKept(link.kept().limit()));
        }
        let mut polled = self.poll_with(&mut taken.memory, reader, started).await?;
        polled.config_read_failures = self.failures.load(Ordering::Relaxed);
        Ok(polled)
    }

    async fn poll_with(
        &self,
        memory: &mut Memory,
        reader: Reader<'_, '_>,
        started: Instant,
    ) -> Result<JszPoll, PollError> {
        if memory.due(self.interval) {
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
        let plain = Instant::now();
        let mut polled = reader.read(Which::All, false).await?;
        let took = u64::try_from(plain.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.plain_nanos.store(took, Ordering::Relaxed);
        let stale = memory.stale_accounts(&polled, self.check);
        if stale.is_empty() {
            return keep(memory, reader.link, polled, false);
        }
        let which = if stale.len() > ACCOUNTS_READ_ALONE {
            Which::All
        } else {
            Which::Accounts(&stale)
        };
        // Let go before they are read again: never two copies.
        let_go(reader.link, &mut polled, which);
        match self.config_read(reader, which, started).await {
            Ok(mut fresh) => {
                polled.accounts.append(&mut fresh.accounts);
                polled.account_assets.append(&mut fresh.account_assets);
                polled.config_read = true;
                keep(memory, reader.link, polled, matches!(which, Which::All))
            }
            Err(e) => self.fall_back(memory, reader, which, polled, e).await,
        }
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

    /// The time a configuration read has: what is left of the poll's, but
    /// for what the last poll without configuration took and a quarter
    /// more (at least a quarter of what is left; half when there was none).
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
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "/jsz configuration read failed; answered without it, with the configuration kept");
        let mut again = reader.read(which, false).await?;
        polled.now = polled.now.or(again.now);
        polled.accounts.append(&mut again.accounts);
        polled.account_assets.append(&mut again.account_assets);
        memory.fill(&mut polled, self.check);
        polled.config_read = false;
        Ok(polled)
    }
}

/// Keeps `polled`'s configuration and figures (`whole`: every account was
/// read with its configuration) in place of what was kept, charged.
fn keep(
    memory: &mut Memory,
    link: &ServerLink<'_>,
    mut polled: JszPoll,
    whole: bool,
) -> Result<JszPoll, PollError> {
    polled.config_read |= whole;
    let before = memory.kept_bytes();
    memory.remember(&mut polled, whole);
    link.kept().release(before);
    if !link.kept().charge(memory.kept_bytes()) {
        *memory = Memory::default();
        return Err(PollError::TooMuchKept(link.kept().limit()));
    }
    Ok(polled)
}

/// Takes `which` accounts out of `polled`, giving back what they charged.
fn let_go(link: &ServerLink<'_>, polled: &mut JszPoll, which: Which<'_>) {
    let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut polled.accounts)
        .into_iter()
        .partition(|a| match which {
            Which::All => true,
            Which::Accounts(names) => names.contains(own_name(a)),
        });
    release(link, &gone);
    polled.accounts = kept;
}

/// Gives back what `accounts` charged, as they are let go.
fn release(link: &ServerLink<'_>, accounts: &[AccountDetail]) {
    link.kept()
        .release(accounts.iter().map(Kept::kept_bytes).sum());
}

impl Reader<'_, '_> {
    /// Reads `which` accounts, with their configuration if `config`.
    async fn read(self, which: Which<'_>, config: bool) -> Result<JszPoll, PollError> {
        let Which::Accounts(accounts) = which else {
            return super::poll(self.link, self.page_size, self.filter, config).await;
        };
        let mut out = JszPoll::default();
        for account in accounts {
            let mut one =
                super::poll_account(self.link, self.page_size, self.filter, account, config)
                    .await?;
            out.now = out.now.or(one.now);
            out.accounts.append(&mut one.accounts);
            out.account_assets.append(&mut one.account_assets);
        }
        Ok(out)
    }
}
