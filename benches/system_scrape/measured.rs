//! One exporter process under measurement: its scrapes, each checked
//! complete, and its figures from /proc.

use std::process::Child;

use nats_test_server::sample::samples;

use crate::support::{self, cpu_seconds, env_args, status_kib, timed_get, wait_until_up};

/// One exporter process under measurement and its figures.
pub struct Measured {
    pub name: &'static str,
    pub child: Child,
    pub url: String,
    /// Each round's scrape time; `None` for an incomplete scrape.
    pub took: Vec<Option<f64>>,
    /// Why scrapes were incomplete, by round.
    pub incomplete: Vec<(usize, String)>,
    pub cpu: Vec<f64>,
    /// The slowest server's /jsz poll, as the exporter reports it.
    pub jsz_poll: Vec<f64>,
    pub text_bytes: usize,
}

impl Measured {
    pub async fn start(
        name: &'static str,
        binary: &str,
        mut args: Vec<String>,
        http: &reqwest::Client,
    ) -> Measured {
        args.extend(env_args("BENCH_EXPORTER_ARGS"));
        let (child, listen) = support::spawn_exporter(binary, &args);
        wait_until_up(http, listen).await;
        Measured {
            name,
            child,
            url: format!("http://{listen}/metrics"),
            took: Vec::new(),
            incomplete: Vec::new(),
            cpu: Vec::new(),
            jsz_poll: Vec::new(),
            text_bytes: 0,
        }
    }

    pub fn peak_mb(&self) -> f64 {
        status_kib(self.child.id(), "VmHWM:") as f64 / 1024.0
    }

    /// The times of the complete scrapes.
    pub fn complete_times(&self) -> Vec<f64> {
        self.took.iter().flatten().copied().collect()
    }

    /// One timed scrape; an incomplete one counts as no time at all.
    pub async fn scrape(&mut self, http: &reqwest::Client, consumers: usize) {
        let pid = self.child.id();
        let before = cpu_seconds(pid);
        let (took, body) = timed_get(http, &self.url).await;
        let cpu = cpu_seconds(pid) - before;
        let text = String::from_utf8_lossy(&body);
        if let Err(why) = complete(&text, consumers) {
            self.incomplete.push((self.took.len(), why));
            self.took.push(None);
            return;
        }
        self.took.push(Some(took));
        self.cpu.push(cpu);
        self.text_bytes = body.len();
        let polls = samples(
            &text,
            "nats_delivery_scrape_duration_seconds",
            &[("source", "jsz")],
        );
        self.jsz_poll
            .push(polls.iter().map(|(_, v)| *v).fold(0.0, f64::max));
    }
}

/// The exporter ends with the run, a panicking one too.
impl Drop for Measured {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a scrape reports each of the `consumers` once, and every source
/// of the three servers up.
pub fn complete(text: &str, consumers: usize) -> Result<(), String> {
    let reported = samples(text, "nats_delivery_consumer_ack_pending_messages", &[]).len();
    if reported != consumers {
        return Err(format!("{reported} of {consumers} consumers"));
    }
    let up = samples(text, "nats_delivery_up", &[]);
    let servers: std::collections::BTreeSet<&str> = up
        .iter()
        .filter_map(|(labels, _)| labels.split("server=\"").nth(1)?.split('"').next())
        .collect();
    if servers.len() != 3 || up.iter().any(|(_, v)| *v != 1.0) {
        return Err(format!("servers {servers:?}, up {up:?}"));
    }
    Ok(())
}
