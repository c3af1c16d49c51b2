//! Each account's JetStream limits from its JWT, in operator mode:
//! `max_streams`, `max_consumers` and the tiers' limits, which no `/jsz`
//! reply gives (`$JS.API.INFO` does, but only within the account itself).
//!
//! An operator-mode server gives any account's decoded JWT in
//! `/accountz?acc=<public key>` (`account_detail.decoded_jwt.nats.limits`),
//! and the same reply to the system account's
//! `$SYS.REQ.SERVER.<id>.ACCOUNTZ` with `{"account": <public key>}`, on
//! every supported version (2.9.10 to 2.15.1). A server not in operator
//! mode names its accounts in `/jsz` by their configured names, never by an
//! account public key: only accounts whose `/jsz` `id` is one are asked
//! for, so such a server gets no request at all.
//!
//! Limits change rarely: each account is read when it first shows in
//! `/jsz`, then again once `--jsz-config-interval` has passed, at most
//! [`READS_PER_POLL`] accounts a poll, in a task beside the scrapes (one at
//! a time per server), with `--jsz-config-timeout` per request. A poll
//! takes in what the reads learned so far. While a read runs, each poll
//! charges [`READ_BUDGET`] to `--max-kept-size` (as the read's replies
//! can hold that much), and what the poll keeps of the limits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::task::JoinHandle;

use super::AccountDetail;
use crate::lock::LockOrRecover;
use crate::poll_error::PollError;
use crate::sources::kept::KeptBudget;
use crate::sources::{endpoint_url, DetachedLink, ServerLink};

/// Accounts read at most per poll.
const READS_PER_POLL: usize = 16;

/// What one reply may hold while it is read, in bytes.
const READ_BUDGET: usize = 256 << 10;

/// One account's JetStream limits, as its JWT sets them. A limit of 0 or
/// below (unlimited, or unset) is `None`, as the server checks none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JwtLimits {
    /// `streams`.
    pub(crate) max_streams: Option<u64>,
    /// `consumer`: a cap per stream.
    pub(crate) max_consumers: Option<u64>,
    /// `tiered_limits`, by tier name, in name order.
    pub(crate) tiers: Vec<JwtTier>,
}

/// One tier's limits, as its JWT sets them (not times its replicas).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JwtTier {
    /// `R1`, `R3`, ...
    pub(crate) tier: String,
    /// `disk_storage`, a replica's.
    pub(crate) max_file: Option<u64>,
    /// `mem_storage`, a replica's.
    pub(crate) max_memory: Option<u64>,
    /// `streams`.
    pub(crate) max_streams: Option<u64>,
    /// `consumer`, a cap per stream.
    pub(crate) max_consumers: Option<u64>,
}

impl JwtLimits {
    /// The memory it holds.
    fn kept_bytes(&self) -> usize {
        let tiers = self.tiers.iter().map(|t| t.tier.capacity());
        std::mem::size_of::<Self>()
            + self.tiers.capacity() * std::mem::size_of::<JwtTier>()
            + tiers.sum::<usize>()
    }
}

#[derive(Deserialize)]
struct Reply {
    account_detail: Option<Detail>,
}

#[derive(Deserialize)]
struct Detail {
    decoded_jwt: Option<Jwt>,
}

#[derive(Deserialize)]
struct Jwt {
    nats: Option<Nats>,
}

#[derive(Deserialize)]
struct Nats {
    limits: Option<Limits>,
}

/// A JWT's limits; an omitted one is 0 (the JWT library leaves 0 out).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Limits {
    streams: i64,
    consumer: i64,
    mem_storage: i64,
    disk_storage: i64,
    tiered_limits: HashMap<String, Limits>,
}

fn positive(v: i64) -> Option<u64> {
    u64::try_from(v).ok().filter(|v| *v > 0)
}

/// The limits in one `/accountz?acc=` reply; `None` when it carries no
/// decoded JWT (a server not in operator mode), all `None` for a JWT
/// without limits.
fn limits(reply: Reply) -> Option<JwtLimits> {
    let jwt = reply.account_detail?.decoded_jwt?;
    let limits = jwt.nats.and_then(|n| n.limits).unwrap_or_default();
    let mut tiers: Vec<JwtTier> = (limits.tiered_limits.into_iter())
        .map(|(tier, l)| JwtTier {
            tier,
            max_file: positive(l.disk_storage),
            max_memory: positive(l.mem_storage),
            max_streams: positive(l.streams),
            max_consumers: positive(l.consumer),
        })
        .collect();
    tiers.sort_by(|a, b| a.tier.cmp(&b.tier));
    Some(JwtLimits {
        max_streams: positive(limits.streams),
        max_consumers: positive(limits.consumer),
        tiers,
    })
}

/// Whether `id` is an account public key (an nkey: 56 base32 characters
/// beginning with `A`), as operator-mode servers name accounts.
fn is_account_key(id: &str) -> bool {
    id.len() == 56
        && id.starts_with('A')
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
}

