//! Ports for processes that must be told theirs in advance.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Lowest port handed out: above every well-known NATS port (4222, 6222,
/// 7422, 8222) and the registered ports most services use.
const LOWEST: u32 = 10_000;

/// Where the next candidate is searched from, started at a place that
/// differs between processes so two test binaries rarely try the same ports.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A TCP port free on 127.0.0.1 at this moment, for a process that must be
/// given its port in advance, such as a cluster route, a server restarted on
/// the same port or an exporter's listener.
///
/// It is taken from below the kernel's ephemeral range. A port the OS chose
/// (`bind` to port 0) lies inside that range, and between this call and the
/// moment the process binds it any outgoing connection on the machine can
/// take it as its local port: a route listener once failed with "address
/// already in use" that way in CI. Below the range only another process
/// choosing a fixed port can collide.
pub fn free_port() -> u16 {
    let (ephemeral_low, _) = ephemeral_range();
    let span = ephemeral_low.saturating_sub(LOWEST).max(1);
    let start = NEXT.fetch_add(1, Ordering::Relaxed);
    if start == 0 {
        NEXT.store(process_seed() % span + 1, Ordering::Relaxed);
    }
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = (LOWEST + offset) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Every port below the range taken: let the OS choose one.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// The kernel's ephemeral port range, or Linux's default where it cannot be
/// read.
fn ephemeral_range() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|p| p.parse().ok());
            Some((parts.next()??, parts.next()??))
        })
        .filter(|&(low, _)| low > LOWEST)
        .unwrap_or((32_768, 60_999))
}

/// A number that differs between processes and runs.
fn process_seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::process::id().wrapping_mul(7_919) ^ nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_distinct_and_bindable() {
        let (low, _) = ephemeral_range();
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        for &p in &ports {
            assert!((LOWEST..low).contains(&u32::from(p)), "{p}");
            TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
    }
}
