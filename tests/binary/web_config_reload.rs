//! The web configuration file read again while the exporter runs: a rotated
//! certificate served without a restart, a broken file keeping the last good
//! configuration, SIGHUP; and basic authentication's cost for unknown users.
use std::time::{Duration, Instant};

use crate::web_support::{client, get, start, TLS};

use nats_test_server::wait::{Text, Wait};
use tokio_rustls::rustls::version::TLS13;

/// Replaces `name` in `dir` by `new`'s content (a new inode, as a rotation
/// by rename or a Kubernetes secret update gives).
fn replace(dir: &std::path::Path, name: &str, new: &str) {
    std::fs::copy(dir.join(new), dir.join(format!("{name}.tmp"))).unwrap();
    std::fs::rename(dir.join(format!("{name}.tmp")), dir.join(name)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_and_a_broken_file_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    nats_test_server::tls::make_certs(p);
    let server_ext = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
    nats_test_server::tls::sign(p, "rotated", server_ext);
    let e = start(p, TLS);
    let c = client(p, &[&TLS13], &[], None);
    let first = get(&c, e.port, "/healthz").await.unwrap().server_cert;
    let rotated_pem = std::fs::read(p.join("rotated.pem")).unwrap();
    let rotated = tokio_rustls::rustls::pki_types::pem::PemObject::from_pem_slice(&rotated_pem)
        .map(|c: tokio_rustls::rustls::pki_types::CertificateDer| c.to_vec())
        .unwrap();
    assert_ne!(first, rotated);
    replace(p, "server.key", "rotated.key");
    replace(p, "server.pem", "rotated.pem");
    let served = get(&c, e.port, "/healthz").await.unwrap();
    assert_eq!(
        served.server_cert, rotated,
        "the new certificate, no restart"
    );
    assert!(
        served.answer.starts_with("HTTP/1.1 200"),
        "{}",
        served.answer
    );

    // A broken file: the last good configuration stays, said in one line.
    std::fs::write(p.join("web.yml"), "tls_server_config:\n  cert_file: [\n").unwrap();
    for _ in 0..3 {
        let seen = get(&c, e.port, "/healthz").await.unwrap();
        assert_eq!(seen.server_cert, rotated);
    }
    let warnings: Vec<String> = e
        .log()
        .lines()
        .filter(|l| l.contains("not reloaded"))
        .map(str::to_string)
        .collect();
    assert_eq!(warnings.len(), 1, "{}", e.log());
    assert!(warnings[0].contains("level=warn"), "{}", warnings[0]);
    assert!(warnings[0].contains("last good"), "{}", warnings[0]);
    // A key that does not match the certificate is broken too.
    std::fs::write(p.join("web.yml"), TLS).unwrap();
    replace(p, "server.key", "ca.key");
    let seen = get(&c, e.port, "/healthz").await.unwrap();
    assert_eq!(seen.server_cert, rotated);
    assert_eq!(e.log().matches("not reloaded").count(), 2, "{}", e.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_without_ending_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    nats_test_server::tls::make_certs(p);
    let web = |policy: &str| {
        format!("{TLS}http_server_config:\n  headers:\n    Content-Security-Policy: \"{policy}\"\n")
    };
    let mut e = start(p, &web("default-src 'aaaa'"));
    let c = client(p, &[&TLS13], &[], None);
    let csp = |answer: &str| {
        answer.lines().find_map(|l| {
            l.to_lowercase()
                .strip_prefix("content-security-policy: ")
                .map(str::to_string)
        })
    };
    let seen = get(&c, e.port, "/healthz").await.unwrap();
    assert_eq!(csp(&seen.answer).as_deref(), Some("default-src 'aaaa'"));
    // The same size, the same inode, the old modification time: a change
    // only SIGHUP makes the exporter read.
    let file = p.join("web.yml");
    let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
    std::fs::write(&file, web("default-src 'bbbb'")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    let seen = get(&c, e.port, "/healthz").await.unwrap();
    assert_eq!(csp(&seen.answer).as_deref(), Some("default-src 'aaaa'"));
    e.signal("HUP");
    Wait::secs("SIGHUP to reload", 20)
        .until_async(async || {
            let seen = get(&c, e.port, "/healthz").await.unwrap();
            match csp(&seen.answer).as_deref() == Some("default-src 'bbbb'") {
                true => Ok(()),
                false => Err(Text(e.log())),
            }
        })
        .await;
    assert!(
        e.child.try_wait().unwrap().is_none(),
        "SIGHUP ended the exporter"
    );
    assert!(
        e.log()
            .lines()
            .any(|l| l.contains("web configuration reloaded") && l.contains("SIGHUP")),
        "{}",
        e.log()
    );
    // SIGTERM still ends it cleanly.
    e.signal("TERM");
    let status =
        Wait::secs("an exit after SIGTERM", 20).until_blocking(|| e.child.try_wait().unwrap());
    assert_eq!(status.code(), Some(0), "{}", e.log());
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// An unknown user costs a bcrypt run as a wrong password does (no user
/// enumeration by timing); a known good password is answered from the
/// cache. Ratios of medians measured in the same run, interleaved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_user_costs_as_much_as_a_wrong_password() {
    let dir = tempfile::tempdir().unwrap();
    // Cost 8: some 0.1 s per check in a debug build, well above a request's own cost.
    let hash = bcrypt::hash("right", 8).unwrap();
    let e = start(dir.path(), &format!("basic_auth_users:\n  prom: {hash}\n"));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // The landing page: /healthz asks for no credentials.
    let url = format!("http://127.0.0.1:{}/", e.port);
    let timed = |user: String, password: String| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let t = Instant::now();
            let status = http
                .get(&url)
                .basic_auth(user, Some(password))
                .send()
                .await
                .unwrap()
                .status();
            (t.elapsed(), status.as_u16())
        }
    };
    assert_eq!(timed("prom".into(), "right".into()).await.1, 200);
    let (mut wrong, mut unknown, mut cached) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..9 {
        // A new password each time: nothing cached.
        let (t, status) = timed("prom".into(), format!("wrong-{i}")).await;
        assert_eq!(status, 401);
        wrong.push(t);
        let (t, status) = timed(format!("nobody-{i}"), format!("wrong-{i}")).await;
        assert_eq!(status, 401);
        unknown.push(t);
        let (t, status) = timed("prom".into(), "right".into()).await;
        assert_eq!(status, 200);
        cached.push(t);
    }
    let (wrong, unknown, cached) = (median(wrong), median(unknown), median(cached));
    eprintln!("medians: wrong password {wrong:?}, unknown user {unknown:?}, cached {cached:?}");
    let ratio = unknown.as_secs_f64() / wrong.as_secs_f64();
    assert!(
        (0.5..2.0).contains(&ratio),
        "unknown user {unknown:?}, wrong password {wrong:?}"
    );
    assert!(
        cached * 4 < wrong,
        "cached {cached:?} against an uncached check {wrong:?}"
    );
}
