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
    // The burst is spent for every path but /healthz.
    let r = http
        .get(url("/metrics"))
        .basic_auth("prom", Some("scrape-pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let r = http.get(url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}
