//! The .deb and its systemd unit: installed with dpkg, checked with
//! systemd-analyze, its binary run against a real server, then removed and
//! purged without a trace; and the files it is built from.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use nats_test_server::free_port;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;

use crate::losses::{self, STUCK_CLIENT};
use crate::{artifact, read, repo_files, scrape};

const PACKAGE: &str = "nats-delivery-exporter";
const UNIT_NAME: &str = "nats-delivery-exporter.service";
const UNIT: &str = "/lib/systemd/system/nats-delivery-exporter.service";
const ENV_FILE: &str = "/etc/default/nats-delivery-exporter";
const SHARE: &str = "/usr/share/nats-delivery-exporter";
/// What deb-systemd-helper leaves when it enables the unit.
const ENABLED_LINK: &str =
    "/etc/systemd/system/multi-user.target.wants/nats-delivery-exporter.service";
/// What a mask leaves (a link to /dev/null), as older debhelper's postrm
/// did on remove.
const MASK: &str = "/etc/systemd/system/nats-delivery-exporter.service";

fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/install-deps.sh installs it)"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn installed() -> bool {
    let status = Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", PACKAGE])
        .output()
        .unwrap();
    String::from_utf8_lossy(&status.stdout) == "install ok installed"
}

/// Purges the package when dropped, so a failed test leaves nothing behind.
struct Purge;

impl Drop for Purge {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", PACKAGE]).output();
    }
}

/// The files the package holds, as `dpkg-deb -c` lists them.
fn contents(deb: &str) -> Vec<String> {
    let listing = String::from_utf8(run("dpkg-deb", &["-c", deb]).stdout).unwrap();
    let mut files: Vec<String> = listing
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches('.').to_string())
        .collect();
    files.sort();
    files
}

