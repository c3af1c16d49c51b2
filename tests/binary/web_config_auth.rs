//! Which paths basic authentication and the rate limit of the web
//! configuration file guard: every one but `/healthz`, which probes ask
//! without credentials.

use std::time::Duration;

use crate::web_support::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_probes_without_credentials_and_the_rest_asks_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("scrape-pw", 4).unwrap();
    // A burst of 4 in an hour: the open path must outlast it.
    let e = start(
        dir.path(),
        &format!("basic_auth_users:\n  prom: {hash}\nrate_limit:\n  interval: 1h\n  burst: 4\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"),
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", e.port);
    for _ in 0..6 {
        let r = http.get(url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200, "/healthz without credentials");
        assert_eq!(r.headers()["x-frame-options"], "deny");
        assert_eq!(r.text().await.unwrap(), "ok\n");
    }
    // The rest asks for credentials (4 requests: the burst).
    for path in ["/metrics", "/"] {
        let r = http.get(url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} without credentials");
        assert_eq!(r.headers()["www-authenticate"], "Basic");
        let r = http
            .get(url(path))
            .basic_auth("prom", Some("scrape-pw"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path} with credentials");
    }
    // Verified requests spend a bucket of their own: 2 of its 4 are gone.
    for expected in [200, 200, 429] {
        let r = http
            .get(url("/metrics"))
            .basic_auth("prom", Some("scrape-pw"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), expected, "verified");
    }
    // Unverified ones spend their address's: the two 401s and the first
    // verified request's check (its credentials were not cached yet).
    for expected in [401, 429] {
        let r = http.get(url("/metrics")).send().await.unwrap();
        assert_eq!(r.status(), expected, "unverified");
    }
    let r = http.get(url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// A client of the exporter's port from a loopback address of its own
/// (Linux answers on all of 127.0.0.0/8), as a host of its own would be.
fn from(address: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .local_address(std::net::IpAddr::from(address))
        .build()
        .unwrap()
}

/// A flood without credentials and with wrong ones, from another address,
/// spends its own bucket only: every scrape with the password still gets
/// 200 (one bucket for all used to answer each of them 429).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_without_the_password_never_refuses_the_scraper() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("scrape-pw", 4).unwrap();
    let e = start(
        dir.path(),
        &format!("basic_auth_users:\n  prom: {hash}\nrate_limit:\n  interval: 1h\n  burst: 5\n"),
    );
    let url = format!("http://127.0.0.1:{}/metrics", e.port);
    let (flood, scraper) = (from([127, 0, 0, 2]), from([127, 0, 0, 3]));
    let attempt = |i: usize| {
        let request = flood.get(&url);
        match i % 2 {
            0 => request,
            _ => request.basic_auth("prom", Some(format!("guess-{i}"))),
        }
    };
    // First the flood spends the bucket it can reach: 5 tries, then 429.
    let mut statuses = Vec::new();
    for i in 0..20 {
        statuses.push(attempt(i).send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses[..5], [401; 5]);
    assert_eq!(statuses[5..], [429; 15]);
    // Then it goes on beside the scraper.
    let flooding = tokio::spawn({
        let attempts: Vec<_> = (20..220).map(attempt).collect();
        async move {
            let mut statuses = Vec::new();
            for a in attempts {
                statuses.push(a.send().await.unwrap().status().as_u16());
            }
            statuses
        }
    });
    for n in 0..5 {
        let r = scraper
            .get(&url)
            .basic_auth("prom", Some("scrape-pw"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "scrape {n}");
    }
    assert!(flooding.await.unwrap().iter().all(|s| *s == 429));
}

/// Wrong passwords with no rate limit, many at once: they are never cached,
/// so the scraper's verified credentials stay and each of its scrapes is
/// answered from the cache (no bcrypt); bcrypt checks past four running or
/// waiting are refused with 429 rather than queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_cannot_push_the_scraper_out() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("scrape-pw", 6).unwrap();
    let e = start(dir.path(), &format!("basic_auth_users:\n  prom: {hash}\n"));
    let url = format!("http://127.0.0.1:{}/metrics", e.port);
    let http = from([127, 0, 0, 1]);
    let scrape = || http.get(&url).basic_auth("prom", Some("scrape-pw")).send();
    assert_eq!(scrape().await.unwrap().status(), 200);
    let floods: Vec<_> = (0..16)
        .map(|t| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for i in 0..20 {
                    let guess = format!("guess-{t}-{i}");
                    let r = http.get(&url).basic_auth("prom", Some(guess)).send();
                    statuses.push(r.await.unwrap().status().as_u16());
                }
                statuses
            })
        })
        .collect();
    for n in 0..10 {
        assert_eq!(scrape().await.unwrap().status(), 200, "scrape {n}");
    }
    let mut refused = 0;
    for flood in floods {
        let statuses = flood.await.unwrap();
        assert!(
            statuses.iter().all(|s| [401, 429].contains(s)),
            "{statuses:?}"
        );
        refused += statuses.len();
    }
    assert_eq!(refused, 320);
}
