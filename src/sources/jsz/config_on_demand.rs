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

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use super::config_memory::{own_name, Memory, RemovalCheck};
use super::de::Kept;
use super::{AccountDetail, JszFilter, JszPoll};
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
    memory: Mutex<Memory>,
}

impl ConfigOnDemand {
    /// Reads configuration every `interval`, and before a removal `check`
    /// says could be counted.
    pub(crate) fn new(interval: Duration, check: Option<RemovalCheck>) -> ConfigOnDemand {
        ConfigOnDemand {
            interval,
            check,
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
        let lock = || self.memory.lock_or_recover();
        // Taken out for the poll; a failed poll leaves it as it was.
        let mut memory = std::mem::take(&mut *lock());
        let polled = self.poll_with(&mut memory, link, page_size, filter).await;
        *lock() = memory;
        polled
    }

    async fn poll_with(
        &self,
        memory: &mut Memory,
        link: &ServerLink<'_>,
        page_size: u32,
        filter: &JszFilter,
    ) -> Result<JszPoll, PollError> {
        let due = memory.due(self.interval);
        let mut polled = super::poll(link, page_size, filter, due).await?;
        let mut whole = due;
        if !due {
            let stale = memory.stale_accounts(&polled, self.check);
            if stale.len() > ACCOUNTS_READ_ALONE {
                release(link, &polled.accounts);
                polled = super::poll(link, page_size, filter, true).await?;
                whole = true;
            } else if !stale.is_empty() {
                read_again(link, page_size, filter, &mut polled, &stale).await?;
            }
            polled.config_read = !stale.is_empty();
        } else {
            polled.config_read = true;
        }
        memory.remember(&mut polled, whole);
        if !link.kept().charge(memory.kept_bytes()) {
            *memory = Memory::default();
            return Err(PollError::TooMuchKept(link.kept().limit()));
        }
        Ok(polled)
    }
}

/// Gives back what `accounts` charged, as they are let go.
fn release(link: &ServerLink<'_>, accounts: &[AccountDetail]) {
    link.kept()
        .release(accounts.iter().map(Kept::kept_bytes).sum());
}

/// Reads the accounts `stale` (by the name the server knows them by) again
/// with their configuration, in place of theirs in `polled`.
async fn read_again(
    link: &ServerLink<'_>,
    page_size: u32,
    filter: &JszFilter,
    polled: &mut JszPoll,
    stale: &BTreeSet<String>,
) -> Result<(), PollError> {
    for account in stale {
        let fresh = super::poll_account(link, page_size, filter, account).await?;
        let old: Vec<_> = polled
            .accounts
            .iter()
            .filter(|a| own_name(a) == account)
            .map(|a| a.name.clone())
            .collect();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut polled.accounts)
            .into_iter()
            .partition(|a| old.contains(&a.name));
        release(link, &gone);
        polled.accounts = kept;
        polled.accounts.extend(fresh.accounts);
    }
    Ok(())
}
