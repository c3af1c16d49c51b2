//! Starting the lab: the server, the application with its link-in metrics,
//! the exporter, and Prometheus with the lab copy of the rules.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use nats_delivery_metrics::{
    ClientMetrics, PendingLimits, ReportOptions, ReportPublisher, SubscribeOptions, Subscription,
};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

use crate::processes::{self, Guard, PrometheusProcess};
use crate::prom::Prometheus;
use crate::report::Report;
use crate::rules::{self, LabRules};
use crate::{Lab, APP_CLIENT, APP_INSTANCE, APP_SUBJECT, PLAIN_CLIENT};

/// The lab application: two connections with link-in metrics, served on
/// its own `/metrics`.
struct App {
    client: async_nats::Client,
    metrics: ClientMetrics,
    subscription: Subscription,
    reports: ReportPublisher,
    plain: async_nats::Client,
    plain_metrics: ClientMetrics,
    /// Port of its `/metrics`.
    port: u16,
}

/// Connects the application's two connections, subscribes, starts its
/// reports and serves its registry.
async fn start_app(nats: &NatsServer) -> anyhow::Result<App> {
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new(APP_CLIENT, &mut registry);
    let client = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .user_and_password("app".into(), "app-secret".into())
        .name(APP_CLIENT)
        .connect(nats.client_url())
        .await
        .context("the lab application cannot connect")?;
    // 100 messages of room: a handler that pauses loses the rest, counted.
    let limits = PendingLimits::new(100, 1024 * 1024);
    let subscription = metrics
        .subscribe_with(
            &client,
            APP_SUBJECT,
            SubscribeOptions::new().pending_limits(limits),
        )
        .await?;
    let reports = metrics.publish_reports(
        client.clone(),
        ReportOptions::new()
            .interval(Duration::from_secs(1))
            .instance(APP_INSTANCE),
    );
    let plain_metrics = ClientMetrics::new(PLAIN_CLIENT, &mut registry);
    let plain = plain_metrics
        .connect_options(async_nats::ConnectOptions::new())
        .user_and_password("app".into(), "app-secret".into())
        .name(PLAIN_CLIENT)
        .subscription_capacity(16)
        .connect(nats.client_url())
        .await
        .context("the lab application's second connection cannot connect")?;
    let port = processes::serve_app_metrics(registry).await?;
    Ok(App {
        client,
        metrics,
        subscription,
        reports,
        plain,
        plain_metrics,
        port,
    })
}

/// Starts the exporter on `port` and waits until it answers.
async fn start_exporter(
    http: &reqwest::Client,
    nats: &NatsServer,
    port: u16,
    dir: &Path,
) -> anyhow::Result<Guard> {
    let exporter = processes::start_exporter(nats, port, dir)?;
    let url = format!("http://127.0.0.1:{port}/metrics");
    processes::wait_http(http, &url, &exporter).await?;
    Ok(exporter)
}

/// Prometheus scraping the exporter and the application, with the lab
/// copy of the rules loaded.
struct Monitoring {
    rules_dir: PathBuf,
    lab_rules: LabRules,
    prometheus: PrometheusProcess,
    prom: Prometheus,
}

/// Copies the rules into `dir` and starts Prometheus; returns once it is
/// ready.
async fn start_prometheus(
    http: &reqwest::Client,
    dir: &Path,
    (exporter_port, app_port): (u16, u16),
) -> anyhow::Result<Monitoring> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules_dir = dir.join("rules");
    let lab_rules = rules::copy_rules(repo, &rules_dir)?;
    let prom_port = nats_test_server::free_port();
    let config = processes::prometheus_config(&[exporter_port], app_port, &rules_dir);
    let prometheus = processes::start_prometheus(&config, prom_port, dir)?;
    let prom = Prometheus::new(http.clone(), prom_port);
    processes::wait_http(http, &format!("{}/-/ready", prom.url()), &prometheus.guard).await?;
    Ok(Monitoring {
        rules_dir,
        lab_rules,
        prometheus,
        prom,
    })
}

/// Prints what runs where and how the rules were changed for the lab.
fn print_what_runs(lab: &Lab, lab_rules: &LabRules, prometheus_version: &str) {
    let version = lab.app.server_info().version;
    println!("NATS delivery lab, everything on 127.0.0.1:");
    println!(
        "  nats-server {version}   {}  (monitoring {})",
        lab.nats.client_url(),
        lab.nats.monitor_url()
    );
    println!(
        "  exporter               http://127.0.0.1:{}/metrics",
        lab.exporter_port
    );
    println!(
        "  application lab-app    http://127.0.0.1:{}/metrics (link-in crate)",
        lab.app_port
    );
    println!(
        "  Prometheus {prometheus_version:<11} {}  (scrapes and evaluates rules every 1 s)",
        lab.prom.url()
    );
    let list: Vec<String> = lab_rules
        .shortened
        .iter()
        .map(|s| format!("{} {}", s.alert, s.original))
        .collect();
    println!(
        "  rules: alerts/*.rules.yml, thresholds unchanged, every `for:` shortened to {} ({})",
        rules::LAB_FOR,
        list.join(", ")
    );
    for (alert, from, to) in &lab_rules.windows {
        if from.starts_with(')') {
            println!("         {alert}: its threshold `{from}` scaled to `{to}`");
        } else {
            println!("         {alert}: its {from} look-back windows scaled to {to}");
        }
    }
}

/// Starts everything, in a new temporary directory, and checks the
/// server's version.
pub async fn start(check_mode: bool) -> anyhow::Result<Lab> {
    let dir = tempfile::Builder::new()
        .prefix("nats-delivery-lab-")
        .tempdir()?;
    // One TLS crypto backend for the process (reqwest needs one chosen).
    let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let pid_file = dir.path().join("nats.pid");
    let nats = tokio::task::spawn_blocking({
        let pid_file = pid_file.clone();
        move || processes::start_nats(&pid_file)
    })
    .await?;
    let app = start_app(&nats).await?;
    let exporter_port = nats_test_server::free_port();
    let exporter = start_exporter(&http, &nats, exporter_port, dir.path()).await?;
    let monitoring = start_prometheus(&http, dir.path(), (exporter_port, app.port)).await?;

    let version = app.client.server_info().version;
    // Stalls (2.12+) and termination reasons (2.10.4+) are part of the
    // scenarios: an older server would fail them for want of the fields.
    anyhow::ensure!(
        nats_test_server::version_numbers(&version) >= vec![2, 12],
        "the lab needs nats-server 2.12 or newer, found {version} (scripts/install-deps.sh installs 2.15.1)"
    );
    let Monitoring {
        rules_dir,
        lab_rules,
        prometheus,
        prom,
    } = monitoring;
    let lab = Lab {
        nats,
        exporter,
        prom,
        http,
        app: app.client,
        metrics: app.metrics,
        subscription: app.subscription,
        plain: app.plain,
        plain_metrics: app.plain_metrics,
        app_published: 0,
        app_handled: 0,
        report: Report::new(check_mode),
        nats_pid_file: pid_file,
        alerts: lab_rules.alerts.clone(),
        prometheus,
        app_port: app.port,
        exporter_port,
        held_jobs: Vec::new(),
        rules_dir,
        _reports: app.reports,
        tmp: dir,
    };
    let prometheus_version = lab.prom.version().await?;
    print_what_runs(&lab, &lab_rules, &prometheus_version);
    Ok(lab)
}
