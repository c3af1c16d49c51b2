//! Property tests on stable Rust: thousands of mutated server replies and
//! advisories fed to every parser. Nothing may panic. Seeds are fixed, so a
//! failure repeats; `MUTATION_CASES` raises the count.
use nats_delivery_exporter::{
    parse_advisory, parse_jsz_split, Accstatz, Connz, Gatewayz, Jsz, Routez, Varz,
};

/// xorshift64*: small, fixed-seed randomness without a dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four edits that JSON parsers find interesting.
pub(super) fn mutate(input: &[u8], rng: &mut Rng) -> Vec<u8> {
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

pub(super) fn cases() -> usize {
    std::env::var("MUTATION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

pub(super) fn fixture(version: &str, name: &str) -> Vec<u8> {
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

#[test]
fn parsers_never_panic_on_mutated_input() {
    // One generator through every part, in turn.
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    monitoring_replies(&mut rng);
    route_and_gateway_replies(&mut rng);
    priority_groups(&mut rng);
    system_replies(&mut rng);
    health_replies(&mut rng);
    advisories(&mut rng);
}

/// The monitoring replies of 2.11 and 2.15, `/jsz` also parsed in pieces.
fn monitoring_replies(rng: &mut Rng) {
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
                let pieces = parse_jsz_split(&mut &b[..]).map(|j| format!("{j:?}"));
                assert_eq!(whole.as_ref().ok(), pieces.as_ref().ok(), "{pieces:?}");
                whole.is_ok()
            }),
        ] {
            let original = fixture(version, name);
            assert!(parse(&original), "{version}/{name} itself must parse");
            for _ in 0..cases() {
                let _ = parse(&mutate(&original, rng));
            }
        }
    }
}

/// `/routez` and `/gatewayz` of 2.9 and 2.15.
fn route_and_gateway_replies(rng: &mut Rng) {
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
                let _ = parse(&mutate(&original, rng));
            }
        }
    }
}

/// Priority groups (2.11+), which the fixtures' consumers do not have.
fn priority_groups(rng: &mut Rng) {
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
        let mutated = mutate(pinned, rng);
        let whole = serde_json::from_slice::<Jsz>(&mutated).map(|j| groups(&j));
        let pieces = parse_jsz_split(&mut &mutated[..]).map(|j| groups(&j));
        assert_eq!(whole.ok(), pieces.ok());
    }
}

/// What the system account and STREAM.INFO answer: the envelope of a
/// survey reply around a real /varz, and a stream's full state.
fn system_replies(rng: &mut Rng) {
    let varz = String::from_utf8(fixture("2.15.1", "varz.json")).unwrap();
    let envelope = format!(
        r#"{{"server":{{"name":"n1","host":"0.0.0.0","id":"NID","cluster":"C","ver":"2.15.1","seq":7,"time":"2026-01-01T00:00:00Z"}},"data":{varz}}}"#
    );
    type Parse = fn(&[u8]) -> bool;
    let replies: [(&[u8], Parse); 2] = [
        (envelope.as_bytes(), |b| {
            nats_delivery_exporter::parse_survey_reply(b)
                .map(|a| a.data.map(|d| serde_json::from_slice::<Varz>(&d).is_ok()))
                .is_ok()
        }),
        (STREAM_INFO.as_bytes(), |b| {
            use nats_delivery_exporter::{parse_stream_info, Found};
            let Ok(record) = parse_stream_info(b) else {
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
            let _ = parse(&mutate(original, rng));
        }
    }
}

/// A `/healthz?details=true` reply with problems, each kind counted.
fn health_replies(rng: &mut Rng) {
    use nats_delivery_exporter::{Healthz, HEALTHZ_PROBLEM_KINDS};
    let counts = |h: &Healthz| -> Vec<u64> {
        HEALTHZ_PROBLEM_KINDS
            .iter()
            .map(|k| h.problems(k))
            .collect()
    };
    let original: Healthz = serde_json::from_str(HEALTHZ).unwrap();
    assert!(!original.healthy());
    assert_eq!(counts(&original).iter().sum::<u64>(), 2, "{original:?}");
    for _ in 0..cases() {
        if let Ok(h) = serde_json::from_slice::<Healthz>(&mutate(HEALTHZ.as_bytes(), rng)) {
            let _ = (h.healthy(), counts(&h));
        }
    }
}

/// The advisories, with and without the subject-checking parser.
fn advisories(rng: &mut Rng) {
    for advisory in ADVISORIES {
        assert!(parse_advisory(advisory.as_bytes()).is_ok(), "{advisory}");
        for _ in 0..cases() {
            let mutated = mutate(advisory.as_bytes(), rng);
            let _ = parse_advisory(&mutated);
            // The subject-checking parser the listeners use.
            for subject in nats_delivery_exporter::ADVISORY_SUBJECTS {
                let _ = nats_delivery_exporter::parse_advisory_on(
                    &subject.replace('>', "S.C"),
                    &mutated,
                );
            }
        }
    }
}

/// A `/healthz?details=true` reply of an unavailable server, as 2.10+ writes it.
const HEALTHZ: &str = r#"{"status":"unavailable","status_code":503,"error":"JetStream stream 'APP > ORDERS' is not current","errors":[{"type":"STREAM","account":"APP","stream":"ORDERS","error":"JetStream stream 'APP > ORDERS' is not current"},{"type":"CONSUMER","account":"APP","stream":"ORDERS","consumer":"mailer","error":"JetStream consumer 'APP > ORDERS > mailer' is not current"}]}"#;

/// A STREAM.INFO reply with deleted details and lost data, as 2.11+ writes it.
const STREAM_INFO: &str = r#"{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"DATA","subjects":["data.>"]},"created":"2026-01-01T00:00:00Z","state":{"messages":963,"bytes":1000557,"first_seq":4038,"last_seq":5000,"num_deleted":2,"deleted":[4100,4101],"lost":{"msgs":[1,2,3],"bytes":3099},"consumer_count":0},"ts":"2026-01-01T00:00:01Z"}"#;

/// A /jsz page with one consumer pinned in its priority group, as 2.11+ writes it.
const PINNED_JSZ: &str = r#"{"now":"2026-01-01T00:00:00Z","account_details":[{"name":"$G","stream_detail":[{"name":"WORK","state":{"messages":3},"consumer_detail":[{"name":"pinned","config":{"ack_policy":"explicit","priority_policy":"pinned_client","priority_groups":["g"],"priority_timeout":60000000000},"priority_groups":[{"group":"g","pinned_client_id":"ZeZbcWnxlyIS6KfKD8kJ6q","pinned_ts":"2026-01-01T00:00:00Z"}],"num_pending":2}]}]}]}"#;

const DISCONNECT: &str = r#"{"type":"io.nats.server.advisory.v1.client_disconnect","server":{"name":"s1"},"client":{"acc":"APP","name":"worker"},"reason":"Slow Consumer (Pending Bytes)"}"#;

/// System-account disconnect events: counted or counted as malformed, never
/// a panic, and one valid event is one slow-consumer cut.
#[test]
fn disconnect_events_survive_mutations() {
    use nats_delivery_exporter::{DisconnectCounter, SystemEventMetrics};
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let metrics = SystemEventMetrics::default();
    let mut counter = DisconnectCounter::new(metrics.clone(), 16);
    assert!(counter.record(DISCONNECT.as_bytes()));
    for _ in 0..cases() {
        let _ = counter.record(&mutate(DISCONNECT.as_bytes(), &mut rng));
    }
    assert_eq!(metrics.received.get(), 1 + cases() as u64);
}
