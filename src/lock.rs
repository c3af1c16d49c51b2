//! Locks that a panic does not poison for good.
//!
//! A std `Mutex` held by a thread that panics is poisoned, and `lock()`
//! then fails for every later caller: with `lock().expect(..)` one panic in
//! a scrape made every later scrape panic too. So the guard is taken back
//! from the poison and the exporter goes on (the panic itself is logged
//! where it happened). Most locks guard state that each change leaves whole
//! (a slot replaced, a cache entry inserted, a `()` that orders work). The
//! few whose update takes several steps (consumer health, the closed
//! connections of `/connz`, the survey's roster) are used as the panic left
//! them: the next polls may count from a half-updated state, which beats
//! never answering again.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// [`Mutex::lock`] that takes the guard back from a lock poisoned by a panic.
pub(crate) trait LockOrRecover<T: ?Sized> {
    /// The guard, whether or not a thread panicked while holding it.
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockOrRecover<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let mut v = held.lock().unwrap();
            *v = 2;
            panic!("while holding the lock");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.lock_or_recover(), 2);
    }
}
