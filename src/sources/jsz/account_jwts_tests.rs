use super::*;

fn parse(body: &str) -> Option<JwtLimits> {
    limits(serde_json::from_str(body).unwrap())
}

#[test]
fn limits_and_tiers_as_the_jwt_sets_them_unset_or_unlimited_absent() {
    let flat = parse(
        r#"{"account_detail":{"decoded_jwt":{"nats":{"limits":
            {"streams":3,"consumer":-1,"disk_storage":2000000,"subs":-1}}}}}"#,
    );
    let want = JwtLimits {
        max_streams: Some(3),
        ..JwtLimits::default()
    };
    assert_eq!(flat, Some(want));
    let tiered = parse(
        r#"{"account_detail":{"decoded_jwt":{"nats":{"limits":{"tiered_limits":
            {"R3":{"disk_storage":5,"streams":1},
             "R1":{"consumer":7,"disk_storage":5000000,"mem_storage":-1,"streams":6}}}}}}}"#,
    )
    .unwrap();
    assert_eq!((tiered.max_streams, tiered.max_consumers), (None, None));
    let r1 = JwtTier {
        tier: "R1".into(),
        max_file: Some(5_000_000),
        max_memory: None,
        max_streams: Some(6),
        max_consumers: Some(7),
    };
    assert_eq!(tiered.tiers[0], r1);
    assert_eq!(tiered.tiers[1].tier, "R3");
}

#[test]
fn no_jwt_gives_nothing_and_a_jwt_without_limits_no_limit() {
    assert_eq!(parse(r#"{"account_detail":{"account_name":"A"}}"#), None);
    assert_eq!(parse(r#"{"server_id":"N"}"#), None);
    let bare = parse(r#"{"account_detail":{"decoded_jwt":{"nats":{}}}}"#);
    assert_eq!(bare, Some(JwtLimits::default()));
    assert!(serde_json::from_str::<Reply>("garbage").is_err());
}

#[test]
fn only_account_public_keys_are_asked_for() {
    let key = "AAS6CW6LTQ6LSVLPOBKOADFSEQTRJ6GJDNWS5JJOOEZ4IWZ4RIT3RW6J";
    assert!(is_account_key(key));
    for name in [
        "A",
        "$G",
        "APP",
        &key.to_lowercase(),
        &key[1..],
        &key.replacen('A', "U", 1),
    ] {
        assert!(!is_account_key(name), "{name}");
    }
}

/// A server at a fresh port answering every request with `body` as JSON.
async fn answering(body: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(format!("{head}{body}").as_bytes()).await;
        }
    });
    url
}

fn http_link(base: &str) -> DetachedLink {
    let timeout = Duration::from_secs(60);
    let fetch = crate::sources::Fetcher::new(reqwest::Client::builder(), timeout, 1 << 20);
    DetachedLink::Http {
        fetch: fetch.unwrap(),
        base: base.parse().unwrap(),
    }
}

#[tokio::test]
async fn a_garbage_reply_is_a_parse_error_and_a_reply_without_a_jwt_no_limits() {
    let key = "AAS6CW6LTQ6LSVLPOBKOADFSEQTRJ6GJDNWS5JJOOEZ4IWZ4RIT3RW6J";
    let garbage = http_link(&answering("garbage").await);
    assert_eq!(read(&garbage, key).await.unwrap_err().kind(), "parse");
    let plain = http_link(&answering(r#"{"account_detail":{"account_name":"A"}}"#).await);
    assert_eq!(read(&plain, key).await.unwrap(), None);
}

/// A server at a fresh port answering every request with a JWT of
/// `streams: 1`, counting the requests.
async fn counting() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"account_detail":{"decoded_jwt":{"nats":{"limits":{"streams":1}}}}}"#;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            counted.fetch_add(1, Ordering::SeqCst);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(format!("{head}{body}").as_bytes()).await;
        }
    });
    (url, count)
}

/// Two letters for `i` below 676.
fn letters(i: usize) -> String {
    [i / 26, i % 26]
        .map(|d| char::from(b'A' + d as u8))
        .iter()
        .collect()
}

/// `n` accounts named by public keys (the server's names in operator mode).
fn keyed(n: usize) -> Vec<AccountDetail> {
    (0..n)
        .map(|i| AccountDetail {
            name: format!("T{i}"),
            id: format!("A{}{}", "B".repeat(53), letters(i)),
            ..Default::default()
        })
        .collect()
}

/// One poll of `accounts` by `jwts` over `base`; waits for the read it
/// starts to end; what the poll returned.
async fn poll_and_wait(jwts: &AccountJwts, base: &str, accounts: &[AccountDetail]) -> usize {
    let (detached, kept) = (http_link(base), KeptBudget::new(1 << 20));
    let link = detached.link(&kept);
    let known = jwts.poll(&link, accounts).len();
    loop {
        let running = jwts.state.lock_or_recover().running.take();
        match running {
            Some(task) => task.await.unwrap(),
            None => return known,
        }
    }
}

#[tokio::test]
async fn each_account_is_read_once_new_ones_when_they_show_at_most_a_cap_a_poll() {
    use std::sync::atomic::Ordering;
    let (url, count) = counting().await;
    let jwts = AccountJwts::new(Duration::from_secs(3600), Duration::from_secs(60));
    let accounts = keyed(READS_PER_POLL + 4);
    assert!(accounts.iter().all(|a| is_account_key(&a.id)));
    assert_eq!(poll_and_wait(&jwts, &url, &accounts).await, 0);
    assert_eq!(count.load(Ordering::SeqCst), READS_PER_POLL);
    // The rest at the next poll, which serves what the first read learned.
    assert_eq!(poll_and_wait(&jwts, &url, &accounts).await, READS_PER_POLL);
    assert_eq!(count.load(Ordering::SeqCst), READS_PER_POLL + 4);
    // Nothing due within the interval; a new account is read at once.
    let known = poll_and_wait(&jwts, &url, &accounts).await;
    assert_eq!(
        (known, count.load(Ordering::SeqCst)),
        (READS_PER_POLL + 4, READS_PER_POLL + 4)
    );
    let more = keyed(READS_PER_POLL + 5);
    poll_and_wait(&jwts, &url, &more).await;
    assert_eq!(count.load(Ordering::SeqCst), READS_PER_POLL + 5);
    // Accounts no longer listed are forgotten; names without a key never asked.
    let names = [AccountDetail {
        name: "A".into(),
        id: "A".into(),
        ..Default::default()
    }];
    assert_eq!(poll_and_wait(&jwts, &url, &names).await, 0);
    assert_eq!(count.load(Ordering::SeqCst), READS_PER_POLL + 5);
}

#[tokio::test]
async fn a_read_under_way_is_known_until_it_ends() {
    // Connections are taken (the kernel's backlog) and never answered.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (detached, kept) = (http_link(&url), KeptBudget::new(1 << 20));
    let link = detached.link(&kept);
    let jwts = AccountJwts::new(Duration::from_secs(3600), Duration::from_millis(300));
    assert!(!jwts.reading());
    jwts.poll(&link, &keyed(1));
    assert!(jwts.reading());
    // Its deadline passes: the read ends.
    while jwts.reading() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(jwts.poll(&link, &keyed(1)).len(), 0, "nothing learned");
    drop(listener);
}
