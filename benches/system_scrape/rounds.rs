//! The measured rounds. In each, interleaved and 300 ms apart: each
//! server's raw /jsz fetch, the three at once, the system account's JSZ
//! request of each server (after a survey) and of the three at once, and
//! each exporter's scrape. A different step goes first each round.

use std::time::{Duration, Instant};

use crate::consumers_in;
use crate::measured::Measured;
use crate::support::timed_get;
use crate::system_raw::SystemRaw;

/// The pause before each step (and between the system requests of one
/// server after another).
const SETTLE: Duration = Duration::from_millis(300);
/// The steps before the exporters' scrapes: 0-2 one server's raw fetch,
/// 3 the three at once, 4 the system request of each server alone, 5 of
/// the three at once.
const FETCH_STEPS: usize = 6;

/// The fetches measured besides the exporters' scrapes, by round.
pub struct Rounds {
    http: reqwest::Client,
    /// Each server's raw /jsz URL.
    jsz_urls: Vec<String>,
    /// The consumers every reply must hold.
    total: usize,
    system_raw: SystemRaw,
    /// Each server's raw /jsz fetch.
    pub raw: Vec<Vec<f64>>,
    /// The slowest of the three raw fetches.
    pub slowest: Vec<f64>,
    /// The three raw fetches at once.
    pub all_at_once: Vec<f64>,
    /// The largest raw reply.
    pub raw_bytes: usize,
    /// Each server's JSZ request through the system account.
    pub nats: Vec<Vec<f64>>,
    /// The three JSZ requests at once.
    pub nats_all: Vec<f64>,
    /// The largest JSZ reply.
    pub nats_bytes: usize,
    /// The survey (VARZ until three replies).
    pub surveys: Vec<f64>,
}

impl Rounds {
    pub fn new(
        http: reqwest::Client,
        jsz_urls: Vec<String>,
        total: usize,
        system_raw: SystemRaw,
    ) -> Rounds {
        Rounds {
            http,
            jsz_urls,
            total,
            system_raw,
            raw: vec![Vec::new(); 3],
            slowest: Vec::new(),
            all_at_once: Vec::new(),
            raw_bytes: 0,
            nats: vec![Vec::new(); 3],
            nats_all: Vec::new(),
            nats_bytes: 0,
            surveys: Vec::new(),
        }
    }

    /// The table's header; `baseline` when a baseline exporter is measured.
    pub fn print_header(baseline: bool) {
        println!(
            "round  raw n0   raw n1   raw n2   slowest  3 at once | NATS slowest, 3 at once | system   ratio | system 0s window | HTTP x3  {}| system peak RSS",
            if baseline { "| baseline " } else { "" }
        );
    }

    /// Round `round`: every step once, each after [`SETTLE`].
    pub async fn run(&mut self, round: usize, exporters: &mut [Measured]) {
        let steps = FETCH_STEPS + exporters.len();
        for step in (0..steps).map(|k| (k + round) % steps) {
            tokio::time::sleep(SETTLE).await;
            match step {
                0..=2 => self.raw_of_one(step).await,
                3 => self.raw_at_once().await,
                4 => self.system_of_each().await,
                5 => self.system_at_once().await,
                e => {
                    exporters[e - FETCH_STEPS]
                        .scrape(&self.http, self.total)
                        .await
                }
            }
        }
        let worst = self.raw.iter().map(|r| r[round]).fold(0.0, f64::max);
        self.slowest.push(worst);
    }

    async fn raw_of_one(&mut self, n: usize) {
        let (took, body) = timed_get(&self.http, &self.jsz_urls[n]).await;
        assert_eq!(consumers_in(&body), self.total, "raw /jsz of n{n}");
        self.raw_bytes = self.raw_bytes.max(body.len());
        self.raw[n].push(took);
    }

    async fn raw_at_once(&mut self) {
        let start = Instant::now();
        let bodies =
            futures::future::join_all(self.jsz_urls.iter().map(|u| timed_get(&self.http, u))).await;
        self.all_at_once.push(start.elapsed().as_secs_f64());
        for (_, body) in bodies {
            assert_eq!(consumers_in(&body), self.total, "raw /jsz, three at once");
        }
    }

    async fn system_of_each(&mut self) {
        self.surveys.push(self.system_raw.survey().await);
        for (n, times) in self.nats.iter_mut().enumerate() {
            tokio::time::sleep(SETTLE).await;
            let (took, reply) = self.system_raw.jsz(n).await;
            assert_eq!(consumers_in(&reply), self.total, "system JSZ of n{n}");
            self.nats_bytes = self.nats_bytes.max(reply.len());
            times.push(took);
        }
    }

    async fn system_at_once(&mut self) {
        let start = Instant::now();
        let replies = futures::future::join_all((0..3).map(|n| self.system_raw.jsz(n)));
        for (_, reply) in replies.await {
            assert_eq!(
                consumers_in(&reply),
                self.total,
                "system JSZ, three at once"
            );
        }
        self.nats_all.push(start.elapsed().as_secs_f64());
    }

    /// The slowest server's system request in `round`.
    pub fn nats_slowest(&self, round: usize) -> f64 {
        self.nats.iter().map(|r| r[round]).fold(0.0, f64::max)
    }

    /// The table's row of `round`.
    pub fn print_row(&self, round: usize, exporters: &[Measured]) {
        let worst = self.slowest[round];
        let took = |e: &Measured| match e.took[round] {
            Some(t) => format!("{t:.3} s "),
            None => "INCOMPLETE".into(),
        };
        let ratio = match exporters[0].took[round] {
            Some(t) => format!("{:.2}x", t / worst),
            None => "  -  ".into(),
        };
        let scrapes: Vec<String> = exporters[1..].iter().map(took).collect();
        println!(
            "{round:>5}  {:.3} s  {:.3} s  {:.3} s  {worst:.3} s  {:.3} s  | {:.3} s  {:.3} s        | {} {ratio} | {:<16} | {} | {:.1} MB",
            self.raw[0][round],
            self.raw[1][round],
            self.raw[2][round],
            self.all_at_once[round],
            self.nats_slowest(round),
            self.nats_all[round],
            took(&exporters[0]),
            scrapes[0],
            scrapes[1..].join(" | "),
            exporters[0].peak_mb(),
        );
    }
}
