//! Ports for processes that must be told theirs in advance.

use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Lowest port handed out: above every well-known NATS port (4222, 6222,
/// 7422, 8222) and the registered ports most services use.
const LOWEST: u32 = 10_000;

/// Where the next candidate is searched from, started at a place that
/// differs between processes so two test binaries rarely try the same ports.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The claims this process holds, kept until it exits.
static CLAIMS: Mutex<Vec<UnixListener>> = Mutex::new(Vec::new());

/// A TCP port free on 127.0.0.1 at this moment and claimed by this process
/// until it exits, for a process that must be given its port in advance,
/// such as a cluster route, a server restarted on the same port or an
/// exporter's listener.
///
/// It is taken from below the kernel's ephemeral range. A port the OS chose
/// (`bind` to port 0) lies inside that range, and between this call and the
/// moment the process binds it any outgoing connection on the machine can
/// take it as its local port. Below the range only another process choosing
/// a fixed port can collide, and every test process chooses through here:
/// a port is handed out only with its claim (`claim`), so two test
/// processes never hold the same one, even while a server that was given it
/// is stopped to be restarted on it.
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
        if claim(port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Every port below the range taken: let the OS choose one.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Claims `port` for this process, false if another process (or this one)
/// holds it. The claim is a Unix socket bound to a name in the abstract
/// namespace: one name per port, shared by every process on the machine and
/// let go by the kernel when the process exits, however it exits.
fn claim(port: u16) -> bool {
    let name = format!("nats-delivery-exporter-tests/port/{port}");
    let Ok(addr) = SocketAddr::from_abstract_name(name.as_bytes()) else {
        return false;
    };
    match UnixListener::bind_addr(&addr) {
        Ok(listener) => {
            let mut claims = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
            claims.push(listener);
            true
        }
        Err(_) => false,
    }
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

    /// Run only by the test below, as a second process: claims the port
    /// named in `CLAIM_PORT` (or any, with `free_port`, if it names none),
    /// prints `claimed PORT` and exits 0, or exits 1 if it could not.
    #[test]
    #[ignore = "a child process of another_process_cannot_take_a_port_this_one_was_given"]
    fn claim_in_child_process() {
        let port = match std::env::var("CLAIM_PORT") {
            Ok(port) => port.parse().unwrap(),
            Err(_) => free_port(),
        };
        if !claim(port) && std::env::var("CLAIM_PORT").is_ok() {
            std::process::exit(1);
        }
        println!("claimed {port}");
        std::process::exit(0);
    }

    /// Runs [`claim_in_child_process`] in a new process; its exit code and
    /// the port it claimed.
    fn child_claims(port: Option<u16>) -> (Option<i32>, Option<u16>) {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args([
            "--exact",
            "ports::tests::claim_in_child_process",
            "--ignored",
            "--nocapture",
        ]);
        if let Some(port) = port {
            child.env("CLAIM_PORT", port.to_string());
        }
        let out = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let claimed = stdout
            .lines()
            .find_map(|l| l.strip_prefix("claimed "))
            .map(|p| p.trim().parse().unwrap());
        (out.status.code(), claimed)
    }

    #[test]
    fn another_process_cannot_take_a_port_this_one_was_given() {
        let given = free_port();
        assert_eq!(
            child_claims(Some(given)),
            (Some(1), None),
            "port {given} was given here"
        );
        // The kernel lets go of a claim when its process exits.
        let (code, Some(was_childs)) = child_claims(None) else {
            panic!("the child process claimed no port");
        };
        assert_eq!(code, Some(0));
        assert!(
            claim(was_childs),
            "port {was_childs} after its claimant exited"
        );
        assert!(!claim(was_childs), "port {was_childs} claimed twice");
    }
}
