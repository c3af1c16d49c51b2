//! A consumer whose group loses its leader keeps the last figures a leader
//! gave, marked, until a leader is back or the bound passes.

use super::*;
use crate::sources::jsz::{select_leaders, Jsz, JszPoll};

/// A poll of stream S (its `cluster` block, `"{}"`-wrapped JSON or empty
/// for none) with consumer C (`consumer` likewise) at `pending`.
fn poll(stream: &str, consumer: &str, pending: u64) -> JszPoll {
    let json = format!(
        r#"{{"now":"2026-01-01T00:00:10Z","account_details":[{{"name":"A","stream_detail":[{{
        "name":"S"{stream},"state":{{"messages":30,"first_seq":1,"last_seq":30}},
        "consumer_detail":[{{"name":"C"{consumer},"num_pending":{pending},
        "config":{{"durable_name":"C","ack_policy":"explicit","max_ack_pending":1000}},
        "delivered":{{"stream_seq":0}}}}]}}]}}]}}"#
    );
    let jsz: Jsz = serde_json::from_str(&json).unwrap();
    JszPoll {
        accounts: jsz.account_details,
        reports_leader_since: true,
        ..Default::default()
    }
}

fn led_by(leader: &str) -> String {
    let since = r#""leader_since":"2026-01-01T00:00:00Z""#;
    format!(r#","cluster":{{"leader":"{leader}",{since},"replicas":[{{"current":true}}]}}"#)
}

const LEADERLESS: &str = r#","cluster":{"leader":"","replicas":[{},{},{}]}"#;

/// One scrape of `polls` (server name, poll) at `now`: each consumer's
/// pending count as written, with its mark (None: not written).
fn scrape(last: &mut LastLed, polls: &[(&str, &JszPoll)], now: f64) -> Vec<(u64, Option<f64>)> {
    let named: Vec<_> = polls.iter().map(|(n, p)| Some((Some(*n), *p))).collect();
    let plain: Vec<_> = polls.iter().map(|(_, p)| Some(*p)).collect();
    let mut leaders = select_leaders(&named, &["n1", "n2", "n3"]);
    let held = {
        let none = Default::default();
        let led = leaders.each_row(&plain, &none);
        let orphans = leaders.orphans(&plain);
        last.update(led, (&orphans.0, &orphans.1), now)
    };
    leaders.hold(held.streams.len(), held.consumers.len());
    let (_, consumers) = leaders.rows(&plain, &held.rows());
    let marks: Vec<f64> = held.consumers.iter().map(|h| h.4).collect();
    let led = consumers.len() - marks.len();
    (consumers.iter().enumerate())
        .map(|(i, c)| (c.2.num_pending, i.checked_sub(led).map(|h| marks[h])))
        .collect()
}

#[test]
fn the_last_leaders_figures_are_held_marked_until_the_bound() {
    let mut last = LastLed::default();
    // n1 leads both; n2 and n3 follow (pending 0: a follower's figure).
    let leader = poll(&led_by("n1"), &led_by("n1"), 30);
    let follower = poll(&led_by("n1"), &led_by("n1"), 0);
    let all = [("n1", &leader), ("n2", &follower), ("n3", &follower)];
    assert_eq!(scrape(&mut last, &all, 1000.0), [(30, None)]);
    // n1 and n3 killed, their polls failing: n2 still names n1 for a
    // moment, then no leader at all. Held, marked, scrape after scrape.
    let naming_the_dead = poll(&led_by("n1"), &led_by("n1"), 0);
    let alone = [("n2", &naming_the_dead)];
    assert_eq!(scrape(&mut last, &alone, 1005.0), [(30, Some(5.0))]);
    let survivor = poll(&led_by("n1"), LEADERLESS, 0);
    let alone = [("n2", &survivor)];
    assert_eq!(scrape(&mut last, &alone, 1010.0), [(30, Some(10.0))]);
    assert_eq!(scrape(&mut last, &alone, 1100.0), [(30, Some(100.0))]);
    assert_eq!(scrape(&mut last, &alone, 1000.0 + HOLD), [(30, Some(HOLD))]);
    // Past the bound the series go.
    assert_eq!(scrape(&mut last, &alone, 1000.5 + HOLD), []);
    // A leader back: its figures, unmarked.
    let back = poll(&led_by("n2"), &led_by("n2"), 29);
    assert_eq!(scrape(&mut last, &[("n2", &back)], 1200.0), [(29, None)]);
    // An election under way: the new leader not yet serving (no
    // `leader_since`) beside a follower: held, never its 0.
    let electing = poll(
        &led_by("n2"),
        r#","cluster":{"leader":"n3","replicas":[{}]}"#,
        0,
    );
    let follows = poll(
        &led_by("n2"),
        r#","cluster":{"leader":"n3","replicas":[{},{}]}"#,
        0,
    );
    let polls = [("n2", &follows), ("n3", &electing)];
    assert_eq!(scrape(&mut last, &polls, 1201.0), [(29, Some(1.0))]);
    // A consumer led by a server this exporter does not poll (another
    // exporter's): not held.
    let elsewhere = poll(&led_by("n2"), &led_by("n9"), 0);
    assert_eq!(scrape(&mut last, &[("n2", &elsewhere)], 1202.0), []);
}

#[test]
fn a_stream_without_a_leader_is_held_too() {
    let mut last = LastLed::default();
    let leader = poll(&led_by("n1"), &led_by("n1"), 30);
    let follower = poll(&led_by("n1"), &led_by("n1"), 0);
    let all = [("n1", &leader), ("n2", &follower)];
    scrape(&mut last, &all, 1000.0);
    // n1 polled but naming no leader any more, n2 likewise.
    let leaderless = poll(LEADERLESS, LEADERLESS, 0);
    let polls = [("n1", &leaderless), ("n2", &leaderless)];
    let named: Vec<_> = polls.iter().map(|(n, p)| Some((Some(*n), *p))).collect();
    let plain: Vec<_> = polls.iter().map(|(_, p)| Some(*p)).collect();
    let leaders = select_leaders(&named, &[]);
    let (streams, consumers) = leaders.rows(&plain, &Default::default());
    assert!(streams.is_empty() && consumers.is_empty());
    let orphans = leaders.orphans(&plain);
    let led = (std::iter::empty(), std::iter::empty());
    let held = last.update(led, (&orphans.0, &orphans.1), 1005.0);
    assert_eq!(held.streams.len(), 1);
    let (account, stream, since) = &held.streams[0];
    assert_eq!(
        (account.as_str(), stream.state.messages, *since),
        ("A", 30, 5.0)
    );
    assert_eq!(held.consumers[0].2.num_pending, 30);
    assert_eq!(held.series(), 2);
}
