//! Mutated server replies and random names through the whole exporter:
//! every exposition line must parse, and any label value must come back
//! exactly as the server sent it. Seeds are fixed, so a failure repeats.
use crate::common;

use std::sync::Mutex;

use common::fake_endpoint::{self, Reply};

use super::mutated_replies::{cases, fixture, mutate, Rng};

/// A sample: name, labels in order, value.
type Sample = (String, Vec<(String, String)>, f64);

/// Every line of a classic exposition, strictly: `# HELP`/`# TYPE`, or
/// `name{label="escaped",...} value`. Returns (name, labels, value) per sample.
fn strict_samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        let name = &line[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name in {line:?}"
        );
        let mut rest = line[name_end..].chars().peekable();
        let mut labels = Vec::new();
        if rest.peek() == Some(&'{') {
            rest.next();
            loop {
                let key: String = rest.by_ref().take_while(|c| *c != '=').collect();
                assert_eq!(rest.next(), Some('"'), "{line:?}");
                let mut value = String::new();
                loop {
                    match rest.next() {
                        Some('\\') => match rest.next() {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        Some('"') => break,
                        Some(c) => value.push(c),
                        None => panic!("unterminated label in {line:?}"),
                    }
                }
                labels.push((key, value));
                match rest.next() {
                    Some(',') => continue,
                    Some('}') => break,
                    other => panic!("unexpected {other:?} in {line:?}"),
                }
            }
        }
        let value: String = rest.collect();
        let value: f64 = value
            .trim()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        out.push((name.to_string(), labels, value));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_replies_never_break_the_exposition() {
    let rng = Mutex::new(Rng(0xD1B5_4A32_D192_ED03));
    let originals: Vec<(String, Vec<u8>)> =
        ["varz", "connz", "jsz", "accstatz", "routez", "gatewayz"]
            .iter()
            .map(|e| (format!("/{e}"), fixture("2.15.1", &format!("{e}.json"))))
            .collect();
    let endpoint = fake_endpoint::start(move |path| {
        let original = originals
            .iter()
            .find(|(p, _)| path.starts_with(p.as_str()))
            .map(|(_, b)| b.clone())
            .unwrap_or_default();
        let body = mutate(&original, &mut rng.lock().unwrap());
        Reply::Fixed("200 OK", String::from_utf8_lossy(&body).into_owned())
    })
    .await;
    let exporter = common::exporter(
        std::slice::from_ref(&endpoint.url),
        &[
            // Nothing hangs here: a poll that is only slow (a loaded
            // machine) must not turn a parse into a timeout.
            "--timeout",
            "30s",
            "--sources",
            "varz,connz,jsz,accstatz,routez,gatewayz",
        ],
    );
    let mut parsed_ok = 0;
    for _ in 0..cases() / 10 {
        let text = common::scrape(&exporter).await;
        let samples = strict_samples(&text);
        for (name, _, value) in &samples {
            if name == "nats_delivery_up" {
                assert!(*value == 0.0 || *value == 1.0);
                parsed_ok += *value as usize;
            }
        }
    }
    // Some mutations leave valid JSON: the test did reach the encoders.
    assert!(parsed_ok > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_name_comes_back_exactly_as_a_label_value() {
    let mut rng = Rng(0xA076_1D64_78BD_642F);
    let alphabet: Vec<char> = "aZ9_-\"\\\n\r\t{}=,# é漢🙂\u{7f}".chars().collect();
    let names: Vec<String> = (0..200)
        .map(|_| {
            (0..=rng.below(12))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect()
        })
        .collect();
    let consumers: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                r#"{{"name":{},"num_ack_pending":7}}"#,
                serde_json::to_string(n).unwrap()
            )
        })
        .collect();
    let jsz = format!(
        r#"{{"now":"2026-01-01T00:00:00Z","account_details":[{{"name":{},"stream_detail":[{{"name":{},"state":{{"messages":1}},"consumer_detail":[{}]}}]}}]}}"#,
        serde_json::to_string(&names[0]).unwrap(),
        serde_json::to_string(&names[1]).unwrap(),
        consumers.join(",")
    );
    let endpoint = fake_endpoint::start(move |_| Reply::Fixed("200 OK", jsz.clone())).await;
    let exporter = common::exporter(std::slice::from_ref(&endpoint.url), &["--sources", "jsz"]);
    let text = common::scrape(&exporter).await;
    let seen: std::collections::BTreeSet<String> = strict_samples(&text)
        .into_iter()
        .filter(|(n, _, _)| n == "nats_delivery_consumer_ack_pending_messages")
        .map(|(_, labels, v)| {
            assert_eq!(v, 7.0);
            let get = |k: &str| labels.iter().find(|(l, _)| l == k).unwrap().1.clone();
            assert_eq!(get("account"), names[0]);
            assert_eq!(get("stream"), names[1]);
            get("consumer")
        })
        .collect();
    let sent: std::collections::BTreeSet<String> = names.into_iter().collect();
    assert_eq!(seen, sent);
}

const REPORT: &str = r#"{"version":1,"client":"billing","instance":"pod-1","sequence":3,"timestamp_ms":1767225600000,"subscriptions":[{"subscription":"orders.>","delivered_messages":10,"dropped_messages":2,"dropped_bytes":64,"slow_consumer_events":1,"pending_messages":0,"pending_bytes":0,"pending_messages_high_water":5}],"connection_events":{"connected":1,"disconnected":0},"jetstream_consumers":[{"stream":"S","consumer":"C","received_messages":4,"redelivered_messages":1,"acknowledgements":{"ack":3,"nak":1}}]}"#;

#[test]
fn client_reports_survive_mutations_and_still_encode() {
    use std::sync::Arc;
    let mut rng = Rng(0x5851_F42D_4C95_7F2D);
    let reports = Arc::new(nats_delivery_exporter::ClientReports::new(
        std::time::Duration::from_secs(600),
    ));
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(reports.clone()));
    assert!(reports.record(Some("billing"), REPORT.as_bytes()).is_ok());
    for _ in 0..cases() {
        let _ = reports.record(Some("billing"), &mutate(REPORT.as_bytes(), &mut rng));
    }
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
    assert!(!strict_samples(&text).is_empty());
}
