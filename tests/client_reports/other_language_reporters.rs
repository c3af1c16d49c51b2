//! The report protocol spoken by applications in other languages
//! (`docs/report-protocol.md`): the reporters in `examples/` run a drop
//! storm against a real server, and the exporter binary, run with
//! `--client-reports`, must re-export exactly what each application lost.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nats_test_server::sample::value;
use nats_test_server::wait::{Text, Wait};
use nats_test_server::{workspace_root, NatsServer};

const SUBJECT: &str = "nats_delivery.reports";
const MESSAGES: u64 = 20_000;

/// A child process killed (and waited for) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the storm application counted itself, from its one line of JSON.
#[derive(Debug, serde::Deserialize)]
struct Truth {
    published: u64,
    /// Subscription names in the order the application subscribed.
    subscriptions: Vec<String>,
    /// Messages each subscription's handler received, by subscription name.
    received: BTreeMap<String, u64>,
    /// Reports the application published, its last one included.
    reports: u64,
}

/// How a client library's slow-consumer events relate to its drops.
#[derive(Debug, Clone, Copy)]
enum Events {
    /// One event per dropped message (nats-py).
    OnePerDrop,
    /// At least one event for a subscription that dropped (nats.go signals
    /// a slow consumer once per run of drops, until a message fits again).
    AtLeastOne,
}

fn start_exporter(server: &NatsServer) -> (Killed, String) {
    let port = nats_test_server::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", &server.monitor_url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--nats-servers", &server.client_url(), "--client-reports"])
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    (Killed(child), format!("http://127.0.0.1:{port}/metrics"))
}

async fn scrape(url: &str) -> Option<String> {
    reqwest::get(url).await.ok()?.text().await.ok()
}

/// Scrapes `url` every 100 ms until `done` holds for the text, for at most
/// 20 seconds; returns that text.
async fn scrape_until(url: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    Wait::secs(what, 20)
        .every(Duration::from_millis(100))
        .until_async(async || {
            let text = scrape(url).await.unwrap_or_default();
            if done(&text) {
                return Ok(text);
            }
            let app_lines: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("nats_delivery_app_"))
                .collect();
            Err(Text(format!(
                "the last scrape's application series:\n{}",
                app_lines.join("\n")
            )))
        })
        .await
}

/// Runs `storm` (given the server URL and the report options), then checks
/// every re-exported series of its instance against its own counts and the
/// server's.
async fn storm_is_re_exported_exactly(storm: Command, client: &str, events: Events) {
    let server = NatsServer::builder().start();
    let (_exporter, url) = start_exporter(&server);
    scrape_until(&url, "the exporter's report listener", |text| {
        value(text, "nats_delivery_app_reports_listener_up", &[]) == Some(1.0)
    })
    .await;

    let (app, truth) = run_storm(storm, &server, client);
    let text = scrape_until(&url, "the application's last report", |text| {
        let received = value(text, "nats_delivery_app_reports_received_total", &[]);
        received == Some(truth.reports as f64)
    })
    .await;
    // Two subscriptions made through the reporter, one made directly.
    assert_eq!(truth.received.len(), 3, "{truth:?}");
    for (name, received) in &truth.received {
        let labels = [
            ("client", client),
            ("instance", "storm-1"),
            ("subscription", name.as_str()),
        ];
        let series = |family| value(&text, family, &labels);
        // The server's view: it sent the subscription every message.
        let sent = server_msgs_of(&server, &truth, name);
        assert_eq!(sent, truth.published, "{name}: the server sent");
        let lost = truth.published - received;
        assert!(lost > 0, "{name}: the storm made the client drop nothing");
        let dropped = series("nats_delivery_app_dropped_messages_total");
        assert_eq!(dropped, Some(lost as f64), "{name}: dropped, {truth:?}");
        assert_eq!(dropped, Some((sent - received) as f64), "{name}: dropped");
        let delivered = series("nats_delivery_app_delivered_messages_total");
        assert_eq!(delivered, Some(*received as f64), "{name}: delivered");
        assert_eq!(series("nats_delivery_app_pending_messages"), Some(0.0));
        assert_eq!(series("nats_delivery_app_pending_bytes"), Some(0.0));
        let events_seen = series("nats_delivery_app_slow_consumer_events_total").unwrap();
        match events {
            Events::OnePerDrop => assert_eq!(events_seen, lost as f64, "{name}: events"),
            Events::AtLeastOne => assert!(
                (1.0..=lost as f64).contains(&events_seen),
                "{name}: {events_seen} events for {lost} drops"
            ),
        }
    }
    let id = [("client", client), ("instance", "storm-1")];
    let connected = [id[0], id[1], ("event", "connected")];
    assert_eq!(
        value(
            &text,
            "nats_delivery_app_connection_events_total",
            &connected
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "nats_delivery_app_instance_restarts_total", &id),
        Some(0.0)
    );
    let malformed = value(&text, "nats_delivery_app_reports_malformed_total", &[]);
    assert_eq!(malformed, Some(0.0));
    // The loss was the client's own: the server cut nobody.
    let varz = nats_test_server::http_get(&format!("{}/varz", server.monitor_url()));
    let varz: serde_json::Value = serde_json::from_str(&varz).unwrap();
    assert_eq!(varz["slow_consumers"], 0);
    nats_test_server::reference::assert_documented(&text);
    drop(app);
}

