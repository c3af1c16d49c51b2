//! `rate_limit`: a token bucket, as exporter-toolkit's (Go's `rate.Limiter`):
//! it holds at most `burst` requests, starts full and gains one every
//! `interval`; a request finding it empty is answered 429.

use crate::lock::LockOrRecover;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The bucket of one configuration (a reload starts a full one).
#[derive(Debug)]
pub(crate) struct RateLimiter {
    interval: Duration,
    burst: f64,
    /// Tokens left and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub(super) fn new(interval: Duration, burst: u32) -> RateLimiter {
        let burst = f64::from(burst);
        RateLimiter {
            interval,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token if there is one.
    pub(crate) fn allow(&self) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock_or_recover();
        let (tokens, at) = *state;
        let gained = now.duration_since(at).as_secs_f64() / self.interval.as_secs_f64();
        let tokens = (tokens + gained).min(self.burst);
        if tokens >= 1.0 {
            *state = (tokens - 1.0, now);
            true
        } else {
            *state = (tokens, now);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_interval() {
        let limiter = RateLimiter::new(Duration::from_secs(3600), 3);
        assert_eq!((0..5).filter(|_| limiter.allow()).count(), 3);
        let none = RateLimiter::new(Duration::from_secs(1), 0);
        assert!(!none.allow());
    }
}