/// What one server's `/jsz` source knows of its accounts' JWT limits.
#[derive(Debug, Default)]
pub(crate) struct AccountJwts {
    /// How long limits read are taken as current.
    interval: Duration,
    /// Each request's deadline.
    timeout: Duration,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// By account public key: the account's name and its last read.
    known: HashMap<String, Known>,
    /// The read under way.
    running: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Known {
    name: String,
    /// `None` before a read succeeded.
    limits: Option<JwtLimits>,
    /// When it was last asked (`None`: never).
    asked: Option<Instant>,
}

impl AccountJwts {
    /// Limits read again every `interval`, each request within `timeout`.
    pub(crate) fn new(interval: Duration, timeout: Duration) -> AccountJwts {
        AccountJwts {
            interval,
            timeout,
            state: Arc::default(),
        }
    }

    /// The JWT limits known of `accounts` (one poll's), by account name,
    /// charged to the poll's budget; starts a read of those due beside the
    /// scrapes unless one runs.
    pub(crate) fn poll(
        &self,
        link: &ServerLink<'_>,
        accounts: &[AccountDetail],
    ) -> Vec<(String, JwtLimits)> {
        let mut state = self.state.lock_or_recover();
        let keys: Vec<&AccountDetail> = (accounts.iter())
            .filter(|a| is_account_key(&a.id))
            .collect();
        state.known.retain(|id, _| keys.iter().any(|a| a.id == *id));
        for a in &keys {
            let k = state.known.entry(a.id.clone()).or_insert_with(|| Known {
                name: a.name.clone(),
                limits: None,
                asked: None,
            });
            k.name.clone_from(&a.name);
        }
        if state.running.as_ref().is_some_and(JoinHandle::is_finished) {
            state.running = None;
        }
        let kept = link.kept();
        if state.running.is_some() {
            if !kept.charge(READ_BUDGET) {
                tracing::warn!(
                    "account JWT read beside the scrapes stopped: --max-kept-size reached"
                );
                if let Some(task) = state.running.take() {
                    task.abort();
                }
            }
        } else {
            self.start(&mut state, link);
        }
        let known: Vec<(String, JwtLimits)> = (state.known.values())
            .filter_map(|k| Some((k.name.clone(), k.limits.clone()?)))
            .collect();
        let bytes = known.iter().map(|(n, l)| n.capacity() + l.kept_bytes());
        if !kept.charge(bytes.sum()) {
            tracing::warn!("account JWT limits left out: --max-kept-size reached");
            return Vec::new();
        }
        known
    }

    /// Whether a read is under way: a server answering it through the
    /// system account answers the exporter's surveys only after it.
    pub(crate) fn reading(&self) -> bool {
        let state = self.state.lock_or_recover();
        state
            .running
            .as_ref()
            .is_some_and(|task| !task.is_finished())
    }

    /// Starts a read of the accounts due, new ones first, at most
    /// [`READS_PER_POLL`], when this poll can hold its budget.
    fn start(&self, state: &mut State, link: &ServerLink<'_>) {
        let now = Instant::now();
        let mut due: Vec<(Option<Instant>, String)> = (state.known.iter())
            .filter(|(_, k)| {
                k.asked
                    .is_none_or(|t| now.duration_since(t) >= self.interval)
            })
            .map(|(id, k)| (k.asked, id.clone()))
            .collect();
        if due.is_empty() {
            return;
        }
        if !link.kept().charge(READ_BUDGET) {
            tracing::warn!("account JWT limits not read this poll: --max-kept-size reached");
            return;
        }
        due.sort();
        due.truncate(READS_PER_POLL);
        for (_, id) in &due {
            if let Some(k) = state.known.get_mut(id) {
                k.asked = Some(now);
            }
        }
        let link = link.detached(self.timeout);
        let home = Arc::downgrade(&self.state);
        state.running = Some(tokio::spawn(async move {
            for (_, id) in due {
                let read = read(&link, &id).await;
                let Some(home) = home.upgrade() else { return };
                let mut state = home.lock_or_recover();
                match (read, state.known.get_mut(&id)) {
                    (Ok(limits), Some(k)) => k.limits = limits,
                    (Ok(_), None) => {}
                    (Err(error), _) => {
                        tracing::warn!(account = id, %error, "account JWT limits not read; the last ones kept");
                    }
                }
            }
        }));
    }
}

impl Drop for AccountJwts {
    fn drop(&mut self) {
        if let Some(task) = self.state.lock_or_recover().running.take() {
            task.abort();
        }
    }
}

/// Asks the server for account `id`'s details, with its own budget.
async fn read(link: &DetachedLink, id: &str) -> Result<Option<JwtLimits>, PollError> {
    let kept = KeptBudget::new(READ_BUDGET);
    let reply: Reply = match link {
        DetachedLink::Http { fetch, base } => {
            let url = endpoint_url(base, "accountz", &[("acc", id.to_string())]);
            fetch.get_json(url, &kept).await?
        }
        DetachedLink::System {
            requests,
            name,
            id: server,
        } => {
            let options = serde_json::json!({ "account": id });
            let body = requests.ask(name, server, "accountz", options).await?;
            serde_json::from_slice(&body).map_err(|e| PollError::Parse(e.to_string()))?
        }
    };
    Ok(limits(reply))
}

#[cfg(test)]
#[path = "account_jwts_tests.rs"]
mod tests;
