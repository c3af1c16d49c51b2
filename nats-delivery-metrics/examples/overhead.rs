//! Overhead benchmark: messages per second through a plain async-nats
//! subscriber and through an instrumented `Subscription`, same process, same
//! server, 1 KiB payloads (or the size given), rounds alternating between
//! the two.
//!
//! ```text
//! cargo run --release -p nats-delivery-metrics --example overhead -- [messages] [rounds] [payload bytes]
//! ```
//!
//! Starts its own nats-server (see `scripts/install-deps.sh`). Each round
//! times from the first publish to the last message the application reads;
//! the subscriber's buffers are large enough that nothing is dropped, so both
//! sides count the same work. Also prints the process CPU time per message.
//!
//! With `OVERHEAD_SAME_IN_BOTH=1` both kinds of round run the plain
//! subscriber: the ratio then shows the benchmark's own bias and noise,
//! which should be 1 within the noise.
//!
//! With `OVERHEAD_BACKEND` set (`prometheus-client`, `prometheus`,
//! `metrics` or `opentelemetry`; all four features on, as in the
//! workspace's build) the metrics are exported through that backend, whose
//! own exposition is read every 10 ms during the instrumented rounds: the
//! adapter's cost, collection included, shows in their time and CPU.

use std::time::{Duration, Instant};

use futures::StreamExt;
use nats_delivery_metrics::{ClientMetrics, PendingLimits, SubscribeOptions};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

#[cfg(all(
    feature = "prometheus-client",
    feature = "prometheus",
    feature = "metrics",
    feature = "opentelemetry"
))]
#[path = "../tests/backends_support/mod.rs"]
mod backends_support;

/// Reads the chosen backend's exposition (see the module's documentation).
type Collect = std::sync::Arc<dyn Fn() + Send + Sync>;

#[cfg(all(
    feature = "prometheus-client",
    feature = "prometheus",
    feature = "metrics",
    feature = "opentelemetry"
))]
fn backend_collector(metrics: &ClientMetrics) -> Option<Collect> {
    use backends_support::Backend;
    let name = std::env::var("OVERHEAD_BACKEND").ok()?;
    let backend = match name.as_str() {
        "prometheus-client" => Backend::PrometheusClient,
        "prometheus" => Backend::Prometheus,
        "metrics" => Backend::Metrics,
        "opentelemetry" => Backend::OpenTelemetry,
        other => panic!("OVERHEAD_BACKEND: no backend {other}"),
    };
    let attached = std::sync::Mutex::new(backend.attach(metrics));
    Some(std::sync::Arc::new(move || {
        let exposed = attached.lock().unwrap().read();
        assert!(!exposed.values.is_empty());
    }))
}

#[cfg(not(all(
    feature = "prometheus-client",
    feature = "prometheus",
    feature = "metrics",
    feature = "opentelemetry"
)))]
fn backend_collector(_: &ClientMetrics) -> Option<Collect> {
    assert!(
        std::env::var_os("OVERHEAD_BACKEND").is_none(),
        "OVERHEAD_BACKEND needs the features prometheus-client, prometheus, metrics and opentelemetry"
    );
    None
}

/// The backend's reader, when `OVERHEAD_BACKEND` is set.
static COLLECT: std::sync::OnceLock<Collect> = std::sync::OnceLock::new();

fn install_collector(metrics: &ClientMetrics) {
    if let Some(collect) = backend_collector(metrics) {
        let _ = COLLECT.set(collect.clone());
        start_reading_thread(collect);
    }
}

/// Reads of the exposition, the nanoseconds they took, and the reading
/// thread's CPU nanoseconds, over the run.
static COLLECTIONS: [std::sync::atomic::AtomicU64; 3] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

