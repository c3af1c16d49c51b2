//! One size's rounds: each kind of request timed, and the figures printed.

use std::time::Duration;

use crate::support::{cpu_seconds, median, min, timed_read, timed_read_gzip};
use crate::{Targets, HEAD_KEPT};

/// Every round's figures.
#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) raw: Vec<f64>,
    pub(crate) raw_first: Vec<f64>,
    pub(crate) raw_bytes: usize,
    pub(crate) scrape: Vec<f64>,
    pub(crate) cpu: Vec<f64>,
    pub(crate) jsz_poll: Vec<f64>,
    pub(crate) text_sent: Vec<f64>,
    pub(crate) scrape_bytes: usize,
    pub(crate) gzip: Vec<f64>,
    pub(crate) gzip_bytes: usize,
    pub(crate) other_scrape: Vec<f64>,
    /// The server's CPU during each exporter scrape.
    pub(crate) server_cpu: Vec<f64>,
    pub(crate) series: usize,
    /// The peer's scrapes (`PEER_CMD`): time, its CPU, the server's CPU.
    pub(crate) peer_scrape: Vec<f64>,
    pub(crate) peer_cpu: Vec<f64>,
    pub(crate) peer_server_cpu: Vec<f64>,
    pub(crate) peer_series: usize,
}

impl Samples {
    /// One round: each kind of request once, in an order that turns with
    /// the round, each after a pause: the server's garbage collection after
    /// one 11 MB reply must not fall on whichever request happens to come
    /// next.
    pub(crate) async fn take_round(&mut self, t: &Targets, round: usize) {
        let settle = Duration::from_millis(300);
        let kinds = 5;
        for which in (0..kinds).map(|k| (k + round) % kinds) {
            match (which, &t.other, &t.gzip_url) {
                (0, _, _) => {
                    tokio::time::sleep(settle).await;
                    let read = timed_read(&t.http, &t.jsz_url, 0).await;
                    self.raw.push(read.seconds);
                    self.raw_first.push(read.first_byte);
                    self.raw_bytes = read.bytes;
                }
                (1, _, _) => {
                    tokio::time::sleep(settle).await;
                    self.scrape(t).await;
                }
                (2, Some((_, url)), _) => {
                    tokio::time::sleep(settle).await;
                    // Read as the first exporter's scrape is, its head kept:
                    // keeping 16 MB costs the reader time the comparison must
                    // not count against one of the two.
                    let read = timed_read(&t.http, url, HEAD_KEPT).await;
                    self.other_scrape.push(read.seconds);
                }
                (3, _, Some(url)) => {
                    tokio::time::sleep(settle).await;
                    let read = timed_read_gzip(&t.http, url).await;
                    self.gzip.push(read.seconds);
                    self.gzip_bytes = read.bytes;
                }
                (4, _, _) if t.peer.is_some() => {
                    tokio::time::sleep(settle).await;
                    self.peer_scrape(t).await;
                }
                _ => {}
            }
        }
    }

    /// One scrape of the exporter, with its CPU time and the `/jsz` poll's
    /// duration it reports.
    async fn scrape(&mut self, t: &Targets) {
        let (before, server_before) = (cpu_seconds(t.pid), cpu_seconds(t.server_pid));
        // The registry part, with the scrape's own durations, comes first.
        let read = timed_read(&t.http, &t.metrics_url, HEAD_KEPT).await;
        self.cpu.push(cpu_seconds(t.pid) - before);
        self.server_cpu
            .push(cpu_seconds(t.server_pid) - server_before);
        self.series = read.samples;
        self.scrape.push(read.seconds);
        self.text_sent.push(read.seconds - read.first_byte);
        self.scrape_bytes = read.bytes;
        let text = String::from_utf8_lossy(&read.head);
        let polled = nats_test_server::sample::value(
            &text,
            "nats_delivery_scrape_duration_seconds",
            &[("source", "jsz")],
        );
        self.jsz_poll
            .push(polled.expect("the scrape reports its /jsz poll"));
    }

    /// One scrape of the peer, read as the exporter's is.
    async fn peer_scrape(&mut self, t: &Targets) {
        let peer = t.peer.as_ref().expect("a peer");
        let (before, server_before) = (cpu_seconds(peer.pid), cpu_seconds(t.server_pid));
        let read = timed_read(&t.http, &peer.url, HEAD_KEPT).await;
        self.peer_cpu.push(cpu_seconds(peer.pid) - before);
        self.peer_server_cpu
            .push(cpu_seconds(t.server_pid) - server_before);
        self.peer_scrape.push(read.seconds);
        self.peer_series = read.samples;
    }

    /// The peer beside the exporter, from the same rounds.
    pub(crate) fn print_peer(&self, command: &str, peer_peak_kib: u64) {
        println!("peer                       {command}");
        let pair = |what: &str, ours: &[f64], peer: &[f64]| {
            println!(
                "{what:<26} {:.3} s / {:.3} s  (exporter {:.3} s / {:.3} s)",
                median(peer),
                min(peer),
                median(ours),
                min(ours)
            );
        };
        pair("peer scrape", &self.scrape, &self.peer_scrape);
        pair("peer CPU per scrape", &self.cpu, &self.peer_cpu);
        pair(
            "server CPU, peer scrape",
            &self.server_cpu,
            &self.peer_server_cpu,
        );
        println!(
            "peer peak RSS, series      {:.1} MB, {}  (exporter series {})",
            peer_peak_kib as f64 / 1024.0,
            self.peer_series,
            self.series
        );
    }

    pub(crate) fn print(&self, rss_idle_kib: u64, peak_kib: u64) {
        let row = |what: &str, v: &[f64], note: String| {
            println!("{what:<26} {:.3} s / {:.3} s  {note}", median(v), min(v));
        };
        let mb = |bytes: usize| bytes as f64 / 1e6;
        row(
            "raw /jsz fetch",
            &self.raw,
            format!("({:.1} MB)", mb(self.raw_bytes)),
        );
        row(
            "  of which first byte",
            &self.raw_first,
            "(the server's work before it sends)".into(),
        );
        row(
            "exporter scrape",
            &self.scrape,
            format!("({:.1} MB of text)", mb(self.scrape_bytes)),
        );
        row(
            "  of which /jsz poll",
            &self.jsz_poll,
            "(fetch and parse, as the exporter reports it)".into(),
        );
        row(
            "  of which text sent",
            &self.text_sent,
            "(from the text's first byte to its last)".into(),
        );
        row("exporter CPU per scrape", &self.cpu, String::new());
        if !self.gzip.is_empty() {
            row(
                "gzip scrape",
                &self.gzip,
                format!("({:.1} MB on the wire)", mb(self.gzip_bytes)),
            );
            println!(
                "gzip scrape / raw fetch    {:.2}x / {:.2}x",
                median(&self.gzip) / median(&self.raw),
                min(&self.gzip) / min(&self.raw)
            );
        }
        println!(
            "scrape / raw fetch         {:.2}x / {:.2}x  (goal at 100,000 consumers: <= 1.2x)",
            median(&self.scrape) / median(&self.raw),
            min(&self.scrape) / min(&self.raw)
        );
        println!(
            "exporter RSS idle / peak   {:.1} MB / {:.1} MB  (goal at 100,000 consumers: <= 96 MB)",
            rss_idle_kib as f64 / 1024.0,
            peak_kib as f64 / 1024.0
        );
    }
}
