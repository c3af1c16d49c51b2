//! `split::parse` against parsing the whole reply: real replies, pieces of
//! every size, mutations, padding and nesting.

use std::io::BufReader;

use crate::sources::kept::{self, KeptBudget};
use crate::sources::parse_error::{self, ParseError};

use super::*;

/// `parse` over `body` read 7 bytes at a time, so that cuts fall
/// everywhere; as Debug text, to compare with parsing the whole.
fn in_pieces(body: &[u8]) -> Result<String, String> {
    parse(&mut BufReader::with_capacity(7, body))
        .map(|j| format!("{j:?}"))
        .map_err(|e| e.to_string())
}

fn whole(body: &[u8]) -> Result<String, String> {
    parse_whole(body)
        .map(|j| format!("{j:?}"))
        .map_err(|e| e.to_string())
}

const TWO_ACCOUNTS: &str = r#"{"now":"2026-01-01T00:00:10Z","total":2,"account_details":[
    {"name":"A","stream_detail":[{"name":"S1","state":{"messages":3},"consumer_detail":[{"name":"C","num_pending":4,"config":{"note":"}]{[\"]}\\"}}]},{"name":"S2"}]},
    {"name":"B","id":"b","stream_detail":[]},
    {"name":"C","stream\u005fdetail":[{"name":"escaped key"}]}]}"#;

#[test]
fn gives_what_parsing_the_whole_gives() {
    let mut bodies = vec![TWO_ACCOUNTS.to_string()];
    for version in ["2.9.10", "2.10.26", "2.11.11", "2.12.8", "2.15.1"] {
        let path = format!(
            "{}/tests/fixtures/{version}/jsz.json",
            env!("CARGO_MANIFEST_DIR")
        );
        bodies.push(std::fs::read_to_string(path).unwrap());
    }
    for body in &bodies {
        let expected = whole(body.as_bytes()).unwrap();
        assert_eq!(in_pieces(body.as_bytes()).unwrap(), expected);
    }
    assert!(whole(TWO_ACCOUNTS.as_bytes()).unwrap().contains(
        "consumer_count: 0, num_deleted: 0 }, consumer_detail: [ConsumerInfo { name: \"C\""
    ));
}

