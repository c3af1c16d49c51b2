//! What the scrape benchmarks share: figures of a process from /proc, timed
//! fetches, and the exporter binary started on a free port.

use std::net::SocketAddr;
use std::process::Child;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::stream::{self as fstream, StreamExt};
use nats_test_server::NatsServer;

#[allow(
    dead_code,
    reason = "only the scrape, server_cost and scrape_worst benchmarks use it"
)]
pub mod worst;

/// The number in the environment variable `name`, or `default`.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The words of the environment variable `name` (none when unset).
pub fn env_args(name: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The value at fraction `q` of `v` (nearest rank): 0.95 the p95, 1.0 the
/// maximum.
#[allow(dead_code, reason = "not every benchmark takes quantiles")]
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The machine's load averages (1, 5 and 15 minutes), for the record.
#[allow(dead_code, reason = "not every benchmark prints the load")]
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[allow(dead_code, reason = "not every benchmark takes minima")]
pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The CPU time of a process (all its threads, user and system), in
/// seconds, from its CPU-time clock: nanoseconds, where `/proc/<pid>/stat`
/// counts 10 ms ticks, too coarse for one request summed over servers.
#[allow(dead_code, reason = "not every benchmark reads CPU time")]
pub fn cpu_seconds(pid: u32) -> f64 {
    let mut clock: libc::clockid_t = 0;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both pointers are to live locals of the types the calls write.
    let read = unsafe {
        libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) == 0
            && libc::clock_gettime(clock, &mut now) == 0
    };
    assert!(read, "no CPU clock for process {pid}");
    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
}

/// A /proc/<pid>/status field in KiB.
#[allow(dead_code, reason = "not every benchmark reads memory")]
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// GETs `url`; the seconds it took and the body.
#[allow(dead_code)] // each benchmark uses one of the two readers
pub async fn timed_get(http: &reqwest::Client, url: &str) -> (f64, bytes::Bytes) {
    let start = Instant::now();
    let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
    (start.elapsed().as_secs_f64(), body)
}

/// One GET read as [`timed_read`] reads it.
#[allow(dead_code)]
pub struct TimedRead {
    /// Seconds from the request to the body's last byte.
    pub seconds: f64,
    /// Seconds from the request to the body's first byte: for a scrape,
    /// when the exporter's poll was done and its text began.
    pub first_byte: f64,
    /// The body's length.
    pub bytes: usize,
    /// The body's first bytes, as many as asked for.
    pub head: Vec<u8>,
    /// Sample lines in the body (lines not empty and not comments): the
    /// series of a text exposition.
    pub samples: usize,
}

/// GETs `url` as a scraper that does not keep the body: read as it
/// arrives, only its first `keep` bytes held. Holding a body of 190 MB in
/// one piece costs the client more than the server's side of a scrape
/// takes to change, so where only the time matters the body is not held.
#[allow(dead_code)]
pub async fn timed_read(http: &reqwest::Client, url: &str, keep: usize) -> TimedRead {
    timed_request(http.get(url), keep).await
}

/// As [`timed_read`], asking for gzip: `bytes` counts what came over the
/// wire, compressed (the client does not decompress).
#[allow(dead_code, reason = "only the scrape benchmark asks for gzip")]
pub async fn timed_read_gzip(http: &reqwest::Client, url: &str) -> TimedRead {
    timed_request(http.get(url).header("Accept-Encoding", "gzip"), 0).await
}

async fn timed_request(request: reqwest::RequestBuilder, keep: usize) -> TimedRead {
    try_request(request, keep).await.unwrap()
}

/// As [`timed_read`], but a request that fails (no answer in the client's
/// timeout, an error status, a body cut off) is an error, not a panic:
/// where failed scrapes are counted.
#[allow(dead_code, reason = "only the worst-case window counts failures")]
pub async fn try_timed_read(
    http: &reqwest::Client,
    url: &str,
    keep: usize,
) -> Result<TimedRead, reqwest::Error> {
    try_request(http.get(url), keep).await
}

