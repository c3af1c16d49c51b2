//! The lab: the whole product on loopback in one command.
//!
//! Starts a nats-server (JetStream, monitoring, accounts), the exporter, an
//! application using the link-in crate, and a real Prometheus that scrapes
//! both with the repository's alert rules loaded. After a quiet baseline in
//! which no alert may fire, it drives each kind of loss in turn, compares the
//! count Prometheus holds with the true count the lab itself knows (messages
//! it published and received, the server's own records, never the
//! exporter's), checks that each scenario's alert fires with the right
//! labels and no other (and that the stuck and saturated consumer alerts
//! stop once the consumer recovers), runs every dashboard query, and
//! finally makes the exporter blind. Then it prints a short report.
//!
//! ```text
//! cargo build --bin nats-delivery-exporter && cargo run --example lab            # the report
//! cargo build --bin nats-delivery-exporter && cargo run --example lab -- --check # test mode
//! ```
//!
//! Both modes run the same lab and exit with status 1 if any check fails;
//! `--check` also prints every check as it is made. Needs nats-server in
//! `.tools/` and Debian's `prometheus` (`scripts/install-deps.sh`; `PROMETHEUS=<path>`
//! runs another Prometheus binary, such as the Prometheus 3 it builds).

mod blind;
mod client;
mod dashboards;
mod forecast;
mod health;
mod health_drive;
mod jetstream;
mod ledger;
mod own_drops;
mod processes;
mod prom;
#[path = "../../tests/docs/promql_check/mod.rs"]
mod promql_check;
mod publish;
mod removed;
mod report;
mod rules;
mod server;
mod startup;
mod stuck;

use std::time::{Duration, Instant};

use futures::StreamExt;
use nats_delivery_metrics::{ClientMetrics, ReportPublisher, Subscription};
use nats_test_server::NatsServer;
use processes::Guard;
use prom::Prometheus;
use report::Report;

/// Subject of the application's instrumented subscription.
pub const APP_SUBJECT: &str = "lab.app.events";
/// The application's `client` label.
pub const APP_CLIENT: &str = "lab-app";
/// The `client` label of the application's second connection, whose plain
/// async-nats subscriber has a small `subscription_capacity`.
pub const PLAIN_CLIENT: &str = "lab-app-plain";
/// The `instance` the application gives its reports.
pub const APP_INSTANCE: &str = "lab-app-1";

/// Everything the scenarios work with.
pub struct Lab {
    /// The server.
    pub nats: NatsServer,
    /// The exporter process.
    pub exporter: Guard,
    /// Prometheus, over its API.
    pub prom: Prometheus,
    /// HTTP client for the server's monitoring endpoints.
    pub http: reqwest::Client,
    /// The application's connection (account APP).
    pub app: async_nats::Client,
    /// The application's link-in metrics.
    pub metrics: ClientMetrics,
    /// The application's instrumented subscription.
    pub subscription: Subscription,
    /// The application's second connection (`subscription_capacity` 16).
    pub plain: async_nats::Client,
    /// Its link-in metrics (events only: its subscriber is plain async-nats).
    pub plain_metrics: ClientMetrics,
    /// Messages the application published to [`APP_SUBJECT`] (truth).
    pub app_published: u64,
    /// Messages the application's handler received from it (truth).
    pub app_handled: u64,
    /// What the lab found.
    pub report: Report,
    nats_pid_file: std::path::PathBuf,
    alerts: Vec<String>,
    /// Prometheus' process, to change its configuration.
    pub prometheus: processes::PrometheusProcess,
    /// Port of the application's `/metrics`.
    pub app_port: u16,
    /// Port of the exporter's `/metrics`.
    pub exporter_port: u16,
    /// Messages of `LAB_JOBS` the application holds without acknowledging
    /// (the saturated consumer), acknowledged when it recovers.
    pub held_jobs: Vec<async_nats::jetstream::Message>,
    /// Directory of the lab copy of the rules.
    pub rules_dir: std::path::PathBuf,
    _reports: ReportPublisher,
    tmp: tempfile::TempDir,
}

impl Lab {
    /// Waits up to `wait` for `alert` to fire with `labels` and reports
    /// what was found.
    pub async fn expect_firing(
        &mut self,
        alert: &str,
        labels: &[(&str, &str)],
        wait: Duration,
    ) -> anyhow::Result<()> {
        let found = self.prom.wait_firing(alert, labels, wait).await?;
        self.report.alert(alert, labels, found);
        Ok(())
    }

    /// The end of a scenario: [`Lab::expect_firing`], then every other
    /// alert firing is reported unless the scenarios so far expected it.
    pub async fn expect_firing_alone(
        &mut self,
        alert: &str,
        labels: &[(&str, &str)],
        wait: Duration,
    ) -> anyhow::Result<()> {
        self.expect_firing(alert, labels, wait).await?;
        let firing = self.prom.firing().await?;
        self.report.only_expected(&firing);
        Ok(())
    }

