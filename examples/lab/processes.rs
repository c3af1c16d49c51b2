//! The lab's processes, all on 127.0.0.1 with free ports: nats-server (with
//! JetStream, monitoring, an application account and a system account), the
//! exporter binary, Prometheus with the lab copy of the rules, and the lab
//! application's own `/metrics`. Every process is killed when the lab ends,
//! also on failure: each is held by a guard that kills it on drop, and the
//! exporter and Prometheus die with the lab process even if it is killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

/// The server's accounts: the application's (`APP`, the exporter listens to
/// its advisories), one nobody listens to (`OTHER`), one whose advisories
/// only a second, live-mode exporter counts (`BURST`) and the system account.
pub const ACCOUNTS: &str = r#"
accounts {
  APP { jetstream: enabled, users: [ { user: app, password: app-secret } ] }
  OTHER { jetstream: enabled, users: [ { user: other, password: other-secret } ] }
  BURST { users: [ { user: burst, password: burst-secret } ] }
  SYS { users: [ { user: sys, password: sys-secret } ] }
}
system_account: SYS
"#;

/// `max_pending` of the lab server: small, so that a cut takes a few MiB.
pub const MAX_PENDING: u64 = 1024 * 1024;

/// Stream into which the exporter copies dead messages.
pub const DEAD_LETTER_STREAM: &str = "LAB_DEAD_LETTERS";

/// A child process killed (and reaped) on drop.
pub struct Guard {
    child: Child,
    name: &'static str,
    log: PathBuf,
}

