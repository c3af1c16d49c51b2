//! Connections a client opens and then trickles, leaves idle or multiplies
//! cannot hold the exporter's port: headers must arrive within
//! --web.header-read-timeout, an idle connection is closed after
//! --web.idle-timeout, and past --web.max-connections a scrape waits until
//! one of them closes, then gets through. No NATS server: these ask
//! `/healthz`, which polls nothing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nats_test_server::wait::{Later, Wait};

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

fn start(flags: &[&str]) -> Exporter {
    let port = nats_test_server::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", "http://127.0.0.1:9", "--sources", "varz"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .env("NATS_DELIVERY_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let e = Exporter { child, port };
    Wait::secs("the exporter to listen", 20).until_blocking(|| {
        let probe = TcpStream::connect(("127.0.0.1", e.port));
        probe
            .map(drop)
            .map_err(|err| Later(move || err.to_string()))
    });
    e
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // A test bound, far past every timeout the tests set.
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

/// Whether the exporter has closed `s`: a read gives end of file (or a reset).
fn closed_by_exporter(s: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// One header line every 200 ms: the exporter closes the connection after
/// the 1 s header read timeout, long before the 100 lines (20 s) a
/// trickler would need (before, 15 lines over 45 s were answered 200).
#[test]
fn trickled_headers_are_cut_off() {
    let e = start(&["--web.header-read-timeout", "1s"]);
    let mut s = connect(e.port);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut sent = 0;
    while sent < 100 {
        std::thread::sleep(Duration::from_millis(200));
        if s.write_all(format!("X-Line-{sent}: y\r\n").as_bytes())
            .is_err()
        {
            break;
        }
        sent += 1;
    }
    assert!(sent < 100, "the exporter took 100 trickled header lines");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(!answer.contains("200 OK"), "{answer}");
}

/// A keep-alive connection left idle after its answer is closed by the
/// idle timeout (1 s; the header read timeout, 60 s, is not the one at
/// work). Before, 20 idle connections were still open after 40 s.
#[test]
fn idle_connections_are_closed() {
    let e = start(&[
        "--web.idle-timeout",
        "1s",
        "--web.header-read-timeout",
        "60s",
    ]);
    let mut s = connect(e.port);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = [0u8; 512];
    let n = s.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Then nothing: the exporter closes it (the read bound is 60 s).
    assert!(
        closed_by_exporter(&mut s),
        "the idle connection stayed open"
    );
}

/// At the cap (3) a scrape waits in the backlog; the idle connections
/// holding the places are closed by the header read timeout (1 s), and
/// the scrape is answered 200 after at least one of them was closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_scrape_gets_through_once_a_place_frees() {
    let e = start(&[
        "--web.max-connections",
        "3",
        "--web.header-read-timeout",
        "1s",
    ]);
    let mut idle: Vec<TcpStream> = (0..3).map(|_| connect(e.port)).collect();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let r = http
        .get(format!("http://127.0.0.1:{}/healthz", e.port))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The places were taken: the scrape was answered only after the
    // exporter closed an idle connection, whose end of file is already here.
    let mut closed = 0;
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        closed += usize::from(closed_by_exporter(s));
    }
    assert!(closed >= 1, "no idle connection was closed first");
}

/// The flags refuse 0.
#[test]
fn zero_timeouts_are_refused() {
    for flag in ["--web.header-read-timeout", "--web.idle-timeout"] {
        let out = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args([flag, "0s"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("greater than zero"), "{err}");
    }
}
