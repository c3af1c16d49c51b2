//! The report protocol spoken by applications in other languages
//! (`docs/report-protocol.md`): the reporters in `examples/` (nats-py,
//! nats.go on its newest and oldest supported version, jnats) run a drop
//! storm against a real server, and the exporter binary, run with
//! `--client-reports`, must re-export exactly what each application lost.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nats_test_server::sample::value;
use nats_test_server::wait::{Text, Wait};
use nats_test_server::{workspace_root, NatsServer};

use crate::other_language_builds as build;

const SUBJECT: &str = "nats_delivery.reports";
const MESSAGES: u64 = 20_000;

/// A child process killed (and waited for) when dropped.
pub struct Killed(pub Child);

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
    /// The client library and its version, as the library itself tells.
    library: String,
}

/// How a client library's slow-consumer events relate to its drops.
#[derive(Debug, Clone, Copy)]
enum Events {
    /// One event per dropped message (nats-py).
    OnePerDrop,
    /// At least one event for a subscription that dropped (nats.go and
    /// jnats signal a slow consumer once per run of drops, until a message
    /// fits again).
    AtLeastOne,
}

/// What a reporter sends besides the counts every reporter has.
struct Reporter {
    /// The `client` label of its storm.
    client: &'static str,
    events: Events,
    /// Whether it reports `pending_bytes` (jnats counts a message's bytes
    /// as they came over the wire, not its payload: left out).
    pending_bytes: bool,
    /// The library and version the storm must have run with.
    library: String,
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
async fn storm_is_re_exported_exactly(storm: Command, reporter: Reporter) {
    let client = reporter.client;
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
    assert_eq!(
        truth.library, reporter.library,
        "the library the storm ran with"
    );
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
        println!(
            "{} {name}: published {}, server sent {sent}, received {received}, \
             dropped (re-exported) {}",
            truth.library,
            truth.published,
            dropped.unwrap_or(-1.0)
        );
        let delivered = series("nats_delivery_app_delivered_messages_total");
        assert_eq!(delivered, Some(*received as f64), "{name}: delivered");
        assert_eq!(series("nats_delivery_app_pending_messages"), Some(0.0));
        let pending_bytes = series("nats_delivery_app_pending_bytes");
        assert_eq!(
            pending_bytes,
            reporter.pending_bytes.then_some(0.0),
            "{name}"
        );
        let events_seen = series("nats_delivery_app_slow_consumer_events_total").unwrap();
        match reporter.events {
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
        // No __pycache__ left in the repository by the Python storm.
        .env("PYTHONDONTWRITEBYTECODE", "1")
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

#[tokio::test]
async fn a_nats_py_storm_is_re_exported_exactly() {
    let (_venv, python) = build::python_with_reporter();
    let mut storm = Command::new(python);
    storm.arg(workspace_root().join("examples/python-reporter/storm.py"));
    // The nats-py that install-deps.sh put among the wheels, the one installed.
    let wheels = std::fs::read_dir(workspace_root().join(".tools/python-wheels")).unwrap();
    let nats_py = wheels
        .filter_map(|w| {
            let name = w.unwrap().file_name().into_string().unwrap();
            Some(
                name.strip_prefix("nats_py-")?
                    .split('-')
                    .next()?
                    .to_string(),
            )
        })
        .next()
        .expect("a nats-py wheel: run scripts/install-deps.sh");
    let reporter = Reporter {
        client: "python-storm",
        events: Events::OnePerDrop,
        pending_bytes: true,
        library: format!("nats-py {nats_py}"),
    };
    storm_is_re_exported_exactly(storm, reporter).await;
}

/// The Go storm built with `modfile`, which must require nats.go at the
/// version the storm then runs with.
async fn nats_go_storm(modfile: &str) {
    let (_dir, storm) = build::go_storm(modfile);
    let modfile = workspace_root().join("examples/go-reporter").join(modfile);
    let version = build::required_version(&modfile, "github.com/nats-io/nats.go v", '\n');
    let reporter = Reporter {
        client: "go-storm",
        events: Events::AtLeastOne,
        pending_bytes: true,
        library: format!("nats.go {version}"),
    };
    storm_is_re_exported_exactly(Command::new(storm), reporter).await;
}

#[tokio::test]
async fn a_nats_go_storm_is_re_exported_exactly() {
    nats_go_storm("go.mod").await;
}

#[tokio::test]
async fn a_nats_go_storm_on_the_oldest_nats_go_is_re_exported_exactly() {
    nats_go_storm("go.oldest.mod").await;
}

#[tokio::test]
async fn a_jnats_storm_is_re_exported_exactly() {
    let (_dir, storm) = build::java_storm();
    let pom = workspace_root().join("examples/java-reporter/pom.xml");
    let version = build::required_version(&pom, "<jnats.version>", '<');
    let reporter = Reporter {
        client: "java-storm",
        events: Events::AtLeastOne,
        pending_bytes: false,
        library: format!("jnats {version}"),
    };
    storm_is_re_exported_exactly(storm, reporter).await;
}
