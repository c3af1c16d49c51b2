//! A JetStream cluster whose servers each run in a network namespace of
//! their own, joined by a bridge in the test's namespace, so that a test
//! can cut one server's links (routes, clients, monitoring, leaf node
//! connections) and restore them; also one server so, or a leaf node so
//! beside a hub in the test's own namespace. Needs root and `ip`
//! (iproute2); every name is unique to the run and removed on drop, even
//! when the test fails.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::cluster::formed;
use crate::wait::Wait;
use crate::{free_port, http_get, Builder, NatsServer};

/// The route, client and monitoring ports inside each namespace: every
/// server has its own address, so fixed ports cannot collide.
const ROUTE_PORT: u16 = 6222;

/// Runs `ip args`, panicking with its error output when it fails.
fn ip(args: &[&str]) {
    if let Err(said) = try_ip(args) {
        panic!(
            "`ip {}` failed (network namespaces need root and iproute2): {said}",
            args.join(" ")
        );
    }
}

/// Runs `ip args`: its error output when it fails.
fn try_ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` (install iproute2): {e}"));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Claims a subnet `10.246.<s>.0/24` for this run by making its bridge,
/// named after it: a name is made once on the machine, so two tests
/// running at once never get the same subnet (choosing one not yet seen
/// in use and then adding it raced). Starts from one derived from `pid`;
/// skips subnets some other interface has.
fn claim_subnet(pid: u32) -> (u8, String) {
    let used = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["-4", "-o", "addr"])
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default(),
    )
    .into_owned();
    let mut refused = Vec::new();
    for k in 0..250u32 {
        let subnet = ((pid + k) % 250 + 1) as u8;
        if used.contains(&format!("10.246.{subnet}.")) {
            continue;
        }
        let bridge = format!("nb246x{subnet}");
        match try_ip(&["link", "add", &bridge, "type", "bridge"]) {
            Ok(()) => return (subnet, bridge),
            Err(said) => refused.push(format!("{bridge}: {said}")),
        }
    }
    panic!("no free 10.246.x.0/24 to claim: {refused:?}");
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
        let (subnet, bridge) = claim_subnet(pid);
        let mut net = Network {
            tag: tag.clone(),
            subnet,
            made: Vec::new(),
            links: vec![bridge.clone()],
        };
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

    /// The bridge's own address, which every namespace reaches (until its
    /// link is cut): a server in the test's namespace listening on it is
    /// reachable from the others.
    pub fn bridge_address(&self) -> String {
        format!("10.246.{}.1", self.subnet)
    }

    /// Runs `f`'s future to its end on a thread of its own that entered
    /// server `i`'s namespace, on a runtime of its own: the sockets it opens
    /// are the namespace's, so a client there reaches the server on its
    /// address while its link is cut, as an application beside a cut-off
    /// leaf node does.
    pub fn block_on_inside<F, T>(&self, i: usize, f: impl FnOnce() -> F + Send) -> T
    where
        F: Future<Output = T>,
        T: Send,
    {
        let path = format!("/run/netns/{}", self.namespace(i));
        std::thread::scope(|scope| {
            let inside = scope.spawn(|| {
                let ns = std::fs::File::open(&path)
                    .unwrap_or_else(|e| panic!("open {path} (network namespaces need root): {e}"));
                // SAFETY: setns(2) with a descriptor held open for the call;
                // it moves this thread only, which ends with the scope.
                let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(
                    rc,
                    0,
                    "setns into {path}: {}",
                    std::io::Error::last_os_error()
                );
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(f())
            });
            inside
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
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

/// A hub server in the test's own namespace and a leaf node of it in a
/// namespace of its own (index 0 of the [`Network`]), each started from its
/// builder (JetStream and its domain, accounts, ...): the hub listens for
/// leaf nodes on the bridge ([`Network::bridge_address`]) and the leaf
/// connects to it there. [`Network::cut`] with index 0 cuts the leaf off the
/// hub and off the test's own clients; [`Network::block_on_inside`] runs a
/// client on the leaf's side. Returned once the hub lists the leaf node.
pub fn hub_and_leaf(hub: Builder, leaf: Builder) -> (NatsServer, NatsServer, Network) {
    let net = Network::new(1);
    let listen = format!("{}:{}", net.bridge_address(), free_port());
    let hub = hub
        .config(&format!("leafnodes {{ listen: \"{listen}\" }}"))
        .start();
    let leaf = leaf
        .host(&net.address(0))
        .netns(&net.namespace(0))
        .config(&format!(
            "leafnodes {{ remotes: [ {{ url: \"nats-leaf://{listen}\" }} ] }}"
        ))
        .start();
    let leafz = format!("{}/leafz", hub.monitor_url());
    Wait::secs("the hub to list its leaf node", 20)
        .every(Duration::from_millis(100))
        .until_blocking(|| {
            let v: serde_json::Value = serde_json::from_str(&http_get(&leafz)).expect("leafz");
            if v["leafnodes"] == 1 {
                Ok(())
            } else {
                Err(v["leafnodes"].clone())
            }
        });
    (hub, leaf, net)
}
