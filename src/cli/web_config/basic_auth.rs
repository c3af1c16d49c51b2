//! `basic_auth_users`: bcrypt hashes checked as exporter-toolkit checks
//! them. Verified credentials are cached (a scrape every few seconds would
//! otherwise cost a bcrypt run each), keyed by a SHA-256 of the user, the
//! stored hash and the presented password, so no password is kept; failed
//! attempts are not cached, so they cannot push a success out. One bcrypt
//! runs at a time, and at most [`MAX_UNVERIFIED_CHECKS`] run or wait; an
//! unknown user is compared against a fixed hash of the same cost
//! as the configured ones, so it takes as long as a wrong password.

use crate::lock::LockOrRecover;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Most verified credentials kept; the oldest goes first.
const CACHE_SIZE: usize = 100;

/// The users of one configuration and what checking them needs. Unknown
/// users are checked against a hash of the highest cost among the
/// configured ones (they usually share one).
#[derive(Debug, Default)]
pub(crate) struct Users {
    hashes: BTreeMap<String, String>,
    /// What an unknown user's password is compared against.
    fixed: String,
}

impl Users {
    /// Checks that every password is a bcrypt hash.
    pub(super) fn new(hashes: BTreeMap<String, String>) -> Result<Users, String> {
        let mut cost = 0;
        for (user, hash) in &hashes {
            let parts = bcrypt::HashParts::from_str(hash).map_err(|_| {
                format!("basic_auth_users: the password of user '{user}' is not a bcrypt hash")
            })?;
            cost = cost.max(parts.get_cost());
        }
        Ok(Users {
            hashes,
            fixed: fixed_hash(cost),
        })
    }

    /// Whether no user is configured (no authentication).
    pub(crate) fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// A well-formed bcrypt hash of cost `cost` (salt and digest all zero bits):
/// checking a password against it runs bcrypt in full, as against a real
/// hash of that cost, and never matches in practice (the match is ignored
/// anyway). Nothing to compute when the file is read.
fn fixed_hash(cost: u32) -> String {
    format!("$2b${cost:02}${}", ".".repeat(53))
}

/// Unverified checks running or waiting for the bcrypt lock at once; past
/// it a request is refused (429) without running bcrypt. A scraper whose
/// credentials are cached never waits for bcrypt; one whose are not (the
/// first scrape, or the first after a change of the file) waits for at most
/// this many bcrypt runs.
pub(crate) const MAX_UNVERIFIED_CHECKS: usize = 4;

/// What checking credentials found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A configured user with the password of its hash.
    Verified,
    /// No credentials, an unknown user or a wrong password.
    Refused,
    /// Too many unverified checks already running or waiting: not checked.
    Busy,
}

/// The credentials verified lately, shared by every configuration the file
/// has had. Only successes are kept: a failed attempt is never cached, so
/// wrong passwords cannot push a scraper's credentials out, and only
/// holders of a password can fill it.
#[derive(Default)]
pub(crate) struct AuthCache {
    verified: Mutex<Cache>,
    /// Held while bcrypt runs: it is CPU-heavy on purpose.
    bcrypt: Mutex<()>,
    /// Unverified checks running or waiting for `bcrypt`.
    unverified: AtomicUsize,
    /// bcrypt runs so far (for tests).
    runs: AtomicU64,
}

#[derive(Default)]
struct Cache {
    keys: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

impl AuthCache {
    /// Whether an `Authorization` header value names a configured user with
    /// the password of its hash, as verified before: no bcrypt runs.
    pub(crate) fn cached(&self, users: &Users, header: Option<&str>) -> bool {
        let Some((user, password)) = header.and_then(credentials) else {
            return false;
        };
        let Some(hash) = users.hashes.get(&user) else {
            return false;
        };
        let key = cache_key(&user, hash, &password);
        self.verified.lock_or_recover().keys.contains(&key)
    }

    /// Checks an `Authorization` header value with bcrypt, one run at a
    /// time and at most [`MAX_UNVERIFIED_CHECKS`] running or waiting. Slow
    /// on purpose: call it off the async workers, after [`Self::cached`].
    pub(crate) fn verify(&self, users: &Users, header: Option<&str>) -> Verdict {
        let Some((user, password)) = header.and_then(credentials) else {
            return Verdict::Refused;
        };
        let known = users.hashes.get(&user);
        let hash = known.map_or(users.fixed.as_str(), String::as_str);
        let key = cache_key(&user, hash, &password);
        if known.is_some() && self.verified.lock_or_recover().keys.contains(&key) {
            return Verdict::Verified;
        }
        let Some(_slot) = UnverifiedSlot::take(&self.unverified) else {
            return Verdict::Busy;
        };
        let matches = {
            let _one_at_a_time = self.bcrypt.lock_or_recover();
            self.runs.fetch_add(1, Ordering::Relaxed);
            bcrypt::verify(&password, hash).unwrap_or(false)
        };
        if !(matches && known.is_some()) {
            return Verdict::Refused;
        }
        self.remember(key);
        Verdict::Verified
    }

