//! The window in which scrapes are at their worst, shared by the `scrape`,
//! `server_cost` and `scrape_worst` benchmarks. An exporter (default flags
//! and timeout, but `--jsz-config-interval 30s`, so that a configuration
//! refresh falls in the window) runs against a real server at
//! `BENCH_WORST_BEFORE` consumers (a tenth of the total by default), then
//! the server jumps to `BENCH_WORST_CONSUMERS` (100,000 by default), 100
//! per stream, and `BENCH_WORST_ROUNDS` (21) rounds follow,
//! `BENCH_WORST_PACE` seconds apart (2; a Prometheus `scrape_interval`
//! is 15 s or more, when the exporter's own reads end between two): in
//! each, one scrape and one full `/jsz` fetch (`config=true`, what a second
//! scraper or a peer exporter asks) at the same moment. The first round is
//! the first scrape after the jump. Then a new exporter is started against
//! the server as it now is and its first scrape is taken, with a full fetch
//! beside it too: the window's last scrape. `BENCH_EXPORTER_ARGS` adds flags
//! to both exporters.
//!
//! `BENCH_WORST_SYSTEM=1` polls through the system account instead (the
//! consumers in an account `APP`, the exporters with
//! `--system-account-polling`). `BENCH_WORST_STALL=1` watches what an
//! alert sees: with `--consumer-status-window 10s` and
//! `--jsz-config-interval 4s` (the rounds laid 30 s apart, as a scrape
//! interval, that is a refresh every minute over some 10 minutes), every
//! scrape must carry the status series of the consumer `S0`/`C0`, stopped
//! since before the jump (one message waits, nobody reads), or
//! `NatsJetStreamConsumerStopped`'s `for` would start again.
//!
//! A scrape fails when it has no `/jsz` (`nats_delivery_up{source="jsz"}`
//! is not 1) or no whole answer at all. The figures are printed beside the
//! targets (0 failed scrapes; the maximum scrape at most 2x the full
//! fetch's median; the median at most 0.6x; peak RSS at most 96 MB).

use std::process::Child;
use std::time::{Duration, Instant};

use nats_test_server::sample::value;
use nats_test_server::NatsServer;

use super::{
    cpu_seconds, create_more_consumers_at, env_args, env_or, load_average, median, quantile,
    spawn_as_given, status_kib, timed_read, try_timed_read, wait_until_up, EXPORTER,
};

/// The first bytes of a scrape kept: the exporter's own families come first.
const HEAD_KEPT: usize = 16 << 20;

/// The window's sizes, from the environment.
pub struct Window {
    /// Consumers before the jump and after it.
    pub before: usize,
    pub after: usize,
    /// Rounds after the jump (the new exporter's scrape comes on top).
    pub rounds: usize,
    /// Seconds from one round's start to the next's.
    pub pace: u64,
    /// Flags given to both exporters.
    pub extra: Vec<String>,
    /// Polled through the system account.
    pub system: bool,
    /// Each scrape's stall series looked for.
    pub stall: bool,
}

/// The accounts of a server polled through the system account.
const ACCOUNTS: &str = r#"
accounts {
  SYS { users: [ { user: sys, password: sys-secret } ] }
  APP { users: [ { user: app, password: app-secret } ], jetstream: enabled }
}
system_account: SYS
"#;

impl Window {
    /// The window `BENCH_WORST_*` asks for; `None` when
    /// `BENCH_WORST_CONSUMERS` is 0 (the window skipped).
    pub fn from_env() -> Option<Window> {
        let after = env_or("BENCH_WORST_CONSUMERS", 100_000);
        let before = env_or("BENCH_WORST_BEFORE", after / 10);
        assert!(
            after == 0 || (before >= 100 && before < after),
            "BENCH_WORST_BEFORE {before} must be at least 100 and below BENCH_WORST_CONSUMERS {after}"
        );
        let stall = env_or("BENCH_WORST_STALL", 0) == 1;
        let interval = if stall { "4s" } else { "30s" };
        let mut extra = vec!["--jsz-config-interval".to_string(), interval.into()];
        if stall {
            extra.extend(["--consumer-status-window".to_string(), "10s".into()]);
        }
        extra.extend(env_args("BENCH_EXPORTER_ARGS"));
        (after > 0).then(|| Window {
            before,
            after,
            rounds: env_or("BENCH_WORST_ROUNDS", 21),
            pace: env_or("BENCH_WORST_PACE", 2) as u64,
            extra,
            system: env_or("BENCH_WORST_SYSTEM", 0) == 1,
            stall,
        })
    }
}

/// One scrape and the full fetch beside it.
pub struct Round {
    /// The scrape's seconds (to its last byte, or to its failure).
    pub seconds: f64,
    /// Whether it was whole and had `/jsz`.
    pub jsz: bool,
    /// Whether its poll read configuration; the failed reads so far.
    pub config_read: bool,
    pub read_failures: f64,
    /// Why it failed, when it had no answer.
    pub error: Option<String>,
    /// Whether it carried the stall series (`None`: not looked for).
    pub stall: Option<bool>,
    /// The full fetch's seconds.
    pub full: f64,
    /// The server's CPU seconds over the round (both requests together).
    pub server_cpu: f64,
}

