//! The false count once seen in the 3-node cluster test (2.11.11): after
//! the server leading a consumer was killed, the server elected in its
//! place named itself leader before it had taken over (Raft leader, no
//! `leader_since` yet) and answered with a follower's figures,
//! `num_pending` 0 where the truth was 6. Taken twice in a row as the
//! consumer's state, the stream's two interior deletes (one below the
//! delivered position) looked like two unread ones: one removal too many.

use super::*;
use crate::sources::jsz::{select_leaders, Jsz, JszPoll};
use crate::sources::unix_seconds;

/// Server `server`'s poll: stream LIMITED (31..40 stored, 32 and 35
/// deleted) led by c, and consumer "reader" (ack policy none, delivered
/// 33) as `leader` names it, since `since`, with `pending`.
fn poll(leader: &str, since: Option<&str>, pending: u64, reports: bool) -> JszPoll {
    let since = since.map_or(String::new(), |t| format!(r#","leader_since":"{t}""#));
    let json = format!(
        r#"{{"now":"2026-01-01T00:00:10Z","account_details":[{{"name":"APP","stream_detail":[{{
        "name":"LIMITED","cluster":{{"leader":"c","leader_since":"2026-01-01T00:00:00Z",
        "replicas":[{{"current":true}},{{"current":true}}]}},
        "state":{{"messages":8,"first_seq":31,"last_seq":40,"num_deleted":2}},
        "consumer_detail":[{{"name":"reader","cluster":{{"leader":"{leader}"{since},
        "replicas":[{{"current":true}},{{"current":false}}]}},
        "config":{{"durable_name":"reader","ack_policy":"none"}},"num_pending":{pending},
        "delivered":{{"consumer_seq":21,"stream_seq":33}},
        "ack_floor":{{"consumer_seq":21,"stream_seq":33}}}}]}}]}}]}}"#
    );
    let jsz: Jsz = serde_json::from_str(&json).unwrap();
    JszPoll {
        now: unix_seconds(&jsz.now),
        accounts: jsz.account_details,
        config_read: true,
        reports_leader_since: reports,
        ..Default::default()
    }
}

/// The count after each round of polls of servers b and c (a was killed),
/// each round as (b's poll, c's poll), every round a new scrape.
fn counted(rounds: &[[JszPoll; 2]]) -> Vec<u64> {
    let mut health = ConsumerHealth::new(std::time::Duration::from_secs(120));
    let mut out = Vec::new();
    for (i, [b, c]) in rounds.iter().enumerate() {
        let named = [Some((Some("b"), b)), Some((Some("c"), c))];
        let plain = [Some(b), Some(c)];
        let (streams, consumers) = select_leaders(&named, &[]).rows(&plain, &Default::default());
        let now = 100.0 + i as f64;
        let rows = health.update((&streams, &consumers), now, &Replies::new());
        out.push(rows.first().map_or(u64::MAX, |r| r.removed().messages));
    }
    out
}

const SINCE: &str = "2026-01-01T00:00:05Z";

#[test]
fn a_leader_not_yet_serving_is_not_the_consumers_state() {
    for reports in [true, false] {
        // b serves: pending 6 (34, 36..40); c follows.
        let served = || {
            [
                poll("b", Some(SINCE), 6, reports),
                poll("b", None, 0, reports),
            ]
        };
        // b elected, not yet serving: no `leader_since` and a follower's 0.
        let taking_over = || [poll("b", None, 0, reports), poll("b", None, 0, reports)];
        let rounds = [
            served(),
            taking_over(),
            taking_over(),
            taking_over(),
            served(),
        ];
        let counts = counted(&rounds);
        // While b takes over the consumer has no leader's view: no row
        // (u64::MAX here), never a count; 35 was open before (not counted).
        assert_eq!(counts, [0, u64::MAX, u64::MAX, u64::MAX, 0], "{reports}");
    }
}