    fn remember(&self, key: [u8; 32]) {
        let mut cache = self.verified.lock_or_recover();
        if cache.keys.insert(key) {
            cache.order.push_back(key);
        }
        while cache.order.len() > CACHE_SIZE {
            if let Some(old) = cache.order.pop_front() {
                cache.keys.remove(&old);
            }
        }
    }

    /// How many results are kept (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.verified.lock_or_recover().keys.len()
    }

    /// How many times bcrypt ran (for tests).
    #[cfg(test)]
    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }
}

/// One of the [`MAX_UNVERIFIED_CHECKS`] places, given back when dropped.
struct UnverifiedSlot<'a>(&'a AtomicUsize);

impl<'a> UnverifiedSlot<'a> {
    fn take(count: &'a AtomicUsize) -> Option<UnverifiedSlot<'a>> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_UNVERIFIED_CHECKS).then_some(n + 1)
            })
            .ok()
            .map(|_| UnverifiedSlot(count))
    }
}

impl Drop for UnverifiedSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn cache_key(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    // Lengths first, so that no two triples give the same bytes.
    for part in [user, hash, password] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    let mut key = [0; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

/// User and password of a `Basic` header value.
fn credentials(header: &str) -> Option<(String, String)> {
    use base64::Engine;
    let encoded = header.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn basic(user: &str, password: &str) -> String {
        let raw = format!("{user}:{password}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    fn users() -> Users {
        let hash = bcrypt::hash("pw", 4).unwrap();
        Users::new(BTreeMap::from([("prom".to_string(), hash)])).unwrap()
    }

    #[test]
    fn known_unknown_and_cached() {
        let users = users();
        let cache = AuthCache::default();
        let prom = basic("prom", "pw");
        assert!(!cache.cached(&users, Some(&prom)));
        assert_eq!(cache.verify(&users, Some(&prom)), Verdict::Verified);
        assert!(cache.cached(&users, Some(&prom)));
        assert_eq!(
            cache.verify(&users, Some(&basic("prom", "nope"))),
            Verdict::Refused
        );
        // The fixed hash is never matched, not even by its own password.
        let ghost = basic("ghost", "no such user");
        assert_eq!(cache.verify(&users, Some(&ghost)), Verdict::Refused);
        assert_eq!(cache.verify(&users, None), Verdict::Refused);
        assert_eq!(cache.runs(), 3, "no bcrypt without credentials");
        // Only the success is kept; it is answered without bcrypt.
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.verify(&users, Some(&prom)), Verdict::Verified);
        assert_eq!(cache.runs(), 3);
        assert_eq!(users.fixed, "$2b$04$".to_string() + &".".repeat(53));
        // A hash bcrypt reads (and so runs in full), not an error.
        assert!(matches!(
            bcrypt::verify("no such user", &users.fixed),
            Ok(false)
        ));
    }

    /// Wrong passwords, however many, leave a scraper's verified
    /// credentials in the cache (they used to take its slot after 100).
    #[test]
    fn failures_cannot_evict_a_success() {
        let users = users();
        let cache = AuthCache::default();
        let prom = basic("prom", "pw");
        assert_eq!(cache.verify(&users, Some(&prom)), Verdict::Verified);
        for i in 0..CACHE_SIZE + 5 {
            let wrong = basic(if i % 2 == 0 { "prom" } else { "ghost" }, &i.to_string());
            assert_eq!(cache.verify(&users, Some(&wrong)), Verdict::Refused);
        }
        assert!(cache.cached(&users, Some(&prom)));
        let runs = cache.runs();
        assert_eq!(cache.verify(&users, Some(&prom)), Verdict::Verified);
        assert_eq!(cache.runs(), runs, "the scraper's check ran no bcrypt");
    }

    /// Past MAX_UNVERIFIED_CHECKS waiting, a check is refused unrun.
    #[test]
    fn unverified_checks_are_bounded() {
        let users = users();
        let cache = AuthCache::default();
        let slots: Vec<_> = (0..MAX_UNVERIFIED_CHECKS)
            .map(|_| UnverifiedSlot::take(&cache.unverified).unwrap())
            .collect();
        let wrong = basic("prom", "nope");
        assert_eq!(cache.verify(&users, Some(&wrong)), Verdict::Busy);
        assert_eq!(cache.runs(), 0);
        drop(slots);
        assert_eq!(cache.verify(&users, Some(&wrong)), Verdict::Refused);
        assert_eq!(cache.runs(), 1);
    }

    #[test]
    fn refuses_what_is_not_a_bcrypt_hash() {
        let e = Users::new(BTreeMap::from([("a".to_string(), "plain".to_string())])).unwrap_err();
        assert!(e.contains("user 'a'"), "{e}");
    }
}
