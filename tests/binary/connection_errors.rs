//! A NATS connection that cannot be made is told in one line naming the
//! account, the servers and the cause, and the line is not repeated while
//! the client keeps retrying.

use std::process::{Command, Stdio};
use std::time::Duration;

use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// Connection attempts `server` refuses before the log is read: each of
/// the exporter's retrying connections has been refused several times.
const REFUSALS: usize = 10;

/// Connections `server` closed other than at the client's request (a
/// refused login, a failed TLS handshake), from its closed list.
fn refused(server: &NatsServer) -> usize {
    let connz =
        crate::common::monitor_json(&server.monitor_url(), "connz?state=closed&limit=10000");
    let closed = connz["connections"].as_array().expect("closed connections");
    closed
        .iter()
        .filter(|c| c["reason"] != "Client Closed")
        .count()
}

/// Runs the binary with `flags` against `server` until the server has
/// refused [`REFUSALS`] connection attempts, and returns its log lines
/// about NATS connections.
fn nats_log_lines(server: &NatsServer, flags: &[String]) -> Vec<String> {
    let port = nats_test_server::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--advisories"])
        .args(flags)
        .env_remove("NATS_DELIVERY_LOG")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut log);
        log
    });
    let refusals = Wait::secs(format!("{REFUSALS} connection attempts refused"), 60)
        .every(Duration::from_millis(100))
        .try_until_blocking(|| {
            let n = refused(server);
            (n >= REFUSALS).then_some(()).ok_or(n)
        });
    let _ = child.kill();
    let _ = child.wait();
    let log = reader.join().unwrap();
    if let Err(n) = refusals {
        panic!("{n} of {REFUSALS} connection attempts refused; log:\n{log}");
    }
    log.lines()
        .filter(|l| l.contains("NATS") || l.contains("nats"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_wrong_ca_is_named_once_with_account_server_and_cause() {
    let (ours, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    nats_test_server::tls::make_certs(ours.path());
    nats_test_server::tls::make_certs(theirs.path());
    let p = |d: &tempfile::TempDir, f: &str| d.path().join(f).display().to_string();
    let server = NatsServer::builder()
        .config(&format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true }}",
            p(&theirs, "server.pem"),
            p(&theirs, "server.key"),
            p(&theirs, "ca.pem"),
        ))
        .start();
    let lines = nats_log_lines(
        &server,
        &[
            "--nats-servers".into(),
            server.client_url(),
            "--nats-tls-ca".into(),
            p(&ours, "ca.pem"),
            "--nats-account-name".into(),
            "APP".into(),
        ],
    );
    let failures: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("NATS connection failed"))
        .collect();
    // One line per connection (the advisory listener's, the short
    // account-name check's, the timestamp reader's), though each retries
    // many times meanwhile.
    for purpose in ["advisories", "account-check", "timestamps"] {
        let own: Vec<_> = failures
            .iter()
            .filter(|l| l.contains(&format!("purpose={purpose} ")))
            .collect();
        assert!(own.len() <= 1, "{purpose}: {lines:#?}");
    }
    assert!(!failures.is_empty(), "{lines:#?}");
    for line in &failures {
        assert!(line.contains("account=APP"), "{line}");
        assert!(line.contains(&server.client_url()), "{line}");
        assert!(
            line.contains("invalid peer certificate"),
            "the cause is not named: {line}"
        );
    }
    assert!(
        !lines.iter().any(|l| l.contains("nats: IO error")),
        "{lines:#?}"
    );
}

#[test]
fn a_rejected_password_names_its_account() {
    let server = NatsServer::builder()
        .config(
            "accounts { A { users: [ { user: a, password: a } ] }, B { users: [ { user: b, password: b } ] } }",
        )
        .start();
    let lines = nats_log_lines(
        &server,
        &[
            "--nats-servers".into(),
            server.client_url(),
            "--nats-account".into(),
            "A=user:a:wrong,B=user:b:wrong".into(),
        ],
    );
    let failures: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("NATS connection failed"))
        .collect();
    for account in ["A", "B"] {
        let own: Vec<_> = failures
            .iter()
            .filter(|l| l.contains(&format!("account={account} ")))
            .collect();
        // The listener's connection, at most the account-name check's and,
        // in the first account, the timestamp reader's: one line each,
        // though each retries many times meanwhile.
        assert!(
            (1..=3).contains(&own.len()),
            "account {account}: {lines:#?}"
        );
        assert!(own.iter().all(|l| l.contains("authorization violation")));
    }
    assert_eq!(
        failures.len(),
        failures.iter().filter(|l| l.contains("account=")).count()
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("authorization violation") && !l.contains("account=")),
        "{lines:#?}"
    );
}

#[test]
fn a_missing_client_certificate_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let p = |f: &str| dir.path().join(f).display().to_string();
    let server = NatsServer::builder()
        .config(&format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true }}",
            p("server.pem"),
            p("server.key"),
            p("ca.pem"),
        ))
        .start();
    let lines = nats_log_lines(
        &server,
        &[
            "--nats-servers".into(),
            server.client_url(),
            "--nats-tls-ca".into(),
            p("ca.pem"),
        ],
    );
    let failures: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("NATS connection failed"))
        .collect();
    // One line per connection (listener, account-name check, timestamp
    // reader), though each retries many times meanwhile.
    assert!((1..=3).contains(&failures.len()), "{lines:#?}");
    for line in &failures {
        assert!(line.contains("account=$G"), "{line}");
        assert!(line.contains(&server.client_url()), "{line}");
        // 2.10+ sends the alert CertificateRequired; 2.9 sends BadCertificate,
        // and the exporter adds that it gave none.
        assert!(
            line.contains("CertificateRequired")
                || (line.contains("BadCertificate")
                    && line.contains("no client certificate was given")),
            "the cause is not named: {line}"
        );
    }
}
