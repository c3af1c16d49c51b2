//! The web configuration file's TLS and HTTP settings, against real TLS
//! clients: every key honoured or refused at start, TLS versions, client
//! SANs, response headers, HTTP/2 through ALPN.
use crate::web_support::{alpn, client, get, refused, start, TLS};

use tokio_rustls::rustls::version::{TLS12, TLS13};

#[test]
fn unknown_keys_and_settings_rustls_lacks_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    for (file, names) in [
        (
            format!("{TLS}  cipher_suite: [TLS_AES_128_GCM_SHA256]\n"),
            "cipher_suite",
        ),
        (
            "basic_auth_user:\n  prom: x\n".to_string(),
            "basic_auth_user",
        ),
        (
            "rate_limit:\n  interval: 1s\n  bursts: 3\n".to_string(),
            "bursts",
        ),
        (
            "http_server_config:\n  header:\n    X-Frame-Options: deny\n".to_string(),
            "header",
        ),
        (
            format!("{TLS}  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n"),
            "TLS_RSA_WITH_AES_128_CBC_SHA",
        ),
        (
            format!("{TLS}  curve_preferences: [CurveP521]\n"),
            "CurveP521",
        ),
        (format!("{TLS}  max_version: TLS11\n"), "max_version"),
        (format!("{TLS}  min_version: TLS14\n"), "TLS14"),
        (
            "http_server_config:\n  headers:\n    Server: x\n".to_string(),
            "'Server'",
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n".to_string(),
            "X-Frame-Options",
        ),
        (
            format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n"),
            "client_ca_file",
        ),
        (
            format!("{TLS}  client_allowed_sans: [a.example]\n"),
            "client_allowed_sans",
        ),
        (
            "basic_auth_users:\n  prom: plain\n".to_string(),
            "user 'prom'",
        ),
    ] {
        let (code, log) = refused(dir.path(), &file);
        assert_eq!(code, Some(2), "{file}: {log}");
        assert_eq!(log.trim().lines().count(), 1, "{file}: {log}");
        assert!(log.contains(names), "{file}: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_refused_under_min_version_tls13() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let e = start(dir.path(), &format!("{TLS}  min_version: TLS13\n"));
    let tls13 = client(dir.path(), &[&TLS13], &[], None);
    let seen = get(&tls13, e.port, "/healthz").await.unwrap();
    assert!(seen.answer.starts_with("HTTP/1.1 200"), "{}", seen.answer);
    let tls12 = client(dir.path(), &[&TLS12], &[], None);
    assert!(get(&tls12, e.port, "/healthz").await.is_err());
    // The default (TLS12 to TLS13) serves both.
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let e = start(dir.path(), TLS);
    let tls12 = client(dir.path(), &[&TLS12], &[], None);
    assert!(get(&tls12, e.port, "/healthz").await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_an_allowed_san_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let p = dir.path();
    nats_test_server::tls::sign(
        p,
        "allowed",
        "subjectAltName=DNS:scraper.example,IP:10.1.2.3\nextendedKeyUsage=clientAuth\n",
    );
    nats_test_server::tls::sign(
        p,
        "other",
        "subjectAltName=DNS:intruder.example\nextendedKeyUsage=clientAuth\n",
    );
    let e = start(
        p,
        &format!("{TLS}  client_ca_file: ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n  client_allowed_sans: [10.1.2.3, prometheus.example]\n"),
    );
    for (cert, accepted) in [("allowed", true), ("other", false), ("client", false)] {
        let c = client(p, &[&TLS13], &[], Some(cert));
        let seen = get(&c, e.port, "/healthz").await;
        assert_eq!(seen.is_ok(), accepted, "{cert}");
        if let Ok(seen) = seen {
            assert!(seen.answer.starts_with("HTTP/1.1 200"), "{}", seen.answer);
        }
    }
    // TLS 1.2 refuses it too (during the handshake there).
    let c = client(p, &[&TLS12], &[], Some("other"));
    assert!(get(&c, e.port, "/healthz").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_headers_are_on_every_answer() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let hash = bcrypt::hash("pw", 4).unwrap();
    let e = start(
        dir.path(),
        &format!("{TLS}http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n    Content-Security-Policy: \"default-src 'none'\"\n    Strict-Transport-Security: \"\"\nbasic_auth_users:\n  prom: {hash}\n"),
    );
    let c = client(dir.path(), &[&TLS13], &[], None);
    // Unauthenticated: a 401, with the headers too (the landing page asks
    // for credentials; /healthz would not).
    let seen = get(&c, e.port, "/").await.unwrap();
    let answer = seen.answer.to_lowercase();
    assert!(answer.starts_with("http/1.1 401"), "{answer}");
    for line in [
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
        "content-security-policy: default-src 'none'",
    ] {
        assert!(answer.contains(line), "{line} in {answer}");
    }
    // Blank means unset.
    assert!(!answer.contains("strict-transport-security"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_is_offered_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let c = client(dir.path(), &[&TLS13], &["h2", "http/1.1"], None);
    let e = start(dir.path(), TLS);
    assert_eq!(alpn(&c, e.port).await.as_deref(), Some(&b"h2"[..]));
    // An HTTP/2 request over it.
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", e.port))
        .await
        .unwrap();
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = c.connect(name, tcp).await.unwrap();
    let (mut h2, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(format!("https://127.0.0.1:{}/healthz", e.port))
        .body(())
        .unwrap();
    let (answer, _) = h2.send_request(request, true).unwrap();
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.version(), http::Version::HTTP_2);
    let mut body = answer.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(text, b"ok\n");
    drop(e);
    let e = start(
        dir.path(),
        &format!("{TLS}http_server_config:\n  http2: false\n"),
    );
    assert_eq!(alpn(&c, e.port).await.as_deref(), Some(&b"http/1.1"[..]));
    let seen = get(&c, e.port, "/healthz").await.unwrap();
    assert!(seen.answer.starts_with("HTTP/1.1 200"), "{}", seen.answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_rate_limit_get_429() {
    let dir = tempfile::tempdir().unwrap();
    let e = start(
        dir.path(),
        "rate_limit:\n  interval: 1h\n  burst: 2\nhttp_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n",
    );
    // The landing page: /healthz is never rate-limited.
    let url = format!("http://127.0.0.1:{}/", e.port);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = reqwest::get(&url).await.unwrap();
        assert_eq!(r.headers()["x-frame-options"], "sameorigin");
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
}
