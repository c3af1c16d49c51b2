//! The binary's command line: a wrong flag or value exits with status 2 and
//! one line saying what is wrong; --help and --version succeed.
use nats_test_server::wait::Wait;
use std::process::Command;

/// Runs the binary; one that is still running after 15 s (it accepted the
/// flags and is serving) is stopped and reported with code -1.
fn run(args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(args)
        .env_remove("NATS_DELIVERY_MONITOR_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the exporter");
    // Not ended by itself within 15 s: killed, and what it wrote is read.
    let _ = Wait::secs("the exporter to exit", 15)
        .every(std::time::Duration::from_millis(20))
        .try_until_blocking(|| child.try_wait().unwrap());
    let _ = child.kill();
    let out = child.wait_with_output().expect("the exporter's output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn wrong_flags_exit_2_with_one_line() {
    for (args, says) in [
        (
            vec!["--monitor-url", "nats://127.0.0.1:4222"],
            "http:// or https://",
        ),
        (vec!["--timeout", "soon"], "not a duration"),
        (vec!["--timeout", "0s"], "greater than zero"),
        (vec!["--sources", "leafz"], "leafz"),
        (vec!["--listen", "localhost"], "--web.listen-address"),
        (
            vec!["--web.listen-address", "localhost"],
            "--web.listen-address",
        ),
        (vec!["--log.format", "text"], "--log.format"),
        (vec!["--log.level", "trace"], "--log.level"),
        (
            vec!["--web.telemetry-path", "metrics"],
            "--web.telemetry-path",
        ),
        (vec!["--connz-top", "0"], "--connz-top"),
        (vec!["--no-such-flag"], "--no-such-flag"),
        (vec!["--include-stream", "orders("], "--include-stream"),
        (vec!["--exclude-consumer", "*tmp"], "--exclude-consumer"),
        (
            vec!["--include-account", "[a-"],
            "not a valid regular expression",
        ),
        (
            vec![
                "--consumer-opt-in-metrics",
                "nats_delivery_consumer_pending_messages",
            ],
            "not an opt-in consumer metric",
        ),
        (
            vec!["--consumer-status-series", "some"],
            "--consumer-status-series",
        ),
        (vec!["--max-kept-size", "0"], "greater than zero"),
        (
            vec!["--jsz-metadata-labels", "team,Team"],
            "\"team\" and \"Team\" both become the label metadata_team",
        ),
    ] {
        let (code, _, stderr) = run(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn help_and_version_succeed() {
    let (code, stdout, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--monitor-url",
        "--web.listen-address",
        "--listen",
        "--web.telemetry-path",
        "--log.level",
        "--log.format",
        "--timeout",
        "--sources",
        "NATS_DELIVERY_MONITOR_URL",
    ] {
        assert!(stdout.contains(flag), "--help lacks {flag}");
    }
    let (code, stdout, _) = run(&["--version"]);
    assert_eq!(code, 0);
    let version = concat!(
        "nats-delivery-exporter ",
        env!("CARGO_PKG_VERSION"),
        " (revision "
    );
    assert!(stdout.starts_with(version), "{stdout}");
}

#[test]
fn a_busy_listen_address_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, _, stderr) = run(&["--listen", &addr]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("--web.listen-address: cannot listen on {addr}")),
        "{stderr}"
    );
}

/// Every value that cannot work is refused at start, before anything
/// connects: status 2, one line, naming the flag.
fn assert_refused(table: Vec<(Vec<&str>, &str, &str)>) {
    for (mut args, flag, says) in table {
        args.extend(["--listen", "127.0.0.1:0"]);
        let (code, _, stderr) = run(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{args:?} does not name {flag}: {stderr}"
        );
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn unusable_names_and_urls_are_refused_at_start() {
    assert_refused(vec![
        (
            vec!["--timeout", "99999999999999999999s"],
            "--timeout",
            "too long",
        ),
        (
            vec!["--advisories-stream", "bad name.with.dots"],
            "--advisories-stream",
            "not a valid NATS name",
        ),
        (
            vec!["--advisories-consumer", "a.b"],
            "--advisories-consumer",
            "not a valid NATS name",
        ),
        (
            vec!["--dead-letter-stream", "x>"],
            "--dead-letter-stream",
            "not a valid NATS name",
        ),
        (
            vec!["--nats-servers", "not a url"],
            "--nats-servers",
            "not a NATS URL",
        ),
        (
            vec!["--nats-servers", "http://h:4222"],
            "--nats-servers",
            "scheme",
        ),
        (
            vec!["--consumer-status-window", "five minutes"],
            "--consumer-status-window",
            "not a duration",
        ),
        (
            vec!["--consumer-status-window", "5 weeks"],
            "--consumer-status-window",
            "unknown unit",
        ),
        (
            vec!["--consumer-timestamp-reads", "many"],
            "--consumer-timestamp-reads",
            "invalid digit",
        ),
        (
            vec!["--advisories-buffer", "0"],
            "--advisories-buffer",
            "at least 1",
        ),
        (
            vec!["--advisories-max-series", "0"],
            "--advisories-max-series",
            "at least 1",
        ),
    ]);
}

#[test]
fn unusable_files_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("client.pem");
    std::fs::write(
        &pem,
        "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let not_pem = dir.path().join("notes.txt");
    std::fs::write(&not_pem, "hello").unwrap();
    let missing = dir.path().join("missing.creds");
    let (pem, not_pem, missing) = (
        pem.to_str().unwrap(),
        not_pem.to_str().unwrap(),
        missing.to_str().unwrap(),
    );
    let account_creds = format!("A=creds:{missing}");
    assert_refused(vec![
        (
            vec!["--nats-creds-file", missing],
            "--nats-creds-file",
            "cannot read",
        ),
        (
            vec!["--nats-account", &account_creds],
            "--nats-account",
            "cannot read",
        ),
        (
            vec!["--system-account", &account_creds[2..]],
            "--system-account",
            "cannot read",
        ),
        (
            vec!["--nats-creds-file", not_pem],
            "--nats-creds-file",
            "not a NATS .creds file",
        ),
        (
            vec!["--nats-nkey-seed-file", not_pem],
            "--nats-nkey-seed-file",
            "NKey",
        ),
        (
            vec!["--nats-tls-ca", not_pem],
            "--nats-tls-ca",
            "not a PEM file",
        ),
        (
            vec!["--monitor-tls-ca", missing],
            "--monitor-tls-ca",
            "cannot read",
        ),
        (
            vec![
                "--nats-servers",
                "nats://127.0.0.1:1",
                "--advisories",
                "--advisories-stream",
                "ADV",
                "--advisories-consumer",
                "exporter=1",
            ],
            "--advisories-totals-bucket",
            "name the bucket",
        ),
        (vec!["--nats-tls-cert", pem], "--nats-tls-key", "required"),
    ]);
}

#[test]
fn unusable_durations_and_settings_are_refused_at_start() {
    assert_refused(vec![
        (
            vec!["--advisories-replicas", "9"],
            "--advisories-replicas",
            "1..=5",
        ),
        (
            vec!["--advisories-totals-bucket", "totals.v1"],
            "--advisories-totals-bucket",
            "not a valid bucket name",
        ),
        (
            vec!["--max-reply-size", "0"],
            "--max-reply-size",
            "greater than zero",
        ),
        (
            vec!["--max-reply-size", "lots"],
            "--max-reply-size",
            "not a size",
        ),
        (
            vec!["--shutdown-timeout", "0s"],
            "--shutdown-timeout",
            "greater than zero",
        ),
        (
            vec!["--write-timeout", "soon"],
            "--write-timeout",
            "not a duration",
        ),
        (
            vec!["--system-account-polling"],
            "--system-account-polling",
            "needs the system account's credentials",
        ),
        (
            vec![
                "--system-account-polling",
                "--system-account",
                "user:sys:pw",
                "--monitor-url",
                "http://127.0.0.1:1",
            ],
            "--monitor-url",
            "not read with --system-account-polling",
        ),
        (
            vec!["--system-expected-servers", "many"],
            "--system-expected-servers",
            "invalid digit",
        ),
        (
            vec!["--stream-lost-reads", "5"],
            "--stream-lost-reads",
            "needs --nats-servers",
        ),
        (
            vec!["--system-survey-gap", "a while"],
            "--system-survey-gap",
            "not a duration",
        ),
        (
            vec!["--monitor-url", "http://a:1/x,http://a:1/x/"],
            "--monitor-url",
            "given twice",
        ),
    ]);
}
