//! Each request of an exporter's poll made alone, over HTTP (a sidecar's
//! way) and through the system account, of each of the three servers in
//! turn: what each costs the servers, so that the scrapes' totals can be
//! taken apart. The CPU is the three servers' together; "beyond idle"
//! takes off what the servers spend anyway over the same wall time (their
//! Raft groups), measured in the same rounds.

use std::time::{Duration, Instant};

use nats_test_server::NatsServer;

use crate::cluster::cluster_cpu;
use crate::support::{median, timed_read};
use crate::system_raw::SystemRaw;
use crate::Kind;

/// One request of a poll: its name, its HTTP path and query, and its
/// system-account kind and JSON options (the forms the exporter sends).
struct Request {
    name: &'static str,
    http: &'static str,
    kind: &'static str,
    options: &'static str,
}

const REQUESTS: [Request; 6] = [
    Request {
        name: "varz",
        http: "varz",
        kind: "VARZ",
        options: "{}",
    },
    Request {
        name: "connz top pending",
        http: "connz?sort=pending&limit=10&auth=true",
        kind: "CONNZ",
        options: r#"{"sort":"pending","limit":10,"auth":true}"#,
    },
    Request {
        name: "connz closed",
        http: "connz?state=closed&sort=stop&limit=50&offset=0&auth=true",
        kind: "CONNZ",
        options: r#"{"state":1,"sort":"stop","limit":50,"offset":0,"auth":true}"#,
    },
    Request {
        name: "jsz, no config",
        http: "jsz?accounts=true&streams=true&consumers=true&config=false&offset=0&limit=1024",
        kind: "JSZ",
        options: r#"{"accounts":true,"streams":true,"consumer":true,"config":false,"offset":0,"limit":1024}"#,
    },
    Request {
        name: "jsz, config",
        http: "jsz?accounts=true&streams=true&consumers=true&config=true&offset=0&limit=1024",
        kind: "JSZ",
        options: r#"{"accounts":true,"streams":true,"consumer":true,"config":true,"offset":0,"limit":1024}"#,
    },
    Request {
        name: "accstatz",
        http: "accstatz?unused=true",
        kind: "ACCSTATZ",
        options: r#"{"include_unused":true}"#,
    },
];

/// `rounds` alternating rounds of every request over both transports (of
/// each server in turn) and of one idle second; prints the table.
pub async fn measure(servers: &[NatsServer], http: &reqwest::Client, rounds: usize) {
    let system = SystemRaw::connect(servers, http).await;
    // Kind 2r is request r over HTTP, 2r + 1 through the system account;
    // the last is no request for one second.
    let count = REQUESTS.len() * 2 + 1;
    let mut kinds: Vec<Kind> = (0..count).map(|_| Kind::default()).collect();
    for round in 0..rounds {
        for which in (0..count).map(|k| (k + round * 5) % count) {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let before = cluster_cpu(servers);
            let began = Instant::now();
            let mut bytes = 0;
            match REQUESTS.get(which / 2) {
                Some(r) if which % 2 == 0 => {
                    for s in servers {
                        let url = format!("{}/{}", s.monitor_url(), r.http);
                        bytes += timed_read(http, &url, 0).await.bytes;
                    }
                }
                Some(r) => {
                    for n in 0..servers.len() {
                        bytes += system.ask(n, r.kind, r.options).await.1.len();
                    }
                }
                None => tokio::time::sleep(Duration::from_secs(1)).await,
            }
            let k = &mut kinds[which];
            k.wall.push(began.elapsed().as_secs_f64());
            k.cpu.push(cluster_cpu(servers) - before);
            k.bytes = bytes;
        }
    }
    print(&kinds, rounds);
}

/// Each request's medians over HTTP and through the system account, as
/// measured and beyond the servers' idle CPU over the same time.
fn print(kinds: &[Kind], rounds: usize) {
    let idle = kinds.last().unwrap();
    let per_second = median(&idle.cpu) / median(&idle.wall);
    let beyond = |k: &Kind| median(&k.cpu) - per_second * median(&k.wall);
    println!();
    println!(
        "each request of a poll, of each of the 3 servers in turn, {rounds} alternating rounds; idle: {per_second:.3} s of CPU per s"
    );
    println!("request             | servers' CPU: HTTP / system account (beyond idle: HTTP / system account) | wall: HTTP / system account | bytes: HTTP / system account");
    for (n, r) in REQUESTS.iter().enumerate() {
        let (h, s) = (&kinds[2 * n], &kinds[2 * n + 1]);
        println!(
            "{:<19} | {:.4} / {:.4} s ({:.4} / {:.4} s) | {:.4} / {:.4} s | {:.2} / {:.2} MB",
            r.name,
            median(&h.cpu),
            median(&s.cpu),
            beyond(h),
            beyond(s),
            median(&h.wall),
            median(&s.wall),
            h.bytes as f64 / 1e6,
            s.bytes as f64 / 1e6,
        );
    }
}
