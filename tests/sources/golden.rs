//! Golden exposition files: JSON captured from real servers of each version
//! under `tests/fixtures/<version>/`, served back to the exporter, whose
//! output must equal `metrics.prom` in the same folder. (`routez.json` and
//! `gatewayz.json` there, for the sources off by default, come from a
//! cluster: `scripts/capture-link-fixtures.sh` captures them.)
//!
//! `NATS_DELIVERY_UPDATE_FIXTURES=1 cargo test --test sources golden::` recaptures the
//! JSON from real servers (scripts/install-deps.sh installs them) and rewrites
//! the golden files (`=2.10.26,2.12.8` only those versions);
//! `NATS_DELIVERY_UPDATE_FIXTURES=golden` rewrites only the
//! golden files from the JSON already captured. Review the diff before committing it.
use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use async_nats::jetstream;
use axum::extract::{Query, State};
use axum::routing::get;
use common::scenarios;
use nats_test_server::NatsServer;

/// Every supported server version: (fixture folder, `.tools/` name).
const VERSIONS: [(&str, &str); 5] = [
    ("2.9.10", "debian"),
    ("2.10.26", "2.10.26"),
    ("2.11.11", "2.11.11"),
    ("2.12.8", "2.12.8"),
    ("2.15.1", "2.15.1"),
];

fn dir(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(version)
}

/// `1` recaptures every version; a comma-separated list of versions
/// ("2.10.26,2.12.8") recaptures only those.
fn recapturing(version: &str) -> bool {
    std::env::var("NATS_DELIVERY_UPDATE_FIXTURES")
        .is_ok_and(|v| v == "1" || v.split(',').any(|one| one == version))
}

fn updating(version: &str) -> bool {
    recapturing(version)
        || std::env::var("NATS_DELIVERY_UPDATE_FIXTURES").is_ok_and(|v| v == "golden")
}

/// Drives a server into a known state: a cut slow consumer, a consumer with
/// unacknowledged and redelivered messages, a backlog.
async fn capture(version_dir: &Path, binary: &str) {
    let server = NatsServer::builder()
        .version(binary)
        .name("fixture")
        .jetstream()
        .max_pending(512 * 1024)
        .config("max_payload: 65536")
        .start();
    let _stuck = scenarios::stuck_reader(server.client_port, "stuck-reader", "cut.test").await;
    let client = async_nats::ConnectOptions::new()
        .name("fixture-app")
        .connect(server.client_url())
        .await
        .unwrap();
    scenarios::publish_until_cut(&server, &client, "cut.test").await;
    scenarios::closed_reason(&server, "stuck-reader").await;
    scenarios::orders_with_redeliveries(&jetstream::new(client.clone())).await;
    std::fs::create_dir_all(version_dir).unwrap();
    let base = server.monitor_url();
    for (file, path) in [
        ("varz.json", "varz"),
        ("connz.json", "connz?sort=pending&limit=10&auth=true"),
        (
            "connz_closed.json",
            "connz?state=closed&sort=stop&limit=1000&offset=0&auth=true",
        ),
        (
            "jsz.json",
            "jsz?accounts=true&streams=true&consumers=true&config=true&offset=0&limit=1024",
        ),
        ("accstatz.json", "accstatz?unused=true"),
    ] {
        std::fs::write(
            version_dir.join(file),
            nats_test_server::http_get(&format!("{base}/{path}")),
        )
        .unwrap();
    }
}

/// Serves the captured JSON the way the server would answer the exporter.
async fn serve_fixtures(version_dir: PathBuf) -> String {
    async fn answer(
        State(dir): State<PathBuf>,
        path: axum::extract::OriginalUri,
        Query(q): Query<HashMap<String, String>>,
    ) -> String {
        let endpoint = path.path().trim_start_matches('/');
        let first_page = q.get("offset").is_none_or(|o| o == "0");
        let file = match endpoint {
            "connz" if q.get("state").is_some_and(|s| s == "closed") => {
                first_page.then_some("connz_closed.json")
            }
            "jsz" => first_page.then_some("jsz.json"),
            other => Some(match other {
                "varz" => "varz.json",
                "accstatz" => "accstatz.json",
                _ => "connz.json",
            }),
        };
        match file {
            Some(f) => std::fs::read_to_string(dir.join(f)).unwrap(),
            None => "{\"connections\": [], \"account_details\": []}".to_string(),
        }
    }
    let app = axum::Router::new()
        .route("/varz", get(answer))
        .route("/connz", get(answer))
        .route("/jsz", get(answer))
        .route("/accstatz", get(answer))
        .with_state(version_dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// Lines that change from run to run (durations, wall-clock times) keep their name and labels only.
fn stable(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with("nats_delivery_scrape_duration_seconds")
                || l.starts_with("nats_delivery_last_success_timestamp_seconds")
                || l.starts_with("nats_delivery_jsz_config_age_seconds")
            {
                format!("{} <varies>", l.rsplit_once(' ').unwrap().0)
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[tokio::test]
async fn exposition_matches_golden_files_for_each_server_version() {
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (version, binary) in VERSIONS {
        let d = dir(version);
        if recapturing(version) {
            capture(&d, binary).await;
        }
        let url = serve_fixtures(d.clone()).await;
        let exporter = common::exporter(std::slice::from_ref(&url), &[]);
        let text = common::scrape(&exporter).await;
        nats_test_server::reference::assert_documented(&text);
        let got = stable(&text);
        let golden = d.join("metrics.prom");
        if updating(version) {
            std::fs::write(&golden, &got).unwrap();
        }
        seen.extend(nats_test_server::reference::exposed(&text).into_keys());
        // The golden file has what default flags write; the opt-in
        // families are checked against METRICS.md too.
        let every = [
            "--consumer-status-series",
            "all",
            "--consumer-opt-in-metrics",
            "all",
        ];
        let all_text = common::scrape(&common::exporter(&[url], &every)).await;
        nats_test_server::reference::assert_documented(&all_text);
        seen.extend(nats_test_server::reference::exposed(&all_text).into_keys());
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if got != want {
            problems.push(format!(
                "{version}: output differs from {}:\n{got}",
                golden.display()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n(NATS_DELIVERY_UPDATE_FIXTURES=1 regenerates)",
        problems.join("\n")
    );
    // Errors only appear when a poll fails: a port that refuses.
    let closed = common::fake_endpoint::ClosedPort::new();
    let failing = common::exporter(&[closed.url()], &["--timeout", "1s"]);
    seen.extend(nats_test_server::reference::exposed(&common::scrape(&failing).await).into_keys());
    // And the other way round: every metric METRICS.md lists for the polled
    // sources shows up in at least one server version's output.
    let sections = [
        "Exporter health",
        "Server (from /varz)",
        "Connections (from /connz)",
        "Accounts (from /accstatz)",
        "JetStream streams and consumers (from /jsz)",
    ];
    let never: Vec<_> = nats_test_server::reference::documented_in(&sections)
        .into_keys()
        .filter(|name| !seen.contains(name))
        .collect();
    assert!(
        never.is_empty(),
        "METRICS.md lists metrics no fixture produces: {never:?}"
    );
}