async fn try_request(
    request: reqwest::RequestBuilder,
    keep: usize,
) -> Result<TimedRead, reqwest::Error> {
    let start = Instant::now();
    let mut response = request.send().await?.error_for_status()?;
    let (mut bytes, mut head, mut first_byte) = (0, Vec::new(), None);
    let (mut samples, mut line_start) = (0, true);
    while let Some(chunk) = response.chunk().await? {
        first_byte.get_or_insert_with(|| start.elapsed().as_secs_f64());
        bytes += chunk.len();
        let room = keep.saturating_sub(head.len()).min(chunk.len());
        head.extend_from_slice(&chunk[..room]);
        for &b in chunk.iter() {
            samples += usize::from(line_start && b != b'#' && b != b'\n');
            line_start = b == b'\n';
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(TimedRead {
        seconds,
        first_byte: first_byte.unwrap_or(seconds),
        bytes,
        head,
        samples,
    })
}

/// The exporter binary of this build.
pub const EXPORTER: &str = env!("CARGO_BIN_EXE_nats-delivery-exporter");

/// Starts the exporter `binary` on a free port with `args` (which say what
/// it polls) and a 60 s timeout, logging warnings only.
#[allow(dead_code, reason = "scrape_worst keeps the default timeout")]
pub fn spawn_exporter(binary: &str, args: &[String]) -> (Child, SocketAddr) {
    let mut all = vec!["--timeout".to_string(), "60s".into()];
    all.extend_from_slice(args);
    spawn_as_given(binary, &all)
}

/// Starts the exporter `binary` on a free port with `args` and nothing
/// else (its default timeout), logging warnings only.
#[allow(
    dead_code,
    reason = "only the benchmarks that run the worst-case window use it"
)]
pub fn spawn_as_given(binary: &str, args: &[String]) -> (Child, SocketAddr) {
    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let child = std::process::Command::new(binary)
        .args(["--listen", &listen.to_string()])
        .args(args)
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    (child, listen)
}

/// Waits until the exporter listening on `listen` answers /healthz.
pub async fn wait_until_up(http: &reqwest::Client, listen: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while http
        .get(format!("http://{listen}/healthz"))
        .send()
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "exporter did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `streams` memory streams of one message, each with `consumers` durable
/// pull consumers.
#[allow(dead_code, reason = "the benchmarks against one server use it")]
pub async fn create_consumers(server: &NatsServer, streams: usize, consumers: usize) {
    create_more_consumers(server, 0, streams, consumers).await;
}

/// [`create_consumers`] for the streams numbered `from..to`.
#[allow(dead_code, reason = "the benchmarks against one server use it")]
pub async fn create_more_consumers(server: &NatsServer, from: usize, to: usize, consumers: usize) {
    create_more_consumers_at(&server.client_url(), None, from, to, consumers).await;
}

/// [`create_more_consumers`] through the NATS URL `url`, as the user
/// `user` (name, password) of the server's configuration when given.
#[allow(dead_code, reason = "the benchmarks against one server use it")]
pub async fn create_more_consumers_at(
    url: &str,
    user: Option<(&str, &str)>,
    from: usize,
    to: usize,
    consumers: usize,
) {
    let options = match user {
        Some((name, password)) => {
            async_nats::ConnectOptions::with_user_and_password(name.into(), password.into())
        }
        None => async_nats::ConnectOptions::new(),
    };
    let client = options.connect(url).await.unwrap();
    let js = jetstream::new(client);
    let setup = Instant::now();
    let streams = to - from;
    fstream::iter(from..to)
        .for_each_concurrent(8, |s| {
            let js = js.clone();
            async move {
                let st = js
                    .create_stream(stream::Config {
                        name: format!("S{s}"),
                        subjects: vec![format!("s{s}.>")],
                        storage: stream::StorageType::Memory,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                js.publish(format!("s{s}.x"), "x".into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                for c in 0..consumers {
                    st.create_consumer(pull::Config {
                        durable_name: Some(format!("C{c}")),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                }
            }
        })
        .await;
    eprintln!(
        "created {streams} streams x {consumers} consumers in {:.1?}",
        setup.elapsed()
    );
}
