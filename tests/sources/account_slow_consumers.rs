//! Slow consumers per account from `/accstatz`: a reader that stops reading
//! in one account is cut, and the exporter repeats the server's own count for
//! that account, 0 for the other, and the accounts add up to `/varz`.
use crate::common;

use common::fake_endpoint::{self, Reply};
use common::scenarios::{closed_reason, publish_until_cut, stuck_reader, varz_slow_consumers};
use nats_test_server::sample::{samples, value};
use nats_test_server::NatsServer;

const METRIC: &str = "nats_delivery_account_slow_consumers_total";

/// The server's own per-account counts, unused accounts included.
fn server_counts(server: &NatsServer) -> Vec<(String, u64)> {
    let reply = common::monitor_json(&server.monitor_url(), "accstatz?unused=true");
    let mut counts: Vec<(String, u64)> = reply["account_statz"]
        .as_array()
        .expect("account_statz")
        .iter()
        .map(|a| {
            let count = a["slow_consumers"].as_u64().expect("slow_consumers");
            (a["acc"].as_str().unwrap().to_string(), count)
        })
        .collect();
    counts.sort();
    counts
}

/// The exporter's per-account counts for `server`.
fn exported_counts(text: &str, server: &str) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = samples(text, METRIC, &[("server", server)])
        .into_iter()
        .map(|(labels, v)| {
            let account =
                nats_test_server::sample::label(&labels, "account").expect("account label");
            (account, v as u64)
        })
        .collect();
    counts.sort();
    counts
}

/// A scrape during which neither the server's accounts nor its total moved,
/// with the server's per-account counts and total.
async fn steady_scrape(
    exporter: &nats_delivery_exporter::Exporter,
    server: &NatsServer,
) -> (String, Vec<(String, u64)>, u64) {
    for _ in 0..20 {
        let before = (server_counts(server), varz_slow_consumers(server));
        let text = common::scrape(exporter).await;
        if (server_counts(server), varz_slow_consumers(server)) == before {
            return (text, before.0, before.1);
        }
    }
    panic!("the server's slow-consumer counts kept moving");
}

#[tokio::test]
async fn a_cut_is_counted_in_its_own_account_only() {
    let server = NatsServer::builder()
        .version(&nats_test_server::version_under_test())
        .max_pending(512 * 1024)
        .config(
            "max_payload: 65536\n\
             accounts {\n\
               CUT: { users: [{ user: cut, password: cut }] }\n\
               CALM: { users: [{ user: calm, password: calm }] }\n\
             }\n\
             no_auth_user: cut",
        )
        .start();
    let exporter = common::exporter(&[server.monitor_url()], &["--sources", "varz,accstatz"]);
    let name = server.name.as_str();

    // Both accounts are listed before anything happened, without a
    // connection: a counter must not appear only once it is above 0.
    let before = common::scrape(&exporter).await;
    for account in ["CUT", "CALM"] {
        let labels = [("server", name), ("account", account)];
        assert_eq!(value(&before, METRIC, &labels), Some(0.0), "{account}");
    }

    // A reading subscriber in CALM on the same subject name, and the stuck
    // reader and the publisher in CUT (the user without a password).
    let calm = async_nats::ConnectOptions::with_user_and_password("calm".into(), "calm".into())
        .connect(server.client_url())
        .await
        .unwrap();
    let _calm_sub = calm.subscribe("cut.test").await.unwrap();
    let _stuck = stuck_reader(server.client_port, "stuck-reader", "cut.test").await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    publish_until_cut(&server, &publisher, "cut.test").await;
    closed_reason(&server, "stuck-reader").await;

    let (text, truth, total) = steady_scrape(&exporter, &server).await;
    let count = |account: &str| {
        let n = truth.iter().find(|(a, _)| a == account);
        n.unwrap_or_else(|| panic!("{account} not in /accstatz")).1
    };
    // The server counts detections (one cut can be detected twice): the
    // exporter repeats its number, whatever it is.
    assert!(
        count("CUT") >= 1,
        "the cut was not counted in CUT: {truth:?}"
    );
    assert_eq!(count("CALM"), 0);
    assert_eq!(exported_counts(&text, name), truth);
    // Every slow consumer belongs to an account: they add up to /varz.
    let sum: u64 = exported_counts(&text, name).iter().map(|(_, n)| n).sum();
    assert_eq!(sum, total);
    assert_eq!(
        value(&text, "nats_delivery_server_slow_consumers_total", &[]),
        Some(total as f64)
    );
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test]
async fn a_count_that_is_not_a_number_takes_the_source_down() {
    let wrong = fake_endpoint::start(|_| {
        Reply::Fixed(
            "200 OK",
            r#"{"account_statz":[{"acc":"A","slow_consumers":"many"}]}"#.into(),
        )
    })
    .await;
    let exporter = common::exporter(std::slice::from_ref(&wrong.url), &["--sources", "accstatz"]);
    let text = common::scrape(&exporter).await;
    let server = wrong.authority.as_str();
    assert_eq!(
        value(
            &text,
            "nats_delivery_up",
            &[("server", server), ("source", "accstatz")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &text,
            "nats_delivery_scrape_errors_total",
            &[
                ("server", server),
                ("source", "accstatz"),
                ("kind", "parse")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(samples(&text, METRIC, &[]), vec![]);
}
