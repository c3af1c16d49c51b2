//! Clients that stop reading cannot hold the exporter: a stuck answer is cut
//! after --write-timeout, and after SIGTERM the process stops accepting and
//! exits within --shutdown-timeout whatever its readers do.
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_endpoint::{self, FakeEndpoint, Reply};
use nats_test_server::wait::Wait;

/// A /jsz reply with `n` consumers: about 0.6 kB of exposition each.
fn big_jsz(n: usize) -> String {
    let consumers: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"name":"consumer-{i}","num_ack_pending":{i},"num_pending":1,"delivered":{{"consumer_seq":1,"stream_seq":1}},"ack_floor":{{"consumer_seq":1,"stream_seq":1}}}}"#))
        .collect();
    format!(
        r#"{{"now":"2026-01-01T00:00:00Z","account_details":[{{"name":"A","stream_detail":[{{"name":"S","state":{{"messages":1}},"consumer_detail":[{}]}}]}}]}}"#,
        consumers.join(",")
    )
}

async fn big_endpoint() -> FakeEndpoint {
    let jsz = big_jsz(20_000);
    fake_endpoint::start(move |path| {
        if path.starts_with("/jsz") {
            Reply::Fixed("200 OK", jsz.clone())
        } else {
            Reply::Fixed("200 OK", "{}".into())
        }
    })
    .await
}

struct Exporter {
    child: Child,
    port: u16,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(monitor: &str, flags: &[&str]) -> Exporter {
    let port = nats_test_server::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", monitor, "--sources", "jsz"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .env("NATS_DELIVERY_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let e = Exporter { child, port };
    Wait::secs("the exporter to listen", 20)
        .until_blocking(|| TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.kind()));
    e
}

/// Asks for /metrics with a tiny receive buffer and reads nothing.
async fn stuck_reader(port: u16) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let s = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let mut s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s
}

/// Whether the exporter's end of `client`'s connection is no longer open
/// (it closed the socket: its FIN waits behind the bytes the client has not
/// read), from the kernel's table of IPv4 TCP sockets.
fn closed_by_exporter(client: &TcpStream) -> bool {
    const ESTABLISHED: &str = "01";
    let (client_port, exporter_port) = (
        client.local_addr().unwrap().port(),
        client.peer_addr().unwrap().port(),
    );
    let port =
        |address: &str| u16::from_str_radix(address.rsplit(':').next().unwrap(), 16).unwrap();
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .any(|f| port(f[1]) == exporter_port && port(f[2]) == client_port && f[3] != ESTABLISHED)
}

/// Reads whatever is left; returns the bytes read and whether the whole
/// answer arrived (its chunked body's last chunk, or as many bytes as a
/// Content-Length announced).
fn drain(mut s: TcpStream) -> (usize, bool) {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    let head_end = text.find("\r\n\r\n").map_or(all.len(), |i| i + 4);
    let head = text[..head_end].to_ascii_lowercase();
    if head.contains("transfer-encoding: chunked") {
        return (all.len(), text.ends_with("\r\n0\r\n\r\n"));
    }
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(usize::MAX);
    (all.len(), all.len() - head_end >= length)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_is_cut_off() {
    let monitor = big_endpoint().await;
    // A poll of 20,000 consumers by a debug build on a loaded machine can
    // take seconds: the answer must be whole, whatever the poll took.
    let e = start(&monitor.url, &["--write-timeout", "1s", "--timeout", "60s"]);
    let full = reqwest::get(format!("http://127.0.0.1:{}/metrics", e.port))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Larger than what the kernel buffers for a reader that reads nothing.
    assert!(full.len() > 8_000_000, "{} bytes", full.len());
    // A reader that reads at once gets the whole answer, as `drain` sees it.
    let mut reader = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    reader
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (_, complete) = tokio::task::block_in_place(|| drain(reader));
    assert!(complete, "a reader that reads got only part of the answer");
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(stuck_reader(e.port).await);
    }
    // The answer starts once a poll is done, which a loaded machine can
    // take seconds to do: wait until the exporter has closed each connection.
    Wait::secs("the exporter to close every stuck reader's connection", 60)
        .every(Duration::from_millis(100))
        .until(|| readers.iter().all(closed_by_exporter))
        .await;
    for r in readers {
        let (read, complete) = tokio::task::block_in_place(|| drain(r));
        assert!(
            !complete,
            "a stuck reader got the whole answer ({read} bytes)"
        );
        assert!(read < full.len());
    }
    // The exporter still serves everyone else.
    let again = reqwest::get(format!("http://127.0.0.1:{}/metrics", e.port))
        .await
        .unwrap();
    assert!(again.status().is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_within_the_shutdown_timeout_despite_stuck_readers() {
    let monitor = big_endpoint().await;
    let hanging = fake_endpoint::start(|_| Reply::Hang).await;
    let urls = format!("{},{}", monitor.url, hanging.url);
    let mut e = start(
        &urls,
        &[
            "--write-timeout",
            "60s",
            "--shutdown-timeout",
            "2s",
            "--timeout",
            "30s",
        ],
    );
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(stuck_reader(e.port).await);
    }
    // Wait until the poll of the hanging source is under way, then signal.
    // The exporter listens for SIGTERM before it binds its port, so from
    // here a signal always finds it ready to stop cleanly (it was once
    // ended by the signal's default action, under load, when it bound first).
    Wait::secs("the poll of the hanging source", 20)
        .every(Duration::from_millis(20))
        .until(|| {
            let asked = hanging.requests();
            (asked >= 1).then_some(()).ok_or(asked)
        })
        .await;
    let signalled = Instant::now();
    let status = Command::new("kill")
        .arg(e.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = Wait::secs("an exit after SIGTERM", 20)
        .until(|| e.child.try_wait().unwrap())
        .await;
    let took = signalled.elapsed();
    // Bounded by the 2 s shutdown timeout (plus start-up slack), not by the
    // readers nor the 30 s poll timeout.
    assert!(took < Duration::from_secs(10), "exit took {took:?}");
    assert!(exit.success(), "{exit:?}");
    assert!(TcpStream::connect(("127.0.0.1", e.port)).is_err());
    drop(readers);
}
