//! The account filter reaches the /jsz request only when it is exact: one
//! include-account name without special characters is sent as `acc=`; when
//! the server finds nothing under it (a name tag, in operator mode), every
//! account is read and filtered by the exporter.
use crate::common;

use std::sync::{Arc, Mutex};

use common::fake_endpoint::{self, Reply};
use nats_test_server::sample::samples;

fn account(name: &str, id: &str) -> String {
    format!(
        r#"{{"name":"{name}","id":"{id}","stream_detail":[{{"name":"S","state":{{"messages":1}}}}]}}"#
    )
}

/// A /jsz that honours `acc=` by account id, as nats-server does, and records every request.
async fn jsz_endpoint() -> (fake_endpoint::FakeEndpoint, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let endpoint = fake_endpoint::start(move |path| {
        log.lock().unwrap().push(path.to_string());
        let all = [("A", "A"), ("B", "B"), ("tag", "PUBKEY")];
        let acc = path.split(['?', '&']).find_map(|p| p.strip_prefix("acc="));
        let accounts: Vec<String> = all
            .iter()
            .filter(|(_, id)| acc.is_none_or(|a| a == *id))
            .map(|(name, id)| account(name, id))
            .collect();
        let body = format!(
            r#"{{"now":"2026-01-01T00:00:00Z","account_details":[{}]}}"#,
            accounts.join(",")
        );
        Reply::Fixed("200 OK", body)
    })
    .await;
    (endpoint, seen)
}

async fn scrape(include: &str) -> (Vec<String>, Vec<String>) {
    let (endpoint, seen) = jsz_endpoint().await;
    let flags = ["--sources", "jsz", "--include-account", include];
    let exporter = common::exporter(std::slice::from_ref(&endpoint.url), &flags);
    let text = common::scrape(&exporter).await;
    let accounts = samples(&text, "nats_delivery_stream_messages", &[])
        .into_iter()
        .map(|(labels, _)| labels)
        .collect();
    let requests = seen.lock().unwrap().clone();
    (requests, accounts)
}

#[tokio::test]
async fn one_exact_account_is_asked_of_the_server() {
    let (requests, accounts) = scrape("B").await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].contains("acc=B"), "{requests:?}");
    assert_eq!(accounts, [r#"account="B",stream="S""#]);
}

#[tokio::test]
async fn a_name_the_server_does_not_know_is_read_in_full_and_filtered() {
    // "tag" is a name tag; the server knows the account as PUBKEY.
    let (requests, accounts) = scrape("tag").await;
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests[0].contains("acc=tag"), "{requests:?}");
    assert!(!requests[1].contains("acc="), "{requests:?}");
    assert_eq!(accounts, [r#"account="tag",stream="S""#]);
}

#[tokio::test]
async fn patterns_are_never_sent() {
    let (requests, accounts) = scrape("A|B").await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(!requests[0].contains("acc="), "{requests:?}");
    assert_eq!(accounts.len(), 2, "{accounts:?}");
}
