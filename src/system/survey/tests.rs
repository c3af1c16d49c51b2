use super::roster::FORGET_MISSING_AFTER;
use super::*;

use std::time::{Duration, Instant};

fn answer(name: &str) -> Answer {
    Answer {
        server: ServerInfo {
            name: name.to_string(),
            id: format!("ID-{name}"),
            ..ServerInfo::default()
        },
        data: Ok(Bytes::from_static(b"{}")),
    }
}

#[test]
fn a_reply_hands_over_its_data_as_sent() {
    let reply = br#"{"server":{"name":"n1","host":"0.0.0.0","id":"NABC","cluster":"C","ver":"2.12.8","seq":7,"jetstream":true,"time":"2026-01-01T00:00:00Z"},"data":{"server_id":"NABC", "mem": 5}}"#;
    let a = parse_reply(reply).unwrap();
    assert_eq!(a.server.name, "n1");
    assert_eq!(a.server.id, "NABC");
    assert_eq!(a.server.cluster.as_deref(), Some("C"));
    assert_eq!(a.server.version, "2.12.8");
    assert_eq!(
        a.data.unwrap(),
        Bytes::from_static(br#"{"server_id":"NABC", "mem": 5}"#)
    );
}

#[test]
fn a_server_error_is_kept_as_the_servers() {
    let reply =
        br#"{"server":{"name":"n1","id":"N"},"error":{"code":500,"description":"bad options"}}"#;
    let a = parse_reply(reply).unwrap();
    let expected = ServerError {
        code: 500,
        description: "bad options".into(),
    };
    assert_eq!(a.data.unwrap_err(), expected);
}

#[test]
fn what_is_not_a_server_reply_is_an_error() {
    for garbage in [
        &b""[..],
        b"null",
        b"{}",
        b"[1]",
        b"{\"server\":5}",
        b"\xff\xfe",
    ] {
        assert!(
            matches!(parse_reply(garbage), Err(ReplyError::Envelope(_))),
            "{garbage:?}"
        );
    }
    let empty = br#"{"server":{"name":"n1","id":"N"}}"#;
    assert_eq!(
        parse_reply(empty).unwrap_err(),
        ReplyError::Empty("n1".into())
    );
}

#[test]
fn servers_seen_once_are_expected_and_missing_when_silent() {
    let mut roster = Roster::new(0);
    assert_eq!(roster.expected(), 0);
    let now = Instant::now();
    let first = roster.account(vec![answer("a"), answer("b"), answer("c")], 0, 0, now);
    assert_eq!(
        (first.answers.len(), first.missing.len(), first.expected),
        (3, 0, 3)
    );
    let second = roster.account(vec![answer("c"), answer("a")], 1, 2, now);
    assert_eq!(second.answers.len(), 2);
    let missing: Vec<_> = second.missing.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(missing, ["b"]);
    assert_eq!(
        (second.expected, second.broken, second.late_total),
        (3, 1, 2)
    );
}

#[test]
fn a_server_answering_twice_counts_once() {
    let mut roster = Roster::new(5);
    let outcome = roster.account(
        vec![answer("a"), answer("a"), answer("b")],
        0,
        0,
        Instant::now(),
    );
    assert_eq!(outcome.answers.len(), 2);
    assert_eq!(outcome.duplicates, 1);
    // Five given, two seen: the count given stands, nothing named missing.
    assert_eq!((outcome.expected, outcome.missing.len()), (5, 0));
}

#[test]
fn a_server_silent_for_the_bound_is_forgotten() {
    let mut roster = Roster::new(0);
    let start = Instant::now();
    roster.account(vec![answer("a"), answer("b")], 0, 0, start);
    // One second short of the bound: still missing, still expected.
    let almost = start + FORGET_MISSING_AFTER - Duration::from_secs(1);
    let before = roster.account(vec![answer("a")], 0, 0, almost);
    let names: Vec<_> = before.missing.iter().map(|s| s.name.as_str()).collect();
    assert_eq!((names, before.expected), (vec!["b"], 2));
    // At the bound: forgotten (scaled away), no longer missing or expected.
    let after = roster.account(vec![answer("a")], 0, 0, start + FORGET_MISSING_AFTER);
    assert_eq!((after.missing.len(), after.expected), (0, 1));
    // A server that answers again is seen anew.
    let back = roster.account(
        vec![answer("a"), answer("b")],
        0,
        0,
        almost + FORGET_MISSING_AFTER,
    );
    assert_eq!((back.missing.len(), back.expected), (0, 2));
}

#[test]
fn replies_routed_to_a_survey_but_not_read_when_it_ends_are_late() {
    let mut routing = Routing::default();
    let (to, mut replies) = mpsc::unbounded_channel();
    routing.current = Some((1, to.clone()));
    let reply = |name: &str| {
        Bytes::from(format!(
            r#"{{"server":{{"name":"{name}","id":"ID-{name}"}},"data":{{}}}}"#
        ))
    };
    // The survey expects one server: it reads "a" and ends, while "b"
    // and a broken reply wait in its channel.
    for payload in [reply("a"), reply("b"), Bytes::from_static(b"garbage")] {
        to.send(payload).unwrap();
    }
    assert!(replies.try_recv().is_ok());
    routing.end(&mut replies);
    assert!(routing.current.is_none());
    assert_eq!(routing.late, 2);
    let late: Vec<_> = routing
        .late_servers
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(late, ["b"]);
}
