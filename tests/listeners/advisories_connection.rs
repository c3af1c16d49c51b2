//! The advisory listener logs in every usual way: token, NKey seed file,
//! user/password over mutual TLS with a custom CA. Each case counts a real
//! advisory-format message exactly, and a wrong credential keeps it down.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use nats_delivery_exporter::{AccountListener, AdvisoryMetrics, Auth, NatsArgs};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

/// A test-only NKey user (seed and public key), generated once for this file.
const NKEY_SEED: &str = "SUAGTK4QW4AAL44IW2UNRW57TMXFENCCNGZGBARKBMRZVA6FV5JZ5ECZBQ";
const NKEY_PUBLIC: &str = "UDVKNIFMXRWDWAVLS2TGKYNAEVORSN3L2ZFGGIPXFUS6E2PIYYELZNWK";

/// A test-only operator, account CREDS and user, generated once for this file
/// (JWTs signed with throwaway keys; no expiry).
const OPERATOR_JWT: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJpYXQiOjE3NjQ0NTAwMDAsImlzcyI6Ik9ER0VMM05ZR0hXSE82TVhNVldVTTZMVUlGRVEzWlJBNkZXTFJVTkpLNzUzSjZVTlJKNFdEN0NQIiwianRpIjoiMjM0M0lZMllWSkNCUkhTQ0RFQ0RKNEZSNlhUTDRQNVNXM09CR1dGS1RCQ1MzVUZPSFFUQSIsIm5hbWUiOiJ0ZXN0LW9wZXJhdG9yIiwibmF0cyI6eyJ0eXBlIjoib3BlcmF0b3IiLCJ2ZXJzaW9uIjoyfSwic3ViIjoiT0RHRUwzTllHSFdITzZNWE1WV1VNNkxVSUZFUTNaUkE2RldMUlVOSks3NTNKNlVOUko0V0Q3Q1AifQ.1jIjaQLUq2K85DYtzBR007mu_UUVr1lsJYSOgpc09FC04ZIii1Lug-6CKkBSkGJc7Cp3CG2iVNFg4CaIz172AA";
const CREDS_ACCOUNT_PUBLIC: &str = "AB25HHXICNOGMRZYYLHAEVSQOYYTTJYGA3ZIIO5IB2J2N6PESJYO7QNC";
const CREDS_ACCOUNT_JWT: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJpYXQiOjE3NjQ0NTAwMDAsImlzcyI6Ik9ER0VMM05ZR0hXSE82TVhNVldVTTZMVUlGRVEzWlJBNkZXTFJVTkpLNzUzSjZVTlJKNFdEN0NQIiwianRpIjoiTTREUzRHVzM1RkRVMlFCMjJVVUJRUERMTU9TUFQ3MkZQSUFIWlZPU1hWTjVGT1ozRFdMQSIsIm5hbWUiOiJDUkVEUyIsIm5hdHMiOnsiZGVmYXVsdF9wZXJtaXNzaW9ucyI6eyJwdWIiOnt9LCJzdWIiOnt9fSwibGltaXRzIjp7ImNvbm4iOi0xLCJkYXRhIjotMSwiZXhwb3J0cyI6LTEsImltcG9ydHMiOi0xLCJsZWFmIjotMSwicGF5bG9hZCI6LTEsInN1YnMiOi0xLCJ3aWxkY2FyZHMiOnRydWV9LCJ0eXBlIjoiYWNjb3VudCIsInZlcnNpb24iOjJ9LCJzdWIiOiJBQjI1SEhYSUNOT0dNUlpZWUxIQUVWU1FPWVlUVEpZR0EzWklJTzVJQjJKMk42UEVTSllPN1FOQyJ9.55cpWMntV9xSL8EncwsgWtk8aw17zq453TRdAhSsyU4yk9mBgHpE-KsTaMkwgPUB58Ss_YGyFKHRMz4JePrpBg";
const CREDS_USER_JWT: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJpYXQiOjE3NjQ0NTAwMDAsImlzcyI6IkFCMjVISFhJQ05PR01SWllZTEhBRVZTUU9ZWVRUSllHQTNaSUlPNUlCMkoyTjZQRVNKWU83UU5DIiwianRpIjoiWTM3TVE3N0xTQVVLN0RVV0JZN0o2NjJKTk1KNlRRQUJPWUdGSVFQNUpUS09VSlhXRkJMUSIsIm5hbWUiOiJleHBvcnRlciIsIm5hdHMiOnsiZGF0YSI6LTEsInBheWxvYWQiOi0xLCJwdWIiOnt9LCJzdWIiOnt9LCJzdWJzIjotMSwidHlwZSI6InVzZXIiLCJ2ZXJzaW9uIjoyfSwic3ViIjoiVUNOSUdaUE5HVTUzVUxOWFlFTDREWDRMSjJRS1dEV0dTVUtYTDRXNE1HRE9CN1FPVTdMUEdGTVoifQ.hXo5wrMwJdQFVqGyJz0wbjyCYzE1tP_vkYMjTXF21vTQmFENgqGhMIuCON-GrQxx5z59Mco_MjlkD2-3EY2HBA";
const CREDS_USER_SEED: &str = "SUAIJYH4E6ZVT37JRSOYKUDZ74GCYVE3JRBMSGWV26MSOYHKIE2NGEOK34";

