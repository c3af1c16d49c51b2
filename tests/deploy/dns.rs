//! A DNS server of one name, for the container to resolve the NATS server by
//! name the way it would in Kubernetes (a Service name), not only through
//! /etc/hosts: the static binary's resolver must read resolv.conf and ask.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Answers A queries for one name with 127.0.0.1 on port 53 of a loopback
/// address of its own, AAAA queries for it with no address, and anything
/// else with NXDOMAIN; counts the queries for its name. Stops when dropped.
pub struct Stub {
    /// Where it listens (port 53).
    pub address: Ipv4Addr,
    answered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Stub {
    /// Starts answering for `name`.
    pub fn start(name: &str) -> Stub {
        // An address of 127/8 of this process's own, so that two runs on one
        // machine do not share port 53.
        let pid = std::process::id();
        let address = Ipv4Addr::new(127, 53, (pid >> 8) as u8, (pid as u8).max(1));
        let socket = UdpSocket::bind(SocketAddr::from((address, 53)))
            .unwrap_or_else(|e| panic!("bind {address}:53 (needs root): {e}"));
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let answered = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let wanted = encode_name(name);
        let (count, stopped) = (answered.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((len, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                if let Some(reply) = answer(&buf[..len], &wanted, &count) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        Stub {
            address,
            answered,
            stop,
        }
    }

    /// How many queries for the name it has answered.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// A resolv.conf that sends every lookup here.
    pub fn resolv_conf(&self) -> String {
        format!(
            "nameserver {}\noptions timeout:1 attempts:3\n",
            self.address
        )
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `name` in DNS wire format: length-prefixed labels, then a zero byte.
fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.trim_end_matches('.').split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.to_ascii_lowercase().as_bytes());
    }
    out.push(0);
    out
}

/// The reply to one query (one question), or None for what is not a query.
fn answer(query: &[u8], wanted: &[u8], answered: &AtomicU64) -> Option<Vec<u8>> {
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return None;
    }
    let name_end = 12 + query[12..].iter().position(|&b| b == 0)? + 1;
    let question_end = name_end + 4;
    let qtype = u16::from_be_bytes([*query.get(name_end)?, *query.get(name_end + 1)?]);
    let ours = query[12..name_end].to_ascii_lowercase() == wanted;
    let mut reply = Vec::with_capacity(question_end + 16);
    reply.extend_from_slice(&query[..2]);
    // A response, recursion desired and available; NXDOMAIN when not ours.
    reply.extend_from_slice(&[0x81, if ours { 0x80 } else { 0x83 }]);
    let answers: u16 = if ours && qtype == 1 { 1 } else { 0 };
    for count in [1, answers, 0, 0] {
        reply.extend_from_slice(&u16::to_be_bytes(count));
    }
    reply.extend_from_slice(query.get(12..question_end)?);
    if answers == 1 {
        // Pointer to the question's name, type A, class IN, TTL 5 s, 4 bytes.
        reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 127, 0, 0, 1]);
    }
    if ours {
        answered.fetch_add(1, Ordering::Relaxed);
    }
    Some(reply)
}