/// What the window measured.
pub struct Figures {
    pub window: (usize, usize),
    /// Seconds between rounds.
    pub pace: u64,
    /// The rounds after the jump, then the new exporter's first.
    pub rounds: Vec<Round>,
    /// Peak resident memory (KiB) of the exporter through the jump and of
    /// the new one.
    pub peak_kib: (u64, u64),
}

/// Runs the window on a fresh server and returns its figures.
pub async fn measure(w: &Window) -> Figures {
    let server = match w.system {
        true => NatsServer::builder().jetstream().config(ACCOUNTS).start(),
        false => NatsServer::builder().jetstream().start(),
    };
    let app = w.system.then_some(("app", "app-secret"));
    let client_url = server.client_url();
    create_more_consumers_at(&client_url, app, 0, w.before / 100, 100).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let url = server.monitor_url();
    let jsz = format!("{url}/jsz?accounts=true&streams=true&consumers=true&config=true");
    let polled = match w.system {
        true => vec![
            "--system-account-polling".to_string(),
            "--system-account".into(),
            "user:sys:sys-secret".into(),
            "--nats-servers".into(),
            server.client_url(),
        ],
        false => vec!["--monitor-url".to_string(), url.clone()],
    };
    let args = [polled, w.extra.clone()].concat();
    let (mut exporter, metrics) = start(&http, &args).await;
    let at = Probe {
        server: &server,
        jsz: &jsz,
        stall: w.stall,
    };
    for _ in 0..2 {
        let r = round(&http, &at, &metrics).await;
        assert!(r.jsz, "the exporter reads /jsz before the jump");
    }
    create_more_consumers_at(&client_url, app, w.before / 100, w.after / 100, 100).await;
    let mut rounds = Vec::new();
    let started = Instant::now();
    for n in 0..w.rounds {
        tokio::time::sleep_until((started + Duration::from_secs(w.pace * n as u64)).into()).await;
        let r = round(&http, &at, &metrics).await;
        print_round(&format!("round {n:>2}"), &r);
        rounds.push(r);
    }
    let peak = status_kib(exporter.id(), "VmHWM:");
    stop(&mut exporter);
    let (mut fresh, metrics) = start(&http, &args).await;
    let first = round(&http, &at, &metrics).await;
    print_round("new exporter's first scrape", &first);
    rounds.push(first);
    let fresh_peak = status_kib(fresh.id(), "VmHWM:");
    stop(&mut fresh);
    Figures {
        window: (w.before, w.after),
        pace: w.pace,
        rounds,
        peak_kib: (peak, fresh_peak),
    }
}

/// Starts an exporter with default flags but `args`; its process and
/// metrics URL.
async fn start(http: &reqwest::Client, args: &[String]) -> (Child, String) {
    let (child, listen) = spawn_as_given(EXPORTER, args);
    wait_until_up(http, listen).await;
    (child, format!("http://{listen}/metrics"))
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// What a round measures: the server, its full fetch's URL, and whether
/// the stall series is looked for (the whole scrape then kept).
struct Probe<'a> {
    server: &'a NatsServer,
    jsz: &'a str,
    stall: bool,
}

/// A scrape of `metrics` and a full fetch at once.
async fn round(http: &reqwest::Client, at: &Probe<'_>, metrics: &str) -> Round {
    let cpu = cpu_seconds(at.server.pid());
    let began = Instant::now();
    let kept = if at.stall { usize::MAX } else { HEAD_KEPT };
    let (scrape, full) = tokio::join!(
        async {
            let read = try_timed_read(http, metrics, kept).await;
            (read, began.elapsed().as_secs_f64())
        },
        async { timed_read(http, at.jsz, 0).await.seconds }
    );
    let server_cpu = cpu_seconds(at.server.pid()) - cpu;
    let (read, seconds) = scrape;
    let (text, error) = match read {
        Ok(r) => (String::from_utf8_lossy(&r.head).into_owned(), None),
        Err(e) => (String::new(), Some(e.to_string())),
    };
    let of = |name: &str, labels: &[(&str, &str)]| value(&text, name, labels);
    Round {
        seconds,
        jsz: of("nats_delivery_up", &[("source", "jsz")]) == Some(1.0),
        config_read: of("nats_delivery_jsz_config_read", &[]) == Some(1.0),
        read_failures: of("nats_delivery_jsz_config_read_failures_total", &[]).unwrap_or(0.0),
        error,
        stall: at
            .stall
            .then(|| of("nats_delivery_consumer_status", STALLED) == Some(1.0)),
        full,
        server_cpu,
    }
}

/// The stall series: `S0`/`C0` stopped.
const STALLED: &[(&str, &str)] = &[("stream", "S0"), ("consumer", "C0"), ("status", "stopped")];

