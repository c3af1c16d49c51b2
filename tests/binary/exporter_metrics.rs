//! The exporter's own build and process metrics, read from the binary and
//! compared with what the kernel and the build say about it.

use std::process::{Child, Command};
use std::time::{SystemTime, UNIX_EPOCH};

use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const BINARY: &str = env!("CARGO_BIN_EXE_nats-delivery-exporter");

struct Exporter {
    child: Child,
    url: String,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary with at most `max_fds` open files.
fn start(server: &NatsServer, max_fds: u32, extra: &[&str]) -> Exporter {
    let port = nats_test_server::free_port();
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {max_fds} && exec \"$0\" \"$@\""))
        .arg(BINARY)
        .args(["--monitor-url", &server.monitor_url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    Exporter {
        child,
        url: format!("http://127.0.0.1:{port}/metrics"),
    }
}

async fn scrape(e: &Exporter) -> String {
    Wait::secs("the exporter's /metrics", 20)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async { reqwest::get(&e.url).await.ok()?.text().await.ok() })
        .await
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A `Vm*` line of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024.0
}

fn stdout_of(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap().trim().to_string())
}

#[tokio::test]
async fn process_metrics_match_what_the_kernel_says() {
    let server = NatsServer::builder().start();
    let before = now();
    let exporter = start(&server, 777, &[]);
    let after_spawn = now();
    let pid = exporter.child.id();
    let first = scrape(&exporter).await;
    let text = scrape(&exporter).await;
    let get = |text: &str, name: &str| value(text, name, &[]).unwrap_or_else(|| panic!("{name}"));

    assert_eq!(get(&text, "process_max_fds"), 777.0);
    // The start time has the kernel's boot time, in whole seconds, under it.
    let start = get(&text, "process_start_time_seconds");
    assert!(
        (before - 1.0..=after_spawn + 0.02).contains(&start),
        "started between {before} and {after_spawn}, says {start}"
    );
    let cpu = get(&text, "process_cpu_seconds_total");
    assert!(cpu >= get(&first, "process_cpu_seconds_total"));
    assert!(cpu > 0.0 && cpu < 2.0 * (now() - before), "{cpu}");
    // Read beside the kernel's own figures of the idle process.
    let rss = get(&text, "process_resident_memory_bytes");
    let kernel_rss = status_bytes(pid, "VmRSS:");
    assert!(
        (rss / kernel_rss - 1.0).abs() < 0.1,
        "{rss} vs {kernel_rss}"
    );
    let vsz = get(&text, "process_virtual_memory_bytes");
    let kernel_vsz = status_bytes(pid, "VmSize:");
    assert!(
        (vsz / kernel_vsz - 1.0).abs() < 0.1,
        "{vsz} vs {kernel_vsz}"
    );
    // The fds the kernel lists now, give or take the scrape's own socket and
    // the directory read to count them.
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as f64;
    let open = get(&text, "process_open_fds");
    assert!((open - fds).abs() <= 2.0, "{open} vs {fds}");
    nats_test_server::promtool::assert_metrics_clean(&text);
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test]
async fn build_info_names_the_version_revision_and_compiler() {
    let server = NatsServer::builder().start();
    let exporter = start(&server, 1024, &["--web.disable-exporter-metrics"]);
    let text = scrape(&exporter).await;
    let revision = stdout_of("git", &["rev-parse", "--short=12", "HEAD"])
        .unwrap_or_else(|| "unknown".to_string());
    let rustc = stdout_of(
        &std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()),
        &["--version"],
    )
    .unwrap();
    let rustc = rustc.split_whitespace().nth(1).unwrap();
    let labels = [
        ("version", env!("CARGO_PKG_VERSION")),
        ("revision", revision.as_str()),
        ("rustc_version", rustc),
    ];
    assert_eq!(
        value(&text, "nats_delivery_exporter_build_info", &labels),
        Some(1.0),
        "{}",
        text.lines()
            .filter(|l| l.contains("build_info"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Off with --web.disable-exporter-metrics, as in node_exporter.
    assert!(
        !text.lines().any(|l| l.starts_with("process_")),
        "process metrics written though disabled"
    );
    let version = stdout_of(BINARY, &["--version"]).unwrap();
    assert_eq!(
        version,
        format!(
            "nats-delivery-exporter {} (revision {revision}, rustc {rustc})",
            env!("CARGO_PKG_VERSION")
        )
    );
}
