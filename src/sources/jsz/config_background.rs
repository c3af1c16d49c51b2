//! The configuration read beside the scrapes: once a server's configuration
//! has been read, its refresh (`--jsz-config-interval`) and the reads for
//! new or re-created streams and consumers (after a jump in consumers too)
//! run in a task of their own, one at a time per server, with their own
//! deadline (`--jsz-config-timeout`), account by account (`acc=`). The
//! scrapes go on meanwhile with polls without configuration; the next poll
//! after the read ends takes in what it learned.
//!
//! The read keeps what it learns of each stream as soon as the stream is
//! parsed ([`config_learned`](super::config_learned): some 16 bytes a
//! consumer), never an account's reply parsed whole. Its budget is what
//! the poll that started it left of `--max-kept-size`, less room for the
//! polls to grow ([`ConfigOnDemand`](super::ConfigOnDemand) says how much),
//! and every poll while it runs charges that budget too: the server's
//! replies never keep more than the limit together. A read that does not
//! fit is done on the scrape path at the next poll.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::config_learned::{learn, LearnedAccounts};
use super::{JszFilter, Reader, Which};
use crate::lock::LockOrRecover;
use crate::poll_error::PollError;
use crate::sources::kept::KeptBudget;
use crate::sources::DetachedLink;

/// Accounts read one by one (`acc=`); more are read in pages of accounts.
const ACCOUNTS_READ_ALONE: usize = 64;

/// The read beside the scrapes of one server: the one under way, or what
/// the last one brought.
#[derive(Debug, Default)]
pub(super) struct Background {
    slot: Arc<Mutex<Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The read under way and the budget it holds.
    running: Option<(JoinHandle<()>, usize)>,
    /// What the last read brought, not yet taken in.
    done: Option<Finished>,
}

/// What a read beside the scrapes brought.
#[derive(Debug)]
pub(super) struct Finished {
    /// What it learned, or why it failed.
    pub(super) outcome: Result<LearnedAccounts, PollError>,
    /// It read every account, begun then.
    pub(super) refreshed: Option<Instant>,
}

/// One read to do beside the scrapes.
#[derive(Debug)]
pub(super) struct Job {
    /// The server.
    pub(super) link: DetachedLink,
    /// Accounts per request when reading in pages.
    pub(super) page_size: u32,
    /// What is kept of the replies.
    pub(super) filter: JszFilter,
    /// The accounts (the server's names for them) to read.
    pub(super) accounts: BTreeSet<String>,
    /// Every account is read: the refresh.
    pub(super) refresh: bool,
    /// What the read may keep, in bytes.
    pub(super) budget: usize,
    /// Its deadline.
    pub(super) deadline: Duration,
}

impl Background {
    /// The budget the read under way holds (0: none under way).
    pub(super) fn reserved(&self) -> usize {
        let slot = self.slot.lock_or_recover();
        slot.running.as_ref().map_or(0, |(_, budget)| *budget)
    }

    /// Whether a read is under way.
    pub(super) fn running(&self) -> bool {
        self.slot.lock_or_recover().running.is_some()
    }

    /// Whether a read is under way, or its result not yet taken in.
    pub(super) fn busy(&self) -> bool {
        let slot = self.slot.lock_or_recover();
        slot.running.is_some() || slot.done.is_some()
    }

    /// What the last read brought, once.
    pub(super) fn take(&self) -> Option<Finished> {
        self.slot.lock_or_recover().done.take()
    }

    /// Starts `job` unless a read is under way or not taken in yet;
    /// whether it started.
    pub(super) fn start(&self, job: Job) -> bool {
        let mut slot = self.slot.lock_or_recover();
        if slot.running.is_some() || slot.done.is_some() {
            return false;
        }
        let budget = job.budget;
        let home = Arc::downgrade(&self.slot);
        let task = tokio::spawn(async move {
            let refreshed = job.refresh.then(Instant::now);
            let outcome = run(job).await;
            if let Some(home) = home.upgrade() {
                let mut slot = home.lock_or_recover();
                slot.running = None;
                slot.done = Some(Finished { outcome, refreshed });
            }
        });
        slot.running = Some((task, budget));
        true
    }

    /// Stops the read under way (what it held is let go with it).
    pub(super) fn abort(&self) {
        if let Some((task, _)) = self.slot.lock_or_recover().running.take() {
            task.abort();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Reads the job's accounts with their configuration within its deadline,
/// one account at a time (or page by page when there are many), keeping
/// only what it learns of each stream as soon as the stream is parsed.
async fn run(job: Job) -> Result<LearnedAccounts, PollError> {
    let kept = KeptBudget::new(job.budget);
    let link = job.link.link(&kept);
    let reader = Reader {
        link: &link,
        page_size: job.page_size,
        filter: &job.filter,
    };
    let which = if job.accounts.len() > ACCOUNTS_READ_ALONE {
        Which::All
    } else {
        Which::Accounts(&job.accounts)
    };
    tokio::time::timeout(job.deadline, learn(reader, which))
        .await
        .map_err(|_| PollError::Timeout(job.deadline))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Fetcher;

    /// A job against `base`, with a deadline of `deadline`.
    fn job(base: &str, deadline: Duration) -> Job {
        let fetch = Fetcher::new(reqwest::Client::builder(), deadline, 1 << 20).unwrap();
        Job {
            link: DetachedLink::Http {
                fetch,
                base: base.parse().unwrap(),
            },
            page_size: 1024,
            filter: JszFilter::default(),
            accounts: BTreeSet::from(["A".to_string()]),
            refresh: true,
            budget: 1 << 20,
            deadline,
        }
    }

    #[tokio::test]
    async fn one_read_at_a_time_its_outcome_taken_once() {
        // Nothing listens on a port just given back.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let background = Background::default();
        let url = format!("http://127.0.0.1:{port}/");
        assert!(background.start(job(&url, Duration::from_secs(60))));
        assert_eq!(background.reserved(), 1 << 20);
        assert!(!background.start(job(&url, Duration::from_secs(60))));
        let finished = loop {
            if let Some(f) = background.take() {
                break f;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(finished.outcome.unwrap_err().kind(), "connect");
        assert!(finished.refreshed.is_some());
        assert!(!background.busy() && background.take().is_none());
        assert_eq!(background.reserved(), 0);
    }

    #[tokio::test]
    async fn a_read_that_hangs_ends_at_its_deadline_or_when_stopped() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let background = Background::default();
        assert!(background.start(job(&url, Duration::from_millis(200))));
        let finished = loop {
            if let Some(f) = background.take() {
                break f;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(finished.outcome.unwrap_err().kind(), "timeout");
        assert!(background.start(job(&url, Duration::from_secs(3600))));
        background.abort();
        assert!(!background.busy());
        assert!(background.start(job(&url, Duration::from_secs(3600))));
        drop(listener);
    }
}