#[test]
#[ignore = "needs the .deb and root: scripts/test-deploy.sh"]
fn the_deb_lists_the_binary_unit_settings_rules_and_dashboards() {
    let deb = artifact("DEPLOY_DEB");
    let mut wanted = vec![
        "/usr/bin/nats-delivery-exporter".to_string(),
        UNIT.into(),
        ENV_FILE.into(),
        "/usr/share/doc/nats-delivery-exporter/changelog.gz".into(),
        "/usr/share/doc/nats-delivery-exporter/copyright".into(),
        "/usr/share/lintian/overrides/nats-delivery-exporter".into(),
        "/usr/share/man/man1/nats-delivery-exporter.1.gz".into(),
    ];
    for rules in repo_files("alerts", ".rules.yml") {
        wanted.push(format!("{SHARE}/alerts/{rules}"));
    }
    for dashboard in repo_files("dashboards", ".json") {
        wanted.push(format!("{SHARE}/dashboards/{dashboard}"));
    }
    wanted.sort();
    assert_eq!(contents(&deb), wanted);
    let field = |name: &str| {
        let out = run("dpkg-deb", &["-f", &deb, name]).stdout;
        String::from_utf8(out).unwrap().trim().to_string()
    };
    assert_eq!(field("Package"), PACKAGE);
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    // `Name <address>` (Debian Policy 5.6.2, RFC 5322's name-addr).
    let maintainer = field("Maintainer");
    let (name, address) = maintainer
        .strip_suffix('>')
        .and_then(|m| m.split_once(" <"))
        .unwrap_or_else(|| panic!("Maintainer: {maintainer}"));
    let (local, domain) = address.split_once('@').unwrap_or_default();
    assert!(
        !name.is_empty()
            && !local.is_empty()
            && domain.contains('.')
            && !address.contains(['<', '>', ' ']),
        "Maintainer: {maintainer}"
    );
    // The settings may hold passwords: root's, not for others to read.
    let listing = String::from_utf8(run("dpkg-deb", &["-c", &deb]).stdout).unwrap();
    let settings = listing.lines().find(|l| l.ends_with(ENV_FILE)).unwrap();
    assert!(settings.starts_with("-rw-r----- root/root "), "{settings}");
    let size = std::fs::metadata(&deb).unwrap().len();
    println!("{deb}: {size} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the .deb and root: scripts/test-deploy.sh"]
async fn the_deb_installs_runs_and_purges_cleanly() {
    let deb = artifact("DEPLOY_DEB");
    assert!(
        !installed(),
        "{PACKAGE} is already installed here; the test would remove it"
    );
    let _purge = Purge;
    run("dpkg", &["-i", &deb]);
    for rules in repo_files("alerts", ".rules.yml") {
        let shipped = std::fs::read_to_string(format!("{SHARE}/alerts/{rules}")).unwrap();
        assert_eq!(shipped, read(&format!("alerts/{rules}")), "{rules}");
    }
    for dashboard in repo_files("dashboards", ".json") {
        let shipped = std::fs::read_to_string(format!("{SHARE}/dashboards/{dashboard}")).unwrap();
        assert_eq!(
            shipped,
            read(&format!("dashboards/{dashboard}")),
            "{dashboard}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(UNIT).unwrap(),
        read("deploy/systemd/nats-delivery-exporter.service")
    );
    // Verified in place: the unit's syntax, and its ExecStart is executable.
    run("systemd-analyze", &["verify", UNIT]);
    // The exposure systemd rates the sandbox at (0 to 10, 10 unprotected),
    // times ten: at most 2.0.
    run(
        "systemd-analyze",
        &["security", "--offline=yes", "--threshold=20", UNIT],
    );
    assert!(Path::new(ENABLED_LINK).exists(), "enabled on first install");
    let settings = std::fs::metadata(ENV_FILE).unwrap();
    assert_eq!(settings.permissions().mode() & 0o7777, 0o640, "{ENV_FILE}");
    assert_eq!((settings.uid(), settings.gid()), (0, 0), "{ENV_FILE}");

    run_installed_binary().await;
    maintainer_scripts_as_debhelper_writes_them(&deb);

    run("dpkg", &["--remove", PACKAGE]);
    for gone in ["/usr/bin/nats-delivery-exporter", UNIT, SHARE] {
        assert!(!Path::new(gone).exists(), "{gone} left after remove");
    }
    assert!(Path::new(ENV_FILE).exists(), "remove keeps the settings");
    run("dpkg", &["--purge", PACKAGE]);
    for gone in [ENV_FILE, ENABLED_LINK] {
        assert!(!Path::new(gone).exists(), "{gone} left after purge");
    }
    assert!(!installed());
}

/// dh_installsystemd's cases: a mask (as older packages' removal left)
/// is undone on configure and when dpkg aborts a removal, and the unit is
/// enabled again; an administrator's disable survives a reinstall.
fn maintainer_scripts_as_debhelper_writes_them(deb: &str) {
    let postinst = format!("/var/lib/dpkg/info/{PACKAGE}.postinst");
    as_maintainer_script("postrm", "deb-systemd-helper", &["mask", UNIT_NAME]);
    assert!(Path::new(MASK).is_symlink());
    as_maintainer_script("postinst", &postinst, &["abort-remove"]);
    assert!(
        !Path::new(MASK).is_symlink(),
        "a mask left after abort-remove"
    );
    assert!(
        Path::new(ENABLED_LINK).exists(),
        "enabled after abort-remove"
    );
    as_maintainer_script("postrm", "deb-systemd-helper", &["mask", UNIT_NAME]);
    run("dpkg", &["-i", deb]);
    assert!(
        !Path::new(MASK).is_symlink(),
        "a mask left after an upgrade"
    );
    // Disabled by hand (what `systemctl disable` removes), then reinstalled.
    std::fs::remove_file(ENABLED_LINK).unwrap();
    run("dpkg", &["-i", deb]);
    assert!(
        !Path::new(ENABLED_LINK).exists(),
        "re-enabled by an upgrade"
    );
}

/// Runs `program` as dpkg runs the package's maintainer script `script`
/// (deb-systemd-helper refuses to run otherwise).
fn as_maintainer_script(script: &str, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .env("DPKG_MAINTSCRIPT_PACKAGE", PACKAGE)
        .env("DPKG_MAINTSCRIPT_NAME", script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} as {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The variables of a systemd environment file (`NAME=value`, the value's
/// surrounding quotes removed, as systemd reads it).
fn environment_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains('='))
        .map(|l| {
            let (name, value) = l.split_once('=').unwrap();
            (name.into(), value.trim_matches('"').into())
        })
        .collect()
}

/// The installed binary, started as the unit starts it: the installed
/// environment file (all comments but an empty `ARGS`) read as systemd
/// reads it, with the test server's address and a listen address put in
/// `ARGS`, and the unit's `ExecStart` with `$ARGS` split into words. It
/// counts a slow-consumer cut exactly.
async fn run_installed_binary() {
    let shipped = environment_file(&std::fs::read_to_string(ENV_FILE).unwrap());
    assert_eq!(
        shipped,
        [("ARGS".to_string(), String::new())],
        "the shipped settings are comments and an empty ARGS"
    );
    let server = losses::server("");
    let port = free_port();
    let args = format!(
        "--monitor-url={} --web.listen-address=127.0.0.1:{port}",
        server.monitor_url()
    );
    let file = std::fs::read_to_string(ENV_FILE)
        .unwrap()
        .replace("\nARGS=\"\"\n", &format!("\nARGS=\"{args}\"\n"));
    std::fs::write(ENV_FILE, file).unwrap();
    let settings = environment_file(&std::fs::read_to_string(ENV_FILE).unwrap());
    let exec_start = std::fs::read_to_string(UNIT).unwrap();
    let exec_start = exec_start
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let mut words = exec_start.split_whitespace();
    let program = words.next().unwrap();
    let mut command = Command::new(program);
    for word in words {
        match word.strip_prefix('$') {
            Some(name) => {
                let value = &settings.iter().find(|(n, _)| n == name).unwrap().1;
                command.args(value.split_whitespace());
            }
            None => {
                command.arg(word);
            }
        }
    }
    let mut exporter = command
        .env_clear()
        .envs(settings)
        .env("NATS_DELIVERY_LOG", "warn")
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let reason = losses::cut_a_slow_consumer(&server).await;
    let cut = [("client_name", STUCK_CLIENT), ("reason", reason)];
    let text = Wait::secs("the installed binary's count of the cut", 20)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async {
            let text = scrape(&url).await?;
            let closed = value(
                &text,
                "nats_delivery_slow_consumer_closed_connections_total",
                &cut,
            );
            (closed == Some(1.0)).then_some(text)
        })
        .await;
    let detections = losses::varz_slow_consumers(&server) as f64;
    assert_eq!(
        value(&text, "nats_delivery_server_slow_consumers_total", &[]),
        Some(detections)
    );
    run("kill", &["-TERM", &exporter.id().to_string()]);
    assert!(
        exporter.wait().unwrap().success(),
        "a clean exit on SIGTERM"
    );
}

/// Every NATS_DELIVERY_* name the shipped environment file mentions is one
/// the binary reads (its --help lists each flag's variable).
#[test]
fn the_environment_file_names_only_real_settings() {
    let help = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let file = read("deploy/systemd/nats-delivery-exporter.env");
    let mut names = 0;
    for line in file.lines() {
        let setting = line.trim_start_matches('#');
        let Some((name, _)) = setting.split_once('=') else {
            continue;
        };
        if !name.starts_with("NATS_DELIVERY_") || name.contains(' ') {
            continue;
        }
        names += 1;
        // NATS_DELIVERY_LOG is read by the logger, not by a flag.
        assert!(
            name == "NATS_DELIVERY_LOG" || help.contains(&format!("[env: {name}")),
            "{name} is not a setting of the binary"
        );
    }
    assert!(names >= 10, "only {names} settings documented");
}

/// The unit keeps the hardening it promises (systemd-analyze verifies it
/// after installation, in the test above).
#[test]
fn the_unit_is_hardened_and_reads_the_environment_file() {
    let unit = read("deploy/systemd/nats-delivery-exporter.service");
    for line in [
        // Flags passed through, as Debian's prometheus-node-exporter takes them.
        "ExecStart=/usr/bin/nats-delivery-exporter $ARGS",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "EnvironmentFile=-/etc/default/nats-delivery-exporter",
        "Restart=on-failure",
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=",
    ] {
        assert!(unit.lines().any(|l| l == line), "missing: {line}");
    }
}