const ADVISORY: &str = r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"c1","timestamp":"2026-11-29T00:00:00Z","stream":"S","consumer":"C","stream_seq":1,"deliveries":2}"#;

struct Started {
    registry: Registry,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

fn start(nats: NatsArgs, account: &str, auth: Auth) -> Started {
    let mut registry = Registry::default();
    let metrics = AdvisoryMetrics::register(&mut registry);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let listener = AccountListener {
        nats,
        account: account.into(),
        auth,
        args: advisory_args(&[]),
        metrics,
    };
    Started {
        registry,
        stop,
        task: tokio::spawn(listener.run(rx)),
    }
}

impl Started {
    async fn finish(self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

/// Waits for the listener, publishes one advisory with `publisher`, expects exactly 1.
async fn counts_one(s: &Started, account: &str, publisher: async_nats::Client) {
    let acc = [("account", account)];
    wait_value(
        &s.registry,
        "nats_delivery_advisory_listener_up",
        &acc,
        1.0,
        20,
    )
    .await;
    // Up says the listener subscribed; a probe of a type no one counts,
    // received, says its subscription delivers: the listener's flush after
    // subscribing does not wait for the server (async-nats), so `up` can
    // come before the server took its subscriptions.
    let received = "nats_delivery_advisories_received_total";
    Wait::secs("a probe received by the listener", 20)
        .every(std::time::Duration::from_millis(200))
        .until_async(async || {
            let got = exact(&encode(&s.registry), received, &acc).unwrap_or(0.0);
            if got >= 1.0 {
                return Ok(());
            }
            let probe = r#"{"type":"io.nats.test.marker","stream":"MARK","consumer":"MARK"}"#;
            publisher
                .publish(MAX_DELIVERIES_SUBJECT, probe.into())
                .await
                .unwrap();
            publisher.flush().await.unwrap();
            Err(got)
        })
        .await;
    publisher
        .publish(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C",
            ADVISORY.into(),
        )
        .await
        .unwrap();
    publisher.flush().await.unwrap();
    let labels = [("account", account), ("stream", "S"), ("consumer", "C")];
    wait_value(
        &s.registry,
        "nats_delivery_jetstream_max_deliveries_total",
        &labels,
        1.0,
        10,
    )
    .await;
}

/// Seconds a server waits for a client's CONNECT: its 2 s default ran out
/// for the test's own client on a loaded machine ("Authentication
/// Timeout"), before any credential was checked.
const AUTH_TIMEOUT: u32 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_login_and_a_wrong_token_stays_down() {
    let s = NatsServer::builder()
        .config(&format!(
            "authorization {{ token: \"tok-secret\", timeout: {AUTH_TIMEOUT} }}"
        ))
        .start();
    let nats = NatsArgs::from_flags([
        "--nats-servers",
        &s.client_url(),
        "--nats-token",
        "tok-secret",
    ])
    .unwrap();
    let auth = nats.resolved_accounts().unwrap().remove(0);
    assert_eq!(auth.0, "$G");
    let good = start(nats.clone(), &auth.0, auth.1);
    let publisher = async_nats::ConnectOptions::with_token("tok-secret".into())
        .connect(s.client_url())
        .await
        .unwrap();
    counts_one(&good, "$G", publisher).await;
    good.finish().await;

    let bad = start(nats, "$G", "token:wrong-token".parse().unwrap());
    // Refused twice: the listener tried, was told, and tried again.
    wait_refused(&s, 2).await;
    let text = encode(&bad.registry);
    assert_eq!(
        exact(
            &text,
            "nats_delivery_advisory_listener_up",
            &[("account", "$G")]
        ),
        Some(0.0)
    );
    assert!(!text.contains("wrong-token") && !text.contains("tok-secret"));
    bad.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nkey_seed_file_login() {
    let s = NatsServer::builder()
        .config(&format!(
            "accounts {{ KEYS {{ users: [ {{ nkey: {NKEY_PUBLIC} }} ] }} }}\nauthorization {{ timeout: {AUTH_TIMEOUT} }}"
        ))
        .start();
    let dir = tempfile::tempdir().unwrap();
    let seed_file = dir.path().join("user.nk");
    std::fs::write(&seed_file, format!("{NKEY_SEED}\n")).unwrap();
    let nats = NatsArgs::from_flags([
        "--nats-servers".to_string(),
        s.client_url(),
        "--nats-account".to_string(),
        format!("KEYS=nkey:{}", seed_file.display()),
    ])
    .unwrap();
    let (account, auth) = nats.resolved_accounts().unwrap().remove(0);
    assert_eq!(account, "KEYS");
    let started = start(nats, &account, auth);
    let publisher = async_nats::ConnectOptions::with_nkey(NKEY_SEED.into())
        .connect(s.client_url())
        .await
        .unwrap();
    counts_one(&started, "KEYS", publisher).await;
    started.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_custom_ca() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let p = |f: &str| dir.path().join(f).display().to_string();
    let s = NatsServer::builder()
        .config(&format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true }}\n{}",
            p("server.pem"),
            p("server.key"),
            p("ca.pem"),
            ACCOUNTS
        ))
        .start();
    let nats = NatsArgs::from_flags([
        "--nats-servers".to_string(),
        s.client_url(),
        "--nats-tls-ca".to_string(),
        p("ca.pem"),
        "--nats-tls-cert".to_string(),
        p("client.pem"),
        "--nats-tls-key".to_string(),
        p("client.key"),
        "--nats-account".to_string(),
        "APP=user:app:app-secret".to_string(),
    ])
    .unwrap();
    let (account, auth) = nats.resolved_accounts().unwrap().remove(0);
    let started = start(nats, &account, auth.clone());
    // The test's own TLS client needs the process's rustls crypto provider,
    // which the listener task (running beside it) may not have chosen yet.
    let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
    let publisher =
        async_nats::ConnectOptions::with_user_and_password("app".into(), "app-secret".into())
            .add_root_certificates(p("ca.pem").into())
            .add_client_certificate(p("client.pem").into(), p("client.key").into())
            .connect(s.client_url())
            .await
            .unwrap();
    counts_one(&started, "APP", publisher).await;
    started.finish().await;

