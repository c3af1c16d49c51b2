//! `rate_limit`: exporter-toolkit's token bucket (Go's `rate.Limiter`: it
//! holds at most `burst` requests, starts full and gains one every
//! `interval`), kept by `governor`, but split so that nobody without a
//! password can spend what Prometheus needs:
//!
//! - a request not yet verified (no credentials, wrong ones, or right ones
//!   not yet in the cache) takes from the bucket of its client's address (an
//!   IPv6 address by its /64) before any bcrypt runs;
//! - a verified request takes from one bucket of its own, which only the
//!   holders of a password can empty.
//!
//! Without `basic_auth_users` every request is unverified: one bucket per
//! address.

use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};

/// Addresses whose buckets are kept; past it, buckets full again are
/// forgotten, and if that is not enough every further address shares one
/// bucket (an attacker with many addresses can then slow other unverified
/// clients, never a verified one).
const MAX_ADDRESSES: usize = 65_536;

/// The buckets of one configuration (a reload starts full ones).
#[derive(Debug)]
pub(crate) struct RateLimiter {
    /// `None`: a burst of 0, which refuses everything (as Go's limiter).
    buckets: Option<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    verified: DefaultDirectRateLimiter,
    unverified: DefaultKeyedRateLimiter<IpAddr>,
}

impl RateLimiter {
    pub(super) fn new(interval: Duration, burst: u32) -> RateLimiter {
        let buckets = NonZeroU32::new(burst)
            .zip(Quota::with_period(interval))
            .map(|(burst, quota)| {
                let quota = quota.allow_burst(burst);
                Buckets {
                    verified: governor::RateLimiter::direct(quota),
                    unverified: governor::RateLimiter::keyed(quota),
                }
            });
        RateLimiter { buckets }
    }

    /// Takes a token from the verified requests' bucket if there is one.
    pub(crate) fn allow_verified(&self) -> bool {
        self.buckets
            .as_ref()
            .is_some_and(|b| b.verified.check().is_ok())
    }

    /// Takes a token from the bucket of `address` if there is one.
    pub(crate) fn allow_unverified(&self, address: IpAddr) -> bool {
        let Some(b) = &self.buckets else {
            return false;
        };
        let mut key = bucket_key(address);
        if b.unverified.len() >= MAX_ADDRESSES {
            b.unverified.retain_recent();
            if b.unverified.len() >= MAX_ADDRESSES {
                key = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
            }
        }
        b.unverified.check_key(&key).is_ok()
    }
}

/// An IPv4 address as it is (IPv4-mapped IPv6 ones too), an IPv6 one by its
/// /64: a host usually holds a whole /64.
fn bucket_key(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_burst_then_one_per_interval() {
        let limiter = RateLimiter::new(Duration::from_secs(3600), 3);
        assert_eq!((0..5).filter(|_| limiter.allow_verified()).count(), 3);
        let none = RateLimiter::new(Duration::from_secs(1), 0);
        assert!(!none.allow_verified());
        assert!(!none.allow_unverified(ip("10.0.0.1")));
    }

    #[test]
    fn unverified_requests_spend_only_their_address_bucket() {
        let limiter = RateLimiter::new(Duration::from_secs(3600), 2);
        let spent = (0..10)
            .filter(|_| limiter.allow_unverified(ip("10.0.0.1")))
            .count();
        assert_eq!(spent, 2);
        // Another address, and the verified bucket, are untouched.
        assert!(limiter.allow_unverified(ip("10.0.0.2")));
        assert_eq!((0..5).filter(|_| limiter.allow_verified()).count(), 2);
        // One /64 is one bucket; the mapped form of an IPv4 address is that address.
        assert!(limiter.allow_unverified(ip("2001:db8::1")));
        assert!(limiter.allow_unverified(ip("2001:db8::2")));
        assert!(!limiter.allow_unverified(ip("2001:db8::3")));
        assert!(!limiter.allow_unverified(ip("::ffff:10.0.0.1")));
    }
}