/// Real replies (indented, as over HTTP) read in pieces of every small
/// size, and with bytes replaced anywhere (a few thousand cases each).
#[test]
fn real_replies_in_any_pieces_and_mutated_give_what_the_whole_gives() {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rnd = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for version in ["2.9.10", "2.15.1"] {
        let path = format!(
            "{}/tests/fixtures/{version}/jsz.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let body = std::fs::read(path).unwrap();
        let expected = whole(&body).unwrap();
        for size in 1..=9 {
            let got = parse(&mut BufReader::with_capacity(size, &body[..]));
            assert_eq!(format!("{:?}", got.unwrap()), expected, "pieces of {size}");
        }
        for _ in 0..3000 {
            let mut mutated = body.clone();
            for _ in 0..1 + rnd(3) {
                let at = rnd(mutated.len());
                mutated[at] = b"{}[]\",:\\ \n\t0a"[rnd(13)];
            }
            let size = 1 + rnd(40);
            let got = parse(&mut BufReader::with_capacity(size, &mutated[..]));
            assert_eq!(
                got.map(|j| format!("{j:?}")).ok(),
                whole(&mutated).ok(),
                "{}",
                String::from_utf8_lossy(&mutated)
            );
        }
    }
}

#[test]
fn fails_where_parsing_the_whole_fails() {
    let body = TWO_ACCOUNTS.as_bytes();
    // Cut short anywhere.
    for end in 0..body.len() {
        assert!(in_pieces(&body[..end]).is_err(), "cut at {end}");
    }
    // Any byte replaced by one that matters to the scan or to JSON.
    for at in 0..body.len() {
        for b in *b"{}[]\",:\\x 1" {
            let mut mutated = body.to_vec();
            mutated[at] = b;
            assert_eq!(
                in_pieces(&mutated).ok(),
                whole(&mutated).ok(),
                "{b} at {at}: {}",
                String::from_utf8_lossy(&mutated)
            );
        }
    }
    // Whitespace, wherever it pads, is held as one byte.
    let padded = TWO_ACCOUNTS.replace(',', &format!(",{}", " ".repeat(10_000)));
    let mut reader = BufReader::with_capacity(7, padded.as_bytes());
    assert_eq!(
        format!("{:?}", parse(&mut reader).unwrap()),
        whole(body).unwrap()
    );
    // Nesting deeper than anything a stream has costs no memory per level.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(in_pieces(deep.as_bytes()).is_err());
}

/// `body` parsed by `parse` in pieces and by `parse_whole`, each in a
/// budget of `limit` bytes: the results and what each left charged.
fn in_budget(body: &[u8], limit: usize) -> [(Result<Jsz, ParseError>, usize); 2] {
    let run = |f: &dyn Fn() -> Result<Jsz, ParseError>| {
        let budget = KeptBudget::new(limit);
        let parsed = kept::scope(&budget, f);
        (parsed, budget.used())
    };
    [
        run(&|| parse(&mut BufReader::with_capacity(7, body))),
        run(&|| parse_whole(body)),
    ]
}

fn kept_by(jsz: &Jsz) -> usize {
    use super::super::de::Kept;
    jsz.account_details.iter().map(Kept::kept_bytes).sum()
}

#[test]
fn what_a_reply_keeps_is_charged_as_it_is_parsed() {
    let path = format!(
        "{}/tests/fixtures/2.15.1/jsz.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = std::fs::read(path).unwrap();
    let [(pieces, _), (whole, whole_used)] = in_budget(&body, usize::MAX);
    let (pieces, whole) = (pieces.unwrap(), whole.unwrap());
    // Parsed whole, each list charges its items: what the reply keeps, exactly.
    assert_eq!(whole_used, kept_by(&whole));
    let consumers = whole.account_details[0].stream_detail[0]
        .consumer_detail
        .len();
    assert!(kept_by(&whole) > consumers * super::super::de::HELD_PER_CONSUMER);
    // Cut in pieces, the same values; the charge left is an upper bound
    // (the skeleton's text stays charged until the page is settled).
    assert_eq!(format!("{pieces:?}"), format!("{whole:?}"));
    let [(_, pieces_used), _] = in_budget(&body, usize::MAX);
    assert!(pieces_used >= kept_by(&pieces) / 2, "{pieces_used}");
    // A budget one byte short stops both ways, with an error that says so.
    for (parsed, _) in in_budget(&body, whole_used - 1) {
        let e = parsed.unwrap_err();
        assert!(e.to_string().contains(parse_error::REFUSED), "{e}");
        assert!(matches!(e, ParseError::Refused(_)), "{e}");
    }
}

/// `unit` again and again, never ending.
struct Repeat {
    unit: &'static [u8],
    at: usize,
}

impl std::io::Read for Repeat {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        for b in buf.iter_mut() {
            *b = self.unit[self.at];
            self.at = (self.at + 1) % self.unit.len();
        }
        Ok(buf.len())
    }
}

#[test]
fn a_reply_without_end_stops_at_the_budget() {
    use std::io::Read;
    // Accounts in the skeleton, consumers in one stream, streams one after
    // another; and lists nested in what is skipped.
    let cases = [
        (r#"{"account_details":["#, r#"{"name":"A"},"#),
        (
            r#"{"account_details":[{"name":"A","stream_detail":[{"name":"S","consumer_detail":["#,
            r#"{"name":"c","x":[[[[1]]]]},"#,
        ),
        (
            r#"{"account_details":[{"name":"A","stream_detail":["#,
            r#"{"name":"S","consumer_detail":[{"name":"c"}]},"#,
        ),
        (r#"{"x":"#, "[[[[[[[["),
    ];
    for (lead, unit) in cases {
        let budget = KeptBudget::new(8 << 20);
        let endless = Repeat {
            unit: unit.as_bytes(),
            at: 0,
        };
        let mut input = BufReader::new(lead.as_bytes().chain(endless));
        let parsed = kept::scope(&budget, || parse(&mut input));
        let e = parsed.unwrap_err();
        assert!(
            e.to_string().contains(parse_error::REFUSED),
            "{lead}{unit}: {e}"
        );
        assert!(matches!(e, ParseError::Refused(_)), "{lead}{unit}: {e}");
        assert!(budget.used() <= 8 << 20);
    }
}

#[test]
fn a_broken_stream_followed_by_many_stops_the_cut() {
    // The parsers stop at the first stream, and the cut has many more to
    // hand out from the same buffer: it must not wait for them forever.
    let streams = vec![r#"{"name":"s"}"#; 1000].join(",");
    let body = format!(
        r#"{{"account_details":[{{"name":"A","stream_detail":[{{"name":nope}},{streams}]}}]}}"#
    );
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let parsed = parse(&mut BufReader::with_capacity(1 << 20, body.as_bytes()));
        let _ = done.send(parsed.map(drop));
    });
    let parsed = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the parse ends");
    assert!(parsed.unwrap_err().to_string().starts_with("stream 1:"));
}
