//! Property tests on stable Rust: thousands of mutated server replies and
//! advisories, and random names, fed to every parser and through the whole
//! exporter. Nothing may panic, every exposition line must parse, and any
//! label value must come back exactly as the server sent it. Seeds are
//! fixed, so a failure repeats; `MUTATION_CASES` raises the count.
use crate::common;

use std::sync::Mutex;

use common::fake_endpoint::{self, Reply};
use nats_delivery_exporter::listeners::advisories::parse::parse as parse_advisory;
use nats_delivery_exporter::sources::accstatz::Accstatz;
use nats_delivery_exporter::sources::connz::Connz;
use nats_delivery_exporter::sources::gatewayz::Gatewayz;
use nats_delivery_exporter::sources::jsz::{split, Jsz};
use nats_delivery_exporter::sources::routez::Routez;
use nats_delivery_exporter::sources::varz::Varz;

/// xorshift64*: small, fixed-seed randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four edits that JSON parsers find interesting.
fn mutate(input: &[u8], rng: &mut Rng) -> Vec<u8> {
    const BYTES: &[u8] = b"\"{}[],:-+09e.\\nu \xff\x00";
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len());
        match rng.below(5) {
            0 => {
                let last = out.len().saturating_sub(1);
                out[at.min(last)] = BYTES[rng.below(BYTES.len())];
            }
            1 => {
                let end = (at + rng.below(64)).min(out.len());
                out.drain(at..end);
            }
            2 => {
                let end = (at + rng.below(64)).min(out.len());
                let copy = out[at..end].to_vec();
                out.splice(at..at, copy);
            }
            3 => out.truncate(at),
            _ => {
                let digits = ["99999999999999999999999", "-1", "1e400", "null", "\"\""];
                let d = digits[rng.below(digits.len())].as_bytes();
                out.splice(at..at, d.iter().copied());
            }
        }
        if out.is_empty() {
            break;
        }
    }
    out
}

