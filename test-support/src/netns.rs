//! A JetStream cluster whose servers each run in a network namespace of
//! their own, joined by a bridge in the test's namespace, so that a test
//! can cut one server's links (routes, clients, monitoring) and restore
//! them. Needs root and `ip` (iproute2); every name is unique to the run
//! and removed on drop, even when the test fails.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cluster::formed;
use crate::NatsServer;

/// The route, client and monitoring ports inside each namespace: every
/// server has its own address, so fixed ports cannot collide.
const ROUTE_PORT: u16 = 6222;

/// Runs `ip args`, panicking with its error output when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` (install iproute2): {e}"));
    assert!(
        out.status.success(),
        "`ip {}` failed (network namespaces need root and iproute2): {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// The bridge, the namespaces and their veth pairs of one run.
#[derive(Debug)]
pub struct Network {
    tag: String,
    subnet: u8,
    made: Vec<String>,
    links: Vec<String>,
}

impl Network {
    /// Makes a bridge on `10.246.<subnet>.1/24` with `n` namespaces behind
    /// it, server `i` at `10.246.<subnet>.<10 + i>`.
    fn new(n: usize) -> Network {
        static MADE: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        // Interface names have at most 15 characters: "nv" + 8 + "x" + 2 + "-0".
        let tag = format!("{pid:x}x{}", MADE.fetch_add(1, Ordering::Relaxed) % 100);
        let used = String::from_utf8_lossy(
            &Command::new("ip")
                .args(["-4", "-o", "addr"])
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default(),
        )
        .into_owned();
        let subnet = (0..250u32)
            .map(|k| ((pid + k) % 250 + 1) as u8)
            .find(|s| !used.contains(&format!("10.246.{s}.")))
            .expect("a free 10.246.x.0/24");
        let mut net = Network {
            tag: tag.clone(),
            subnet,
            made: Vec::new(),
            links: Vec::new(),
        };
        let bridge = format!("nb{tag}");
        ip(&["link", "add", &bridge, "type", "bridge"]);
        net.links.push(bridge.clone());
        ip(&[
            "addr",
            "add",
            &format!("10.246.{subnet}.1/24"),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for i in 0..n {
            let ns = net.namespace(i);
            ip(&["netns", "add", &ns]);
            net.made.push(ns.clone());
            let veth = net.veth(i);
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            net.links.push(veth.clone());
            ip(&["link", "set", &veth, "master", &bridge, "up"]);
            let addr = format!("{}/24", net.address(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    /// The namespace of server `i`.
    pub fn namespace(&self, i: usize) -> String {
        format!("nd{}-{i}", self.tag)
    }

    /// The bridge side of server `i`'s veth pair.
    fn veth(&self, i: usize) -> String {
        format!("nv{}-{i}", self.tag)
    }

    /// Server `i`'s address.
    pub fn address(&self, i: usize) -> String {
        format!("10.246.{}.{}", self.subnet, 10 + i)
    }

    /// Takes server `i`'s link down: nothing reaches it or leaves it.
    pub fn cut(&self, i: usize) {
        ip(&["link", "set", &self.veth(i), "down"]);
    }

    /// Brings server `i`'s link up again.
    pub fn restore(&self, i: usize) {
        ip(&["link", "set", &self.veth(i), "up"]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for link in &self.links {
            let _ = Command::new("ip").args(["link", "del", link]).output();
        }
        for ns in &self.made {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// A JetStream cluster of `n` servers (`n0`, ...), each in its own network
/// namespace of [`Network`], each with `config` added; returned once its
/// meta group has formed. A server outlives its namespace's name: the
/// namespace goes when its last process does.
pub fn cluster_in_namespaces(n: usize, config: &str) -> (Vec<NatsServer>, Network) {
    let net = Network::new(n);
    let routes = (0..n)
        .map(|i| format!("nats-route://{}:{ROUTE_PORT}", net.address(i)))
        .collect::<Vec<_>>()
        .join(", ");
    let servers = formed(&format!("a cluster of {n} in namespaces"), || {
        let servers = (0..n)
            .map(|i| {
                let addr = net.address(i);
                NatsServer::builder()
                    .name(&format!("n{i}"))
                    .host(&addr)
                    .netns(&net.namespace(i))
                    .jetstream()
                    .config(config)
                    .config(&format!(
                        "cluster {{ name: C, listen: \"{addr}:{ROUTE_PORT}\", routes: [{routes}] }}"
                    ))
                    .start()
            })
            .collect();
        vec![servers]
    })
    .remove(0);
    (servers, net)
}

/// One JetStream server in a network namespace of its own (outside any
/// cluster), with `config` added: [`Network::cut`] with index 0 cuts every
/// connection to it, clients' included, without the server noticing.
pub fn server_in_namespace(config: &str) -> (NatsServer, Network) {
    let net = Network::new(1);
    let addr = net.address(0);
    let server = NatsServer::builder()
        .host(&addr)
        .netns(&net.namespace(0))
        .jetstream()
        .config(config)
        .start();
    (server, net)
}