impl Guard {
    /// Kills the process now (the blindness scenario).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last lines of the process' log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(20);
        format!("{} log:\n{}", self.name, lines[start..].join("\n"))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `cmd` with its output in `log`, dying with the lab process.
fn spawn(mut cmd: Command, name: &'static str, log: PathBuf) -> anyhow::Result<Guard> {
    let out = std::fs::File::create(&log)?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl only sets a flag of the new process before exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {name} ({:?})", cmd.get_program()))?;
    Ok(Guard { child, name, log })
}

/// The nats-server: JetStream, monitoring, accounts, a small `max_pending`
/// and a `write_deadline` of 30 s, so that a reader that stops is cut for
/// its pending bytes and stays connected while it only approaches them. Its pid
/// goes to `pid_file`, for the scenario that stops it.
pub fn start_nats(pid_file: &Path) -> NatsServer {
    NatsServer::builder()
        .jetstream()
        .name("lab")
        .max_pending(MAX_PENDING)
        .write_deadline("30s")
        .config(ACCOUNTS)
        .config(&format!("pid_file: \"{}\"", pid_file.display()))
        .start()
}

/// Kills the nats-server whose pid is in `pid_file` (the lab's own child).
pub fn kill_nats(pid_file: &Path) -> anyhow::Result<()> {
    let pid = std::fs::read_to_string(pid_file)?;
    let status = Command::new("kill").args(["-KILL", pid.trim()]).status()?;
    anyhow::ensure!(status.success(), "kill {pid} failed");
    Ok(())
}

/// The exporter binary: `EXPORTER_BIN`, or the one built beside this example
/// (`cargo build --bin nats-delivery-exporter` puts it there).
pub fn exporter_binary() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("EXPORTER_BIN") {
        return Ok(bin.into());
    }
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("nats-delivery-exporter"))
        .context("no directory for the exporter binary")?;
    if !bin.is_file() {
        bail!(
            "{} not found: build it first (cargo build --bin nats-delivery-exporter) or set EXPORTER_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

/// The exporter binary polling `nats` and serving on `port`, connecting to
/// NATS as `user` of `account` (password from the environment, as secrets
/// should be given) under `client_name`.
fn exporter_command(
    nats: &NatsServer,
    port: u16,
    client_name: &str,
    (user, account, password): (&str, &str, &str),
) -> anyhow::Result<Command> {
    let mut cmd = Command::new(exporter_binary()?);
    cmd.args(["--monitor-url", &nats.monitor_url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--timeout", "800ms"])
        .args([
            "--consumer-status-window",
            &format!("{STATUS_WINDOW_SECS}s"),
        ])
        // Default series, but the opt-in `_exact` gauges, which the lab
        // checks against the stored messages' times and its own count of
        // removed messages, and max_deliver and the ack floor, which the
        // consumer dashboard draws where they are opted in.
        .args([
            "--consumer-opt-in-metrics",
            "nats_delivery_consumer_delivery_lag_exact,nats_delivery_consumer_oldest_unacked_age_exact,\
             nats_delivery_consumer_removed_before_delivery_exact,nats_delivery_consumer_max_deliver,\
             nats_delivery_consumer_ack_floor_stream_sequence",
        ])
        .args(["--nats-servers", &nats.client_url()])
        .args(["--nats-client-name", client_name])
        .args(["--nats-user", user, "--nats-account-name", account])
        .env("NATS_DELIVERY_NATS_PASSWORD", password)
        .env("NATS_DELIVERY_LOG", "warn");
    Ok(cmd)
}

/// The exporter as an operator runs it, with every source of loss on:
/// polling, durable advisories with dead-letter copies, system events and
/// application reports.
pub fn start_exporter(nats: &NatsServer, port: u16, dir: &Path) -> anyhow::Result<Guard> {
    let mut cmd = exporter_command(nats, port, "lab-exporter", ("app", "APP", "app-secret"))?;
    cmd.args(["--advisories", "--advisories-stream", "LAB_ADVISORIES"])
        .args(["--dead-letter-stream", DEAD_LETTER_STREAM])
        .arg("--dead-letter-terminated")
        .args(["--client-reports", "--client-reports-expiry", "5m"])
        .env("NATS_DELIVERY_SYSTEM_ACCOUNT", "user:sys:sys-secret");
    spawn(cmd, "exporter", dir.join("exporter.log"))
}

/// A second exporter, as a team might run one for account `BURST`: live
/// advisory mode (no stream keeps what it has not read yet) with a
/// subscription buffer of only 8 advisories, so that a burst overflows its
/// own client. It polls the server like any exporter.
pub fn start_live_exporter(nats: &NatsServer, port: u16, dir: &Path) -> anyhow::Result<Guard> {
    let account = ("burst", "BURST", "burst-secret");
    let mut cmd = exporter_command(nats, port, LIVE_EXPORTER_NAME, account)?;
    cmd.args(["--advisories", "--advisories-buffer", "8"]);
    spawn(cmd, "live exporter", dir.join("live-exporter.log"))
}

/// The exporters' consumer status window in the lab, in seconds (5 min by
/// default): long enough for several 1 s scrapes, short enough for a lab.
pub const STATUS_WINDOW_SECS: u64 = 10;

/// Client name of the live-mode exporter (its advisory connection is
/// "<name> advisories" in /connz).
pub const LIVE_EXPORTER_NAME: &str = "lab-live-exporter";

/// The Prometheus configuration: 1 s scrapes and rule evaluations,
/// `honor_labels` on the exporter job (re-exported application reports keep
/// their `instance`), the job name the rules expect. Without an exporter
/// port the exporter's job has no target, as when service discovery finds
/// nothing (a job removed from the configuration would keep its last series
/// for 5 minutes: Prometheus writes no staleness markers for it).
pub fn prometheus_config(exporter_ports: &[u16], app_port: u16, rules_dir: &Path) -> String {
    let exporter: Vec<String> = exporter_ports
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let exporter = exporter.join(", ");
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules}/*.rules.yml\n\
         scrape_configs:\n\
         \x20 - job_name: nats-delivery-exporter\n    honor_labels: true\n\
         \x20   static_configs:\n      - targets: [{exporter}]\n\
         \x20 - job_name: lab-app\n\
         \x20   static_configs:\n      - targets: [\"127.0.0.1:{app_port}\"]\n",
        rules = rules_dir.display()
    )
}

/// The lab's Prometheus process and its configuration file.
pub struct PrometheusProcess {
    /// The process.
    pub guard: Guard,
    config_file: PathBuf,
}

impl PrometheusProcess {
    /// Writes `config` and makes Prometheus reload it (SIGHUP).
    pub fn reload(&self, config: &str) -> anyhow::Result<()> {
        std::fs::write(&self.config_file, config)?;
        let pid = self.guard.child.id().to_string();
        let status = Command::new("kill").args(["-HUP", &pid]).status()?;
        anyhow::ensure!(status.success(), "kill -HUP {pid} failed");
        Ok(())
    }
}

/// The Prometheus binary: `PROMETHEUS` when set (scripts/test.sh runs the
/// lab on Prometheus 3 from `.tools/` and on Debian's 2.42), else
/// `prometheus` from PATH.
pub fn prometheus_binary() -> PathBuf {
    std::env::var_os("PROMETHEUS").map_or_else(|| PathBuf::from("prometheus"), PathBuf::from)
}

/// Prometheus ([`prometheus_binary`]) with its own config and TSDB in `dir`.
pub fn start_prometheus(config: &str, port: u16, dir: &Path) -> anyhow::Result<PrometheusProcess> {
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config)?;
    let binary = prometheus_binary();
    let mut cmd = Command::new(&binary);
    cmd.arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn");
    let guard = spawn(cmd, "prometheus", dir.join("prometheus.log")).with_context(|| {
        format!(
            "Prometheus is needed ({}): run scripts/install-deps.sh (Debian's prometheus \
             package; PROMETHEUS names another binary)",
            binary.display()
        )
    })?;
    Ok(PrometheusProcess {
        guard,
        config_file: file,
    })
}

/// Serves the lab application's registry on `/metrics`, as an application
/// using the link-in crate would.
pub async fn serve_app_metrics(registry: Registry) -> anyhow::Result<u16> {
    let registry = Arc::new(registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = registry.clone();
            async move {
                let mut text = String::new();
                prometheus_client::encoding::text::encode(&mut text, &registry)
                    .expect("encoding into a String cannot fail");
                (
                    [(
                        "content-type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    text,
                )
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(port)
}

/// Waits until `url` answers 200.
pub async fn wait_http(http: &reqwest::Client, url: &str, what: &Guard) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("{url} did not answer within 30 s\n{}", what.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