fn cases() -> usize {
    std::env::var("MUTATION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

fn fixture(version: &str, name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{version}/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

const ADVISORIES: [&str; 3] = [
    r#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"x","timestamp":"2026-01-01T00:00:00Z","stream":"S","consumer":"C","stream_seq":7,"deliveries":4,"domain":"d"}"#,
    r#"{"type":"io.nats.jetstream.advisory.v1.terminated","id":"y","timestamp":"2026-01-01T00:00:00.5Z","stream":"S","consumer":"C","consumer_seq":1,"stream_seq":2,"deliveries":1,"reason":"Message deleted by stream limits"}"#,
    r#"{"type":"io.nats.jetstream.advisory.v1.nak","id":"z","timestamp":"2026-01-01T00:00:00Z","stream":"S","consumer":"C","consumer_seq":3,"stream_seq":4,"deliveries":2}"#,
];

const REPORT: &str = r#"{"version":1,"client":"billing","instance":"pod-1","sequence":3,"timestamp_ms":1767225600000,"subscriptions":[{"subscription":"orders.>","delivered_messages":10,"dropped_messages":2,"dropped_bytes":64,"slow_consumer_events":1,"pending_messages":0,"pending_bytes":0,"pending_messages_high_water":5}],"connection_events":{"connected":1,"disconnected":0},"jetstream_consumers":[{"stream":"S","consumer":"C","received_messages":4,"redelivered_messages":1,"acknowledgements":{"ack":3,"nak":1}}]}"#;

#[test]
fn client_reports_survive_mutations_and_still_encode() {
    use std::sync::Arc;
    let mut rng = Rng(0x5851_F42D_4C95_7F2D);
    let reports = Arc::new(
        nats_delivery_exporter::listeners::client_reports::ClientReports::new(
            std::time::Duration::from_secs(600),
        ),
    );
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(reports.clone()));
    assert!(reports.record(REPORT.as_bytes()).is_ok());
    for _ in 0..cases() {
        let _ = reports.record(&mutate(REPORT.as_bytes(), &mut rng));
    }
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
    assert!(!strict_samples(&text).is_empty());
}

#[test]
fn parsers_never_panic_on_mutated_input() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for version in ["2.11.11", "2.15.1"] {
        for (name, parse) in [
            (
                "varz.json",
                (|b: &[u8]| serde_json::from_slice::<Varz>(b).is_ok()) as fn(&[u8]) -> bool,
            ),
            ("connz.json", |b| serde_json::from_slice::<Connz>(b).is_ok()),
            ("connz_closed.json", |b| {
                serde_json::from_slice::<Connz>(b).is_ok()
            }),
            ("jsz.json", |b| serde_json::from_slice::<Jsz>(b).is_ok()),
            ("accstatz.json", |b| {
                serde_json::from_slice::<Accstatz>(b).is_ok()
            }),
            // Parsed in pieces as the exporter does: the same result or
            // the same failure as parsing the whole.
            ("jsz.json", |b| {
                let whole = serde_json::from_slice::<Jsz>(b).map(|j| format!("{j:?}"));
                let pieces = split::parse(&mut &b[..]).map(|j| format!("{j:?}"));
                assert_eq!(whole.as_ref().ok(), pieces.as_ref().ok(), "{pieces:?}");
                whole.is_ok()
            }),
        ] {
            let original = fixture(version, name);
            assert!(parse(&original), "{version}/{name} itself must parse");
            for _ in 0..cases() {
                let _ = parse(&mutate(&original, &mut rng));
            }
        }
    }
    for version in ["2.9.10", "2.15.1"] {
        for (name, parse) in [
            (
                "routez.json",
                (|b: &[u8]| serde_json::from_slice::<Routez>(b).is_ok()) as fn(&[u8]) -> bool,
            ),
            ("gatewayz.json", |b| {
                serde_json::from_slice::<Gatewayz>(b)
                    .map(Gatewayz::connections)
                    .is_ok()
            }),
        ] {
            let original = fixture(version, name);
            assert!(parse(&original), "{version}/{name} itself must parse");
            for _ in 0..cases() {
                let _ = parse(&mutate(&original, &mut rng));
            }
        }
    }
    // Priority groups (2.11+), which the fixtures' consumers do not have.
    let pinned = PINNED_JSZ.as_bytes();
    let groups = |j: &Jsz| -> Vec<(String, bool)> {
        let streams = j.account_details.iter().flat_map(|a| &a.stream_detail);
        let consumers = streams.flat_map(|s| &s.consumer_detail);
        consumers
            .flat_map(|c| c.pinned_groups().map(|(g, p)| (g.to_string(), p)))
            .collect()
    };
    let parsed = serde_json::from_slice::<Jsz>(pinned).unwrap();
    assert_eq!(groups(&parsed), [("g".to_string(), true)]);
    for _ in 0..cases() {
        let mutated = mutate(pinned, &mut rng);
        let whole = serde_json::from_slice::<Jsz>(&mutated).map(|j| groups(&j));
        let pieces = split::parse(&mut &mutated[..]).map(|j| groups(&j));
        assert_eq!(whole.ok(), pieces.ok());
    }
    // What the system account and STREAM.INFO answer: the envelope of a
    // survey reply around a real /varz, and a stream's full state.
    let varz = String::from_utf8(fixture("2.15.1", "varz.json")).unwrap();
    let envelope = format!(
        r#"{{"server":{{"name":"n1","host":"0.0.0.0","id":"NID","cluster":"C","ver":"2.15.1","seq":7,"time":"2026-01-01T00:00:00Z"}},"data":{varz}}}"#
    );
    type Parse = fn(&[u8]) -> bool;
    let replies: [(&[u8], Parse); 2] = [
        (envelope.as_bytes(), |b| {
            nats_delivery_exporter::system::survey::parse_reply(b)
                .map(|a| a.data.map(|d| serde_json::from_slice::<Varz>(&d).is_ok()))
                .is_ok()
        }),
        (STREAM_INFO.as_bytes(), |b| {
            use nats_delivery_exporter::jetstream::stream_lost::{parse_info, Found};
            let Ok(record) = parse_info(b) else {
                return false;
            };
            // A record read twice counts its sequences once.
            let mut found = Found::default();
            found.absorb(&record);
            let once = found.counted();
            assert_eq!(once.0, record.sequences.len() as u64);
            found.absorb(&record);
            assert_eq!(found.counted(), once);
            true
        }),
    ];
    for (original, parse) in replies {
        assert!(parse(original), "{}", String::from_utf8_lossy(original));
        for _ in 0..cases() {
            let _ = parse(&mutate(original, &mut rng));
        }
    }
    for advisory in ADVISORIES {
        assert!(parse_advisory(advisory.as_bytes()).is_ok(), "{advisory}");
        for _ in 0..cases() {
            let mutated = mutate(advisory.as_bytes(), &mut rng);
            let _ = parse_advisory(&mutated);
            // The subject-checking parser the listeners use.
            for subject in nats_delivery_exporter::listeners::advisories::parse::SUBJECTS {
                let _ = nats_delivery_exporter::listeners::advisories::parse::parse_on(
                    &subject.replace('>', "S.C"),
                    &mutated,
                );
            }
        }
    }
}

/// A STREAM.INFO reply with deleted details and lost data, as 2.11+ writes it.
const STREAM_INFO: &str = r#"{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"DATA","subjects":["data.>"]},"created":"2026-01-01T00:00:00Z","state":{"messages":963,"bytes":1000557,"first_seq":4038,"last_seq":5000,"num_deleted":2,"deleted":[4100,4101],"lost":{"msgs":[1,2,3],"bytes":3099},"consumer_count":0},"ts":"2026-01-01T00:00:01Z"}"#;

/// A /jsz page with one consumer pinned in its priority group, as 2.11+ writes it.
const PINNED_JSZ: &str = r#"{"now":"2026-01-01T00:00:00Z","account_details":[{"name":"$G","stream_detail":[{"name":"WORK","state":{"messages":3},"consumer_detail":[{"name":"pinned","config":{"ack_policy":"explicit","priority_policy":"pinned_client","priority_groups":["g"],"priority_timeout":60000000000},"priority_groups":[{"group":"g","pinned_client_id":"ZeZbcWnxlyIS6KfKD8kJ6q","pinned_ts":"2026-01-01T00:00:00Z"}],"num_pending":2}]}]}]}"#;

const DISCONNECT: &str = r#"{"type":"io.nats.server.advisory.v1.client_disconnect","server":{"name":"s1"},"client":{"acc":"APP","name":"worker"},"reason":"Slow Consumer (Pending Bytes)"}"#;

/// System-account disconnect events: counted or counted as malformed, never
/// a panic, and one valid event is one slow-consumer cut.
#[test]
fn disconnect_events_survive_mutations() {
    use nats_delivery_exporter::system::events::{DisconnectCounter, SystemEventMetrics};
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let metrics = SystemEventMetrics::default();
    let mut counter = DisconnectCounter::new(metrics.clone(), 16);
    assert!(counter.record(DISCONNECT.as_bytes()));
    for _ in 0..cases() {
        let _ = counter.record(&mutate(DISCONNECT.as_bytes(), &mut rng));
    }
    assert_eq!(metrics.received.get(), 1 + cases() as u64);
}

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