    /// A monitoring endpoint of the server, as JSON.
    pub async fn monitor(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        let url = format!("{}/{path}", self.nats.monitor_url());
        Ok(self.http.get(&url).send().await?.json().await?)
    }

    /// Reads the instrumented subscription until it stays empty for 1 s;
    /// returns how many messages the handler got.
    pub async fn handle_pending(&mut self) -> u64 {
        let mut n = 0;
        while let Ok(Some(_)) =
            tokio::time::timeout(Duration::from_secs(1), self.subscription.next()).await
        {
            n += 1;
        }
        self.app_handled += n;
        n
    }

    /// The lab's directory (logs, Prometheus' data).
    pub fn dir(&self) -> &std::path::Path {
        self.tmp.path()
    }

    /// Kills the nats-server (the blindness scenario).
    pub fn stop_nats(&self) -> anyhow::Result<()> {
        processes::kill_nats(&self.nats_pid_file)
    }

    /// Waits until `expr` returns data (a series has been scraped).
    pub async fn wait_series(&mut self, expr: &str) -> anyhow::Result<()> {
        let start = Instant::now();
        while self.prom.query(expr).await?.is_empty() {
            if start.elapsed() > Duration::from_secs(30) {
                self.report
                    .check(false, &format!("{expr} has data within 30 s"));
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }
}

/// The quiet baseline: normal traffic, every series scraped, no alert.
async fn baseline(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report
        .scenario("quiet baseline: normal traffic, nothing lost", &[]);
    for i in 0..50u32 {
        lab.app.publish(APP_SUBJECT, i.to_string().into()).await?;
    }
    lab.app.flush().await?;
    lab.app_published += 50;
    let handled = lab.handle_pending().await;
    lab.report.check(
        handled == 50,
        &format!("the application handled {handled} of 50 messages"),
    );
    jetstream::setup(lab).await?;
    for expr in [
        "up{job=\"nats-delivery-exporter\"} == 1",
        "up{job=\"lab-app\"} == 1",
        "nats_delivery_advisory_listener_up{account=\"APP\"} == 1",
        "nats_delivery_system_events_listener_up == 1",
        "nats_delivery_client_delivered_messages_total{client=\"lab-app\"} == 50",
        "nats_delivery_app_delivered_messages_total{client=\"lab-app\"} == 50",
        "nats_delivery_consumer_ack_floor_stream_sequence{stream=\"LAB_ORDERS\",consumer=\"billing\"} == 3",
    ] {
        lab.wait_series(expr).await?;
    }
    // Long enough for any rule to pass its (lab) `for:` and be evaluated.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let firing = lab.prom.firing().await?;
    lab.report.note(&format!(
        "{} alerts firing after every series was scraped and rules ran for 6 s",
        firing.len()
    ));
    lab.report.only_expected(&firing);
    Ok(())
}

async fn run(check_mode: bool) -> anyhow::Result<bool> {
    let started = Instant::now();
    let mut lab = startup::start(check_mode).await?;
    baseline(&mut lab).await?;
    client::client_drops(&mut lab).await?;
    client::library_drops(&mut lab).await?;
    publish::publish_refused(&mut lab).await?;
    server::server_cut(&mut lab).await?;
    jetstream::max_deliver(&mut lab).await?;
    jetstream::stream_limits(&mut lab).await?;
    jetstream::saturated(&mut lab).await?;
    stuck::stuck(&mut lab).await?;
    health::consumer_health(&mut lab).await?;
    forecast::removal_forecast(&mut lab).await?;
    removed::removed_before_delivery(&mut lab).await?;
    blind::malformed_advisory(&mut lab).await?;
    blind::unwatched_account(&mut lab).await?;
    own_drops::exporter_drops(&mut lab).await?;
    dashboards::every_query_returns_data(&mut lab).await?;
    blind::blindness(&mut lab).await?;
    let alerts = lab.alerts.clone();
    lab.report.cover(&alerts, blind::NOT_IN_LAB);
    lab.report.print();
    if !lab.report.passed() {
        // The exporter's warnings often say why a count or an alert is off.
        println!("\n{}", lab.exporter.log_tail());
    }
    println!("lab finished in {:.0} s", started.elapsed().as_secs_f64());
    Ok(lab.report.passed())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut check_mode = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check_mode = true,
            other => {
                eprintln!("lab: unknown argument {other:?} (only --check)");
                return std::process::ExitCode::from(2);
            }
        }
    }
    // Ctrl-C drops the lab, and with it every process it started.
    let outcome = tokio::select! {
        r = run(check_mode) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lab: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