/// Starts the storm with the server's URL and this test's report options,
/// and reads its one line of counts (it then waits for its stdin to close).
fn run_storm(mut storm: Command, server: &NatsServer, client: &str) -> (Killed, Truth) {
    storm
        .arg(server.client_url())
        .args(["--messages", &MESSAGES.to_string(), "--client", client])
        .args(["--instance", "storm-1", "--subject", SUBJECT])
        .args(["--interval", "0.2", "--timeout", "40"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = Killed(
        storm
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {storm:?}: {e}")),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (line_tx, line_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = line_tx.send(line);
    });
    let line = line_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the storm application's counts within 60 s");
    let truth: Truth = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the storm application printed {line:?} ({e})"));
    (child, truth)
}

/// Messages the server sent the storm subscriber's subscription `name`:
/// the server numbers a connection's subscriptions in the order they were
/// made.
fn server_msgs_of(server: &NatsServer, truth: &Truth, name: &str) -> u64 {
    let mut subs: Vec<(u64, u64)> =
        nats_test_server::app::server_subscriptions(server, "storm-subscriber")
            .iter()
            .filter(|s| s["subject"] == "storm.data")
            .map(|s| {
                let sid = s["sid"].as_str().and_then(|v| v.parse().ok()).unwrap();
                (sid, s["msgs"].as_u64().unwrap())
            })
            .collect();
    subs.sort();
    assert_eq!(subs.len(), truth.subscriptions.len(), "{subs:?}, {truth:?}");
    let index = truth.subscriptions.iter().position(|n| n == name).unwrap();
    subs[index].1
}

/// `$NATS_PY_PYTHON`, else the virtual environment `scripts/install-deps.sh`
/// makes with nats-py.
fn python_with_nats_py() -> PathBuf {
    let python = std::env::var_os("NATS_PY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/nats-py/bin/python"));
    assert!(
        python.exists(),
        "no Python with nats-py at {}: run scripts/install-deps.sh (or set NATS_PY_PYTHON)",
        python.display()
    );
    python
}

#[tokio::test]
async fn a_nats_py_storm_is_re_exported_exactly() {
    let mut storm = Command::new(python_with_nats_py());
    storm
        .arg(workspace_root().join("examples/python-reporter/storm.py"))
        // No __pycache__ left in the repository.
        .env("PYTHONDONTWRITEBYTECODE", "1");
    storm_is_re_exported_exactly(storm, "python-storm", Events::OnePerDrop).await;
}

/// Where Debian's golang-github-nats-io-go-nats-dev puts nats.go and its
/// dependencies: a GOPATH (there is no module proxy to fetch them from).
const DEBIAN_GOCODE: &str = "/usr/share/gocode";

/// Builds `examples/go-reporter` (the package and the storm) in a GOPATH of
/// its own beside Debian's, and returns the directory and the storm binary.
fn build_go_storm() -> (tempfile::TempDir, PathBuf) {
    let gopath = tempfile::tempdir().unwrap();
    let examples = workspace_root().join("examples/go-reporter");
    for package in ["natsdelivery", "storm"] {
        let to = gopath.path().join("src").join(package);
        std::fs::create_dir_all(&to).unwrap();
        for file in std::fs::read_dir(examples.join(package)).unwrap() {
            let file = file.unwrap().path();
            std::fs::copy(&file, to.join(file.file_name().unwrap())).unwrap();
        }
    }
    assert!(
        PathBuf::from(DEBIAN_GOCODE)
            .join("src/github.com/nats-io/nats.go")
            .exists(),
        "no nats.go under {DEBIAN_GOCODE}: run scripts/install-deps.sh"
    );
    let binary = gopath.path().join("storm-binary");
    let log_path = gopath.path().join("go-build.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut build = Killed(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&binary)
            .arg("storm")
            .env("GO111MODULE", "off")
            .env("GOFLAGS", "")
            .env(
                "GOPATH",
                format!("{}:{DEBIAN_GOCODE}", gopath.path().display()),
            )
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run go ({e}): run scripts/install-deps.sh")),
    );
    // Seconds with Go's build cache warm; a cold cache on a loaded machine
    // took about 30 s.
    let status = Wait::secs("go build of the storm", 120)
        .every(Duration::from_millis(100))
        .until_blocking(|| build.0.try_wait().unwrap());
    assert!(
        status.success(),
        "go build of the storm failed:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    (gopath, binary)
}

#[tokio::test]
async fn a_nats_go_storm_is_re_exported_exactly() {
    let (_gopath, storm) = build_go_storm();
    storm_is_re_exported_exactly(Command::new(storm), "go-storm", Events::AtLeastOne).await;
}
