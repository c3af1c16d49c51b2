//! `split::parse` against parsing the whole reply: real replies, pieces of
//! every size, mutations, padding and nesting.

use std::io::BufReader;

use super::*;

/// `parse` over `body` read 7 bytes at a time, so that cuts fall
/// everywhere; as Debug text, to compare with parsing the whole.
fn in_pieces(body: &[u8]) -> Result<String, String> {
    parse(&mut BufReader::with_capacity(7, body)).map(|j| format!("{j:?}"))
}

fn whole(body: &[u8]) -> Result<String, String> {
    parse_whole(body).map(|j| format!("{j:?}"))
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
    assert!(whole(TWO_ACCOUNTS.as_bytes())
        .unwrap()
        .contains("consumer_count: 0 }, consumer_detail: [ConsumerInfo { name: \"C\""));
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