fn print_round(name: &str, r: &Round) {
    println!(
        "{name}: scrape {:.3} s{}{}{}, full fetch {:.3} s, server CPU {:.3} s, load {}",
        r.seconds,
        if r.jsz { "" } else { " WITHOUT /jsz" },
        r.error
            .as_ref()
            .map_or(String::new(), |e| format!(" (failed: {e})")),
        if r.config_read {
            ", configuration read"
        } else {
            ""
        },
        r.full,
        r.server_cpu,
        load_average()
    );
}

impl Figures {
    /// The scrape times' median, p95 and maximum; the full fetch's median.
    pub fn times(&self) -> (f64, f64, f64, f64) {
        let times: Vec<f64> = self.rounds.iter().map(|r| r.seconds).collect();
        let fulls: Vec<f64> = self.rounds.iter().map(|r| r.full).collect();
        (
            median(&times),
            quantile(&times, 0.95),
            quantile(&times, 1.0),
            median(&fulls),
        )
    }

    /// Prints the window's figures beside the targets, PASS or MISS each.
    pub fn print(&self) {
        let (med, p95, max, full) = self.times();
        let n = self.rounds.len();
        let failed = self.rounds.iter().filter(|r| !r.jsz).count();
        let without: Vec<usize> = (0..n).filter(|&i| !self.rounds[i].jsz).collect();
        let reads: Vec<usize> = (0..n).filter(|&i| self.rounds[i].config_read).collect();
        // Reads that failed (late), each answered without configuration:
        // where the exporter's counter grew (the new exporter's own from 0).
        let failed_reads: Vec<usize> = (0..n)
            .filter(|&i| {
                let before = if i == 0 || i + 1 == n {
                    0.0
                } else {
                    self.rounds[i - 1].read_failures
                };
                self.rounds[i].read_failures > before
            })
            .collect();
        let fulls: Vec<f64> = self.rounds.iter().map(|r| r.full).collect();
        let peak_mb = self.peak_kib.0.max(self.peak_kib.1) as f64 * 1024.0 / 1e6;
        let (before, after) = self.window;
        println!();
        println!(
            "worst-case window: {before} -> {after} consumers, {} rounds {} s apart after the jump and a new exporter's first scrape, a full /jsz fetch beside each",
            n - 1,
            self.pace
        );
        println!(
            "scrape             median {med:.3} s, p95 {p95:.3} s, max {max:.3} s ({n} scrapes)"
        );
        println!("failed scrapes     {failed} of {n} (no /jsz, or no whole answer): {without:?}");
        if self.rounds.iter().any(|r| r.stall.is_some()) {
            // The new exporter has watched no consumer for a window yet:
            // its status is `unknown`, by design.
            let lost: Vec<usize> = (0..n - 1)
                .filter(|&i| self.rounds[i].stall != Some(true))
                .collect();
            println!(
                "stall series       lost in {} of {} scrapes (not the new exporter's): {lost:?}",
                lost.len(),
                n - 1
            );
        }
        println!(
            "configuration      read in scrapes {reads:?}, failed (answered without it) in {failed_reads:?} (0: the first after the jump; {}: the new exporter's)",
            n - 1
        );
        println!(
            "full /jsz fetch    median {full:.3} s, p95 {:.3} s, max {:.3} s",
            quantile(&fulls, 0.95),
            quantile(&fulls, 1.0)
        );
        println!(
            "peak RSS           {:.1} MB through the jump, {:.1} MB new (VmHWM, decimal MB)",
            self.peak_kib.0 as f64 * 1024.0 / 1e6,
            self.peak_kib.1 as f64 * 1024.0 / 1e6
        );
        println!("load average       {}", load_average());
        println!("target                                  figure                         result");
        let targets = [
            ("failed scrapes: 0", format!("{failed}"), failed == 0),
            (
                "max scrape <= 2x full fetch median",
                format!("{max:.3} s vs {:.3} s ({:.2}x)", 2.0 * full, max / full),
                max <= 2.0 * full,
            ),
            (
                "median scrape <= 0.6x full fetch",
                format!("{med:.3} s vs {:.3} s ({:.2}x)", 0.6 * full, med / full),
                med <= 0.6 * full,
            ),
            (
                "peak RSS <= 96 MB",
                format!("{peak_mb:.1} MB"),
                peak_mb <= 96.0,
            ),
        ];
        for (target, figure, met) in targets {
            let result = if met { "PASS" } else { "MISS" };
            println!("{target:<38}  {figure:<29}  {result}");
        }
    }

    /// The server's CPU per round (the scrape and the full fetch beside it
    /// together): median, p95 and maximum.
    pub fn print_server_cpu(&self) {
        let cpu: Vec<f64> = self.rounds.iter().map(|r| r.server_cpu).collect();
        println!(
            "server CPU a round (scrape and full fetch together) median {:.3} s, p95 {:.3} s, max {:.3} s",
            median(&cpu),
            quantile(&cpu, 0.95),
            quantile(&cpu, 1.0)
        );
    }
}