    // Without the client certificate the server refuses: the listener says so.
    let no_cert = NatsArgs::from_flags([
        "--nats-servers".to_string(),
        s.client_url(),
        "--nats-tls-ca".to_string(),
        p("ca.pem"),
    ])
    .unwrap();
    let refused = start(no_cert, "APP", auth);
    wait_refused(&s, 2).await;
    assert_eq!(
        exact(
            &encode(&refused.registry),
            "nats_delivery_advisory_listener_up",
            &[("account", "APP")]
        ),
        Some(0.0)
    );
    refused.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creds_file_login_in_operator_mode() {
    let s = NatsServer::builder()
        .config(&format!(
            "operator: \"{OPERATOR_JWT}\"\nresolver: MEMORY\nresolver_preload: {{ {CREDS_ACCOUNT_PUBLIC}: \"{CREDS_ACCOUNT_JWT}\" }}\nauthorization {{ timeout: {AUTH_TIMEOUT} }}"
        ))
        .start();
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("exporter.creds");
    std::fs::write(
        &creds,
        format!(
            "-----BEGIN NATS USER JWT-----\n{CREDS_USER_JWT}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{CREDS_USER_SEED}\n------END USER NKEY SEED------\n"
        ),
    )
    .unwrap();
    let nats = NatsArgs::from_flags([
        "--nats-servers".to_string(),
        s.client_url(),
        "--nats-creds-file".to_string(),
        creds.display().to_string(),
        "--nats-account-name".to_string(),
        "CREDS".to_string(),
    ])
    .unwrap();
    let (account, auth) = nats.resolved_accounts().unwrap().remove(0);
    assert_eq!(account, "CREDS");
    let started = start(nats, &account, auth);
    let publisher = async_nats::ConnectOptions::with_credentials_file(&creds)
        .await
        .unwrap()
        .connect(s.client_url())
        .await
        .unwrap();
    counts_one(&started, "CREDS", publisher).await;
    started.finish().await;
}

#[test]
fn flags_are_part_of_the_exporters_config_and_never_print_secrets() {
    use clap::Parser;
    let c = nats_delivery_exporter::Config::try_parse_from([
        "nats-delivery-exporter",
        "--advisories",
        "--advisories-stream",
        "ADV",
        "--nats-account",
        "ORDERS=token:tok-zz9",
        "--nats-account",
        "BILLING",
        "--nats-user",
        "exporter",
        "--nats-password",
        "pw-zz8",
        "--system-account",
        "user:sys:pw-zz7",
        "--dead-letter-stream",
        "DLQ",
    ])
    .unwrap();
    assert!(c.advisories.enabled);
    assert_eq!(c.advisories.stream.as_deref(), Some("ADV"));
    assert_eq!(c.advisories.dead_letter_stream.as_deref(), Some("DLQ"));
    let accounts = c.nats.resolved_accounts().unwrap();
    assert_eq!(
        accounts[0],
        ("ORDERS".to_string(), "token:tok-zz9".parse().unwrap())
    );
    assert_eq!(
        accounts[1],
        (
            "BILLING".to_string(),
            "user:exporter:pw-zz8".parse().unwrap()
        )
    );
    let shown = format!("{c:?}");
    for secret in ["tok-zz9", "pw-zz8", "pw-zz7"] {
        assert!(!shown.contains(secret), "{secret} printed: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_is_counted_once_as_connect() {
    let s = server();
    let running = spawn_listener(
        &s,
        "APP",
        "user:app:wrong-password",
        advisory_args(&["--advisories-stream", "ADV"]),
    );
    let registry = &running.registry;
    let kind = [("account", "APP"), ("kind", "connect")];
    wait_value(
        registry,
        "nats_delivery_advisory_listener_errors_total",
        &kind,
        1.0,
        20,
    )
    .await;
    // The client keeps trying in the background: one outage, one count,
    // however many attempts the server refuses.
    wait_refused(&s, 3).await;
    let text = encode(registry);
    assert_eq!(
        exact(&text, "nats_delivery_advisory_listener_errors_total", &kind),
        Some(1.0)
    );
    assert_eq!(
        exact(
            &text,
            "nats_delivery_advisory_listener_up",
            &[("account", "APP")]
        ),
        Some(0.0)
    );
    running.stop().await;
}
