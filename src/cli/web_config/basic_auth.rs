//! `basic_auth_users`: bcrypt hashes checked as exporter-toolkit checks
//! them. Results are cached (a scrape every few seconds would otherwise cost
//! a bcrypt run each), keyed by a SHA-256 of the user, the stored hash and
//! the presented password, so no password is kept; one bcrypt runs at a
//! time; an unknown user is compared against a fixed hash of the same cost
//! as the configured ones, so it takes as long as a wrong password.

use crate::lock::LockOrRecover;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::str::FromStr;
use std::sync::Mutex;

/// Most results kept; the oldest goes first.
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

/// The cache of results, shared by every configuration the file has had.
#[derive(Default)]
pub(crate) struct AuthCache {
    results: Mutex<Cache>,
    /// Held while bcrypt runs: it is CPU-heavy on purpose.
    bcrypt: Mutex<()>,
}

#[derive(Default)]
struct Cache {
    results: HashMap<[u8; 32], bool>,
    order: VecDeque<[u8; 32]>,
}

impl AuthCache {
    /// Whether an `Authorization` header value names a configured user with
    /// the password of its hash. Slow on purpose when not cached (bcrypt):
    /// call it off the async workers.
    pub(crate) fn authorized(&self, users: &Users, header: Option<&str>) -> bool {
        let Some((user, password)) = header.and_then(credentials) else {
            return false;
        };
        let known = users.hashes.get(&user);
        let hash = match known {
            Some(hash) => hash.as_str(),
            None => users.fixed.as_str(),
        };
        let key = cache_key(&user, hash, &password);
        let cached = self.results.lock_or_recover().results.get(&key).copied();
        let matches = match cached {
            Some(ok) => ok,
            None => {
                let ok = {
                    let _one_at_a_time = self.bcrypt.lock_or_recover();
                    bcrypt::verify(&password, hash).unwrap_or(false)
                };
                self.remember(key, ok);
                ok
            }
        };
        matches && known.is_some()
    }

    fn remember(&self, key: [u8; 32], ok: bool) {
        let mut cache = self.results.lock_or_recover();
        if cache.results.insert(key, ok).is_none() {
            cache.order.push_back(key);
        }
        while cache.order.len() > CACHE_SIZE {
            if let Some(old) = cache.order.pop_front() {
                cache.results.remove(&old);
            }
        }
    }

    /// How many results are kept (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.results.lock_or_recover().results.len()
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

    #[test]
    fn known_unknown_and_cached() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let users = Users::new(BTreeMap::from([("prom".to_string(), hash)])).unwrap();
        let cache = AuthCache::default();
        assert!(cache.authorized(&users, Some(&basic("prom", "pw"))));
        assert!(!cache.authorized(&users, Some(&basic("prom", "nope"))));
        // The fixed hash is never matched, not even by its own password.
        assert!(!cache.authorized(&users, Some(&basic("ghost", "no such user"))));
        assert!(!cache.authorized(&users, None));
        assert_eq!(cache.len(), 3);
        assert!(cache.authorized(&users, Some(&basic("prom", "pw"))));
        assert_eq!(cache.len(), 3);
        assert_eq!(users.fixed, "$2b$04$".to_string() + &".".repeat(53));
        // A hash bcrypt reads (and so runs in full), not an error.
        assert!(matches!(
            bcrypt::verify("no such user", &users.fixed),
            Ok(false)
        ));
        for i in 0..CACHE_SIZE + 5 {
            cache.authorized(&users, Some(&basic("ghost", &i.to_string())));
        }
        assert_eq!(cache.len(), CACHE_SIZE);
    }

    #[test]
    fn refuses_what_is_not_a_bcrypt_hash() {
        let e = Users::new(BTreeMap::from([("a".to_string(), "plain".to_string())])).unwrap_err();
        assert!(e.contains("user 'a'"), "{e}");
    }
}
