//! The container image, run with podman against real servers: the exact
//! counts of a cut slow consumer and of dead JetStream messages read from
//! the container's /metrics, the user it runs as, its size, labels and
//! files, and the CA bundle TLS is checked against.

use std::process::{Command, Output};

use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::{free_port, NatsServer};

use crate::losses::{self, CONSUMER, STREAM, STUCK_CLIENT};
use crate::{artifact, scrape};

/// The image is at most this big (24 MB). The tests build it from the
/// `deploy-test` profile (opt-level 1, no LTO: a quicker build), about a
/// third larger than the release image.
const MAX_IMAGE_BYTES: u64 = 24_000_000;

/// Where the binary reads its CA bundle, as on Debian.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// podman with its global flags: `DEPLOY_PODMAN`, else what these machines
/// need (runc instead of crun, cgroupfs).
pub(crate) fn podman_command() -> Command {
    let words = std::env::var("DEPLOY_PODMAN")
        .unwrap_or_else(|_| "podman --runtime runc --cgroup-manager=cgroupfs".into());
    let mut words = words.split_whitespace();
    let mut command = Command::new(words.next().expect("a podman command"));
    command.args(words);
    command
}

/// Runs podman; panics with its error output when it fails.
pub(crate) fn podman(args: &[&str]) -> Output {
    let out = podman_command()
        .args(args)
        .output()
        .expect("podman (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `podman run` options every container here needs: the host's network, and
/// limits no higher than these machines allow a container to set.
pub(crate) const RUN_OPTIONS: [&str; 6] = [
    "--network",
    "host",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
];

pub(crate) fn podman_text(args: &[&str]) -> String {
    String::from_utf8(podman(args).stdout)
        .unwrap()
        .trim()
        .to_string()
}

/// A container of the image, on the host's network, removed when dropped.
struct Container {
    name: String,
    metrics: String,
}

impl Container {
    /// Starts the image with these settings (NATS_DELIVERY_* variables) and
    /// extra `podman run` options; it serves /metrics on a free loopback port.
    fn start(options: &[&str], env: &[(&str, String)]) -> Container {
        let port = free_port();
        let name = format!("nats-delivery-exporter-test-{}-{port}", std::process::id());
        let mut args = vec![
            "run".to_string(),
            "-d".into(),
            "--name".into(),
            name.clone(),
        ];
        args.extend(RUN_OPTIONS.iter().map(|o| o.to_string()));
        args.extend([
            "-e".into(),
            format!("NATS_DELIVERY_LISTEN=127.0.0.1:{port}"),
        ]);
        args.extend(options.iter().map(|o| o.to_string()));
        for (k, v) in env {
            args.extend(["-e".into(), format!("{k}={v}")]);
        }
        args.push(artifact("DEPLOY_IMAGE"));
        podman(&args.iter().map(String::as_str).collect::<Vec<_>>());
        Container {
            name,
            metrics: format!("http://127.0.0.1:{port}/metrics"),
        }
    }

    /// The user and group ids of the container's process, as the host sees them.
    fn process_ids(&self) -> (String, String) {
        let pid = podman_text(&["inspect", "--format", "{{.State.Pid}}", &self.name]);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let ids = |key: &str| {
            let line = status.lines().find(|l| l.starts_with(key)).unwrap();
            line.split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
        };
        (ids("Uid:"), ids("Gid:"))
    }

    /// Stops it with SIGTERM and returns its exit code.
    fn stop(&self) -> String {
        podman(&["stop", "-t", "10", &self.name]);
        podman_text(&["inspect", "--format", "{{.State.ExitCode}}", &self.name])
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Ok(out) = podman_command().args(["logs", &self.name]).output() {
                eprintln!(
                    "{} logs:\n{}",
                    self.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let _ = podman_command().args(["rm", "-f", &self.name]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image: scripts/test-deploy.sh"]
async fn the_image_counts_a_cut_slow_consumer_and_dead_messages_exactly() {
    let server = losses::server("");
    let (container, _dns) = start_resolving_by_dns(&server).await;

    let reason = losses::cut_a_slow_consumer(&server).await;
    let dead = 3;
    losses::let_messages_die(&server, dead).await;
    let job = [("stream", STREAM), ("consumer", CONSUMER)];
    let cut = [("client_name", STUCK_CLIENT), ("reason", reason)];
    let text = Wait::secs("the exact counts in the container's /metrics", 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async {
            let text = scrape(&container.metrics).await?;
            let died = value(&text, "nats_delivery_jetstream_max_deliveries_total", &job);
            let closed = value(
                &text,
                "nats_delivery_slow_consumer_closed_connections_total",
                &cut,
            );
            (died == Some(dead as f64) && closed == Some(1.0)).then_some(text)
        })
        .await;
    // Still exact a second later: nothing counted twice.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let later = scrape(&container.metrics).await.unwrap();
    for (name, labels) in [
        ("nats_delivery_jetstream_max_deliveries_total", &job),
        ("nats_delivery_slow_consumer_closed_connections_total", &cut),
    ] {
        assert_eq!(
            value(&later, name, labels),
            value(&text, name, labels),
            "{name}"
        );
    }
    let detections = losses::varz_slow_consumers(&server);
    let total = value(&text, "nats_delivery_server_slow_consumers_total", &[]);
    assert_eq!(total, Some(detections as f64), "the server's own total");
    println!(
        "the container reported: {dead} max-deliveries deaths of {STREAM}/{CONSUMER}, \
         1 connection {STUCK_CLIENT} closed ({reason}), \
         nats_delivery_server_slow_consumers_total {detections} (the server's /varz: {detections})"
    );
    assert_eq!(container.stop(), "0", "a clean exit on SIGTERM");
}

#[test]
#[ignore = "needs the image: scripts/test-deploy.sh"]
fn the_image_is_small_labelled_and_holds_the_binary_and_ca_bundle_only() {
    let image = artifact("DEPLOY_IMAGE");
    let size: u64 = podman_text(&["image", "inspect", "--format", "{{.Size}}", &image])
        .parse()
        .unwrap();
    println!("image {image}: {size} bytes");
    assert!(size <= MAX_IMAGE_BYTES, "{size} bytes");
    let inspect = podman_text(&["image", "inspect", "--format", "{{json .Config}}", &image]);
    let config: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    let label = |name: &str| config["Labels"][format!("org.opencontainers.image.{name}")].clone();
    assert_eq!(label("version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(label("source"), env!("CARGO_PKG_REPOSITORY"));
    assert_eq!(label("licenses"), env!("CARGO_PKG_LICENSE"));
    assert_eq!(config["User"], "65534:65534");
    assert!(config["ExposedPorts"].get("7778/tcp").is_some(), "{config}");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/bin/nats-delivery-exporter"])
    );

    let mut run = vec!["run", "--rm"];
    run.extend(RUN_OPTIONS);
    run.extend([image.as_str(), "--version"]);
    let version = podman_text(&run);
    assert!(
        version.starts_with(&format!(
            "nats-delivery-exporter {} (revision ",
            env!("CARGO_PKG_VERSION")
        )),
        "{version}"
    );

    // Its files, read from a container made of it: nothing but the two.
    let made = podman_text(&["create", &image]);
    let export = podman(&["export", &made]);
    podman(&["rm", &made]);
    let listing = Command::new("tar")
        .args(["-tvf", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut tar| {
            use std::io::Write;
            tar.stdin.take().unwrap().write_all(&export.stdout)?;
            tar.wait_with_output()
        })
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    // Regular files that are not empty: podman adds empty mount points.
    let mut files: Vec<&str> = listing
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter(|l| l.split_whitespace().nth(2) != Some("0"))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "etc/ssl/certs/ca-certificates.crt",
            "usr/bin/nats-delivery-exporter"
        ],
        "{listing}"
    );
}

/// A server with TLS on its client port and https monitoring, signed by a
/// throwaway CA.
fn tls_server(certs: &std::path::Path) -> NatsServer {
    nats_test_server::tls::make_certs(certs);
    NatsServer::builder()
        .https(&certs.join("server.pem"), &certs.join("server.key"))
        .start()
}

/// Waits until the container's https poll and NATS listener are both up:
/// the server's certificate verified on both connections.
async fn wait_until_tls_verifies(container: &Container, what: &str) {
    Wait::secs(what, 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async {
            let text = scrape(&container.metrics).await?;
            let https = value(&text, "nats_delivery_up", &[("source", "varz")]) == Some(1.0);
            let nats = value(&text, "nats_delivery_advisory_listener_up", &[]) == Some(1.0);
            (https && nats).then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image: scripts/test-deploy.sh"]
async fn the_image_checks_tls_against_the_ca_bundle_at_the_debian_path() {
    let certs = tempfile::tempdir().unwrap();
    let server = tls_server(certs.path());
    let ca = certs.path().join("ca.pem");
    let mut env = vec![
        (
            "NATS_DELIVERY_MONITOR_URL",
            format!("https://localhost:{}", server.monitor_port),
        ),
        (
            "NATS_DELIVERY_NATS_SERVERS",
            format!("tls://localhost:{}", server.client_port),
        ),
        ("NATS_DELIVERY_ADVISORIES", "true".into()),
    ];
    // The test CA in place of the image's bundle.
    let over_bundle = format!("{}:{CA_BUNDLE}:ro", ca.display());
    let trusting = Container::start(&["-v", &over_bundle], &env);
    wait_until_tls_verifies(&trusting, "TLS with the test CA at the bundle's path").await;
    // The image's own bundle does not hold the test CA: both refuse.
    let refusing = Container::start(&[], &env);
    let refusing_since = std::time::Instant::now();
    let text = Wait::secs("the image's own exporter", 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| scrape(&refusing.metrics))
        .await;
    assert_eq!(
        value(&text, "nats_delivery_up", &[("source", "varz")]),
        Some(0.0)
    );
    // SSL_CERT_FILE names another bundle.
    let elsewhere = format!("{}:/ca/test.pem:ro", ca.display());
    env.push(("SSL_CERT_FILE", "/ca/test.pem".into()));
    let named = Container::start(&["-v", &elsewhere], &env);
    wait_until_tls_verifies(&named, "TLS with the bundle SSL_CERT_FILE names").await;
    // The refused NATS listener has had 3 s to connect.
    let wait = std::time::Duration::from_secs(3).saturating_sub(refusing_since.elapsed());
    tokio::time::sleep(wait).await;
    let text = scrape(&refusing.metrics).await.unwrap();
    assert_eq!(
        value(&text, "nats_delivery_advisory_listener_up", &[]),
        Some(0.0)
    );
}

/// The image run against `server`: the NATS server by a name only DNS
/// knows (the stub answers, and must outlive the container), the monitoring
/// endpoint by `localhost`, from the /etc/hosts podman writes. Returns once
/// it polls and listens, checked to run as 65534.
async fn start_resolving_by_dns(
    server: &NatsServer,
) -> (Container, (crate::dns::Stub, tempfile::NamedTempFile)) {
    let name = "nats.deploy.test";
    let dns = crate::dns::Stub::start(name);
    let resolv = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(resolv.path(), dns.resolv_conf()).unwrap();
    // Readable by the container's user, as /etc/resolv.conf always is.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(resolv.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let mount = format!("{}:/etc/resolv.conf:ro", resolv.path().display());
    let container = Container::start(
        &["-v", &mount],
        &[
            (
                "NATS_DELIVERY_MONITOR_URL",
                format!("http://localhost:{}", server.monitor_port),
            ),
            (
                "NATS_DELIVERY_NATS_SERVERS",
                format!("nats://{name}:{}", server.client_port),
            ),
            ("NATS_DELIVERY_ADVISORIES", "true".into()),
        ],
    );
    Wait::secs("the containerised exporter's advisory listener", 30)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async {
            let text = scrape(&container.metrics).await?;
            let listening = value(&text, "nats_delivery_advisory_listener_up", &[]) == Some(1.0);
            let polling = value(&text, "nats_delivery_up", &[("source", "varz")]) == Some(1.0);
            (listening && polling).then_some(())
        })
        .await;
    assert!(
        dns.answered() > 0,
        "the container never asked DNS for {name}"
    );
    assert_eq!(
        container.process_ids(),
        (
            "65534 65534 65534 65534".into(),
            "65534 65534 65534 65534".into()
        ),
        "the exporter must run as 65534, not root"
    );

    (container, (dns, resolv))
}