/// Set during the instrumented rounds: the reading thread reads then.
static ACTIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts the thread that reads the exposition every 10 ms while [`ACTIVE`]
/// is set; at the end of each active stretch it records its own CPU time
/// (one thread for the whole run, so that the 10 ms ticks of /proc add up).
fn start_reading_thread(collect: Collect) {
    use std::sync::atomic::Ordering::Relaxed;
    std::thread::spawn(move || {
        let cpu = cpu_time_of("/proc/thread-self/stat");
        let mut was_active = false;
        loop {
            if ACTIVE.load(Relaxed) {
                let start = Instant::now();
                collect();
                COLLECTIONS[0].fetch_add(1, Relaxed);
                COLLECTIONS[1].fetch_add(start.elapsed().as_nanos() as u64, Relaxed);
                was_active = true;
            } else if was_active {
                let used = cpu_time_of("/proc/thread-self/stat") - cpu;
                COLLECTIONS[2].store(used.as_nanos() as u64, Relaxed);
                was_active = false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}

/// Reading is active while this lives.
struct Reading;

impl Reading {
    fn start() -> Option<Reading> {
        COLLECT.get()?;
        ACTIVE.store(true, std::sync::atomic::Ordering::Relaxed);
        Some(Reading)
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        ACTIVE.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Plain,
    Instrumented,
}

/// User + system CPU time of this process, from /proc (Linux).
fn cpu_time() -> Duration {
    cpu_time_of("/proc/self/stat")
}

/// User + system CPU time from a `stat` file of /proc (10 ms ticks).
fn cpu_time_of(stat: &str) -> Duration {
    let stat = std::fs::read_to_string(stat).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the ')'.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// Reads `n` messages of `subject` from a plain async-nats subscriber, in a
/// task of its own; the task returns the payload bytes read.
async fn plain_reader(
    subscriber: &async_nats::Client,
    subject: &str,
    n: u64,
) -> tokio::task::JoinHandle<usize> {
    let mut sub = subscriber.subscribe(subject.to_string()).await.unwrap();
    sync(subscriber).await;
    tokio::spawn(async move {
        let mut bytes = 0usize;
        for _ in 0..n {
            bytes += sub
                .next()
                .await
                .expect("plain subscriber ended")
                .payload
                .len();
        }
        bytes
    })
}

/// `OVERHEAD_SAME_IN_BOTH` is set: the instrumented rounds run the plain
/// subscriber too.
fn same_in_both() -> bool {
    std::env::var_os("OVERHEAD_SAME_IN_BOTH").is_some()
}

async fn round(
    mode: Mode,
    n: u64,
    subject: &str,
    subscriber: &async_nats::Client,
    publisher: &async_nats::Client,
    metrics: &ClientMetrics,
    len: usize,
) -> (f64, f64) {
    let payload = bytes::Bytes::from(vec![b'x'; len]);
    let consumer = match mode {
        Mode::Plain => plain_reader(subscriber, subject, n).await,
        Mode::Instrumented if same_in_both() => plain_reader(subscriber, subject, n).await,
        Mode::Instrumented => {
            let options = SubscribeOptions::new()
                .name("bench")
                .pending_limits(PendingLimits::new(n, u64::MAX));
            let mut sub = metrics
                .subscribe_with(subscriber, subject.to_string(), options)
                .await
                .unwrap();
            sync(subscriber).await;
            tokio::spawn(async move {
                let mut bytes = 0usize;
                for _ in 0..n {
                    bytes += sub.next().await.expect("subscription ended").payload.len();
                }
                assert_eq!(sub.dropped_messages(), 0, "the benchmark must not drop");
                bytes
            })
        }
    };
    let reading = (mode == Mode::Instrumented).then(Reading::start).flatten();
    let cpu = cpu_time();
    let start = Instant::now();
    for _ in 0..n {
        publisher
            .publish(subject.to_string(), payload.clone())
            .await
            .unwrap();
    }
    publisher.flush().await.unwrap();
    let bytes = tokio::time::timeout(Duration::from_secs(120), consumer)
        .await
        .expect("round timed out: messages were lost")
        .unwrap();
    assert_eq!(bytes as u64, n * len as u64);
    drop(reading);
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_ns = (cpu_time() - cpu).as_nanos() as f64 / n as f64;
    (n as f64 / elapsed, cpu_ns)
}

/// A request round trip so the server has processed the subscription.
async fn sync(client: &async_nats::Client) {
    let _ = client.request("bench.sync", bytes::Bytes::new()).await;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(200_000, |a| a.parse().expect("messages"));
    let rounds: usize = args.next().map_or(7, |a| a.parse().expect("rounds"));
    let len: usize = args
        .next()
        .map_or(1024, |a| a.parse().expect("payload bytes"));
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("bench", &mut registry);
    install_collector(&metrics);
    // connect_options sizes async-nats' channel (2^28 messages) for both
    // kinds of subscription: the plain subscriber never drops either.
    let subscriber = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let publisher = async_nats::connect(server.client_url()).await.unwrap();

    // One unmeasured round of each to warm up.
    for mode in [Mode::Plain, Mode::Instrumented] {
        round(
            mode,
            n / 10,
            "bench.warmup",
            &subscriber,
            &publisher,
            &metrics,
            len,
        )
        .await;
    }
    let (mut plain, mut instrumented, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plain_cpu, mut instrumented_cpu) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [Mode::Plain, Mode::Instrumented]
        } else {
            [Mode::Instrumented, Mode::Plain]
        };
        for (slot, mode) in order.into_iter().enumerate() {
            // Subjects of one length, named by the slot, not the mode: every
            // byte of a MSG line costs time ("Instrumented" against "Plain"
            // made the instrumented rounds 2 to 6 % slower with the same code
            // in both), and with the plain subscriber in both, the rounds of
            // one of two one-letter subjects came out 2 to 5 % faster.
            let subject = format!("bench.{r}.{slot}");
            let (rate, cpu) =
                round(mode, n, &subject, &subscriber, &publisher, &metrics, len).await;
            println!("round {r} {mode:?}: {rate:.0} msgs/s, {cpu:.0} ns CPU per message");
            match mode {
                Mode::Plain => {
                    plain.push(rate);
                    plain_cpu.push(cpu);
                }
                Mode::Instrumented => {
                    instrumented.push(rate);
                    instrumented_cpu.push(cpu);
                }
            }
        }
        ratios.push(instrumented[r] / plain[r]);
    }
    let (p, i) = (median(plain), median(instrumented));
    println!(
        "median over {rounds} rounds of {n} messages ({len} bytes): plain {p:.0} msgs/s, instrumented {i:.0} msgs/s, ratio {:.3}",
        i / p
    );
    println!(
        "median of the per-round ratios (instrumented / plain, same round): {:.3}",
        median(ratios)
    );
    println!(
        "median CPU per message: plain {:.0} ns, instrumented {:.0} ns",
        median(plain_cpu),
        median(instrumented_cpu)
    );
    print_collections();
}

/// How often the backend's exposition was read, and how long a read took.
fn print_collections() {
    // The reading thread records its CPU time within 10 ms of the last round.
    std::thread::sleep(Duration::from_millis(50));
    let reads = COLLECTIONS[0].load(std::sync::atomic::Ordering::Relaxed);
    if reads > 0 {
        let ns = COLLECTIONS[1].load(std::sync::atomic::Ordering::Relaxed);
        let cpu = COLLECTIONS[2].load(std::sync::atomic::Ordering::Relaxed);
        println!(
            "exposition read {reads} times during the instrumented rounds, {:.0} us each on average, {:.0} us of the reading thread's CPU (10 ms ticks over all reads)",
            ns as f64 / reads as f64 / 1000.0,
            cpu as f64 / reads as f64 / 1000.0
        );
    }
}
