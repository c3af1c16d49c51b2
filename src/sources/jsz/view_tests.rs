//! The one rule, case by case, on hand-written views.

use super::*;

fn counts(listed: u8, current: u8) -> ReplicaCounts {
    ReplicaCounts {
        listed,
        current,
        offline: 0,
        lag: 0,
    }
}

/// A serving claim by `server`, leader since `since` (NaN: not given),
/// listing 2 replicas of which `current` are current.
fn claim(server: &str, since: f64, current: u8) -> View<'_> {
    View::Claims(Claim {
        server,
        since,
        serving: true,
        replicas: counts(2, current),
    })
}

const NONE: f64 = f64::NAN;

#[test]
fn what_one_server_says_of_a_group() {
    let mut c = ClusterInfo {
        leader: "a".into(),
        ..Default::default()
    };
    assert_eq!(view(None, Some("a"), true), View::Unclustered);
    assert_eq!(view(Some(&c), Some("b"), true), View::LedBy("a"));
    // A server whose name is unknown cannot be shown to lead anything.
    assert_eq!(view(Some(&c), None, true), View::LedBy("a"));
    // Its own name with no replica and no `leader_since`: a group without
    // a Raft node (a server outside a cluster), serving.
    let serving = |v: View| matches!(v, View::Claims(c) if c.serving);
    assert!(serving(view(Some(&c), Some("a"), true)));
    // Listing replicas without `leader_since`: serving only on a server
    // that does not report it (before 2.11).
    c.replicas = counts(2, 2);
    assert!(!serving(view(Some(&c), Some("a"), true)));
    assert!(serving(view(Some(&c), Some("a"), false)));
    c.leader_since = 100.0;
    assert!(serving(view(Some(&c), Some("a"), true)));
    c.leader = "".into();
    c.replicas = counts(3, 1);
    assert_eq!(
        view(Some(&c), Some("a"), true),
        View::Leaderless(counts(3, 1))
    );
}

#[test]
fn no_claim_no_view_counts_but_outside_a_cluster() {
    let leaderless = View::Leaderless(counts(3, 0));
    // A server outside a cluster: its entry counts; several such servers,
    // the first polled.
    assert_eq!(choose(&[View::Unclustered]), Some(0));
    assert_eq!(choose(&[View::Unclustered, View::Unclustered]), Some(0));
    // A server recovering after a restart (no cluster block, its figures
    // of before) beside servers that list the group: it never counts.
    assert_eq!(choose(&[View::Unclustered, View::LedBy("a")]), None);
    assert_eq!(choose(&[View::Unclustered, leaderless]), None);
    assert_eq!(choose(&[View::Unclustered, claim("b", NONE, 2)]), Some(1));
    // Followers and leaderless views are never the group's state.
    assert_eq!(choose(&[View::LedBy("a"), View::LedBy("a")]), None);
    assert_eq!(choose(&[leaderless, leaderless]), None);
    assert_eq!(choose(&[]), None);
}

#[test]
fn a_claim_counts_only_while_its_server_serves() {
    assert_eq!(choose(&[View::LedBy("b"), claim("b", 100.0, 1)]), Some(1));
    // A Raft leader that has not yet taken over (no `leader_since` on
    // 2.11+, or a follower's pending count) answers with a follower's figures.
    let mut taking_over = claim("b", NONE, 1);
    if let View::Claims(c) = &mut taking_over {
        c.serving = false;
    }
    assert_eq!(choose(&[View::LedBy("b"), taking_over]), None);
    assert_eq!(choose(&[taking_over]), None);
    // A claim listing no replica while another server lists them: a
    // server that has not made the group's Raft node names itself.
    let no_node = View::Claims(Claim {
        server: "b",
        since: NONE,
        serving: true,
        replicas: counts(0, 0),
    });
    assert_eq!(choose(&[View::LedBy("a"), no_node]), None);
    assert_eq!(choose(&[View::Leaderless(counts(3, 0)), no_node]), None);
    // Alone (an R1 group, or the one server polled) it counts.
    assert_eq!(choose(&[no_node]), Some(0));
}

#[test]
fn of_two_claims_a_stale_one_never_wins() {
    // A frozen leader resumed: it still claims, since long ago, and marks
    // no replica current; a server still names it. The new leader marks
    // its follower current: it wins despite fewer servers naming it.
    let stale = claim("a", 100.0, 0);
    let new = claim("b", 200.0, 1);
    assert_eq!(choose(&[stale, View::LedBy("a"), new]), Some(2));
    assert_eq!(choose(&[new, View::LedBy("a"), stale]), Some(0));
    // Both current: the most servers naming the claimant.
    let (a, b) = (claim("a", 300.0, 1), claim("b", 200.0, 1));
    assert_eq!(choose(&[a, b, View::LedBy("b")]), Some(1));
    // As many each: the latest election.
    assert_eq!(choose(&[b, a]), Some(1));
    assert_eq!(choose(&[a, b]), Some(0));
    // No `leader_since` (before 2.11): the most current marks.
    let (a, b) = (claim("a", NONE, 1), claim("b", NONE, 2));
    assert_eq!(choose(&[a, b]), Some(1));
    // A `leader_since` beats none.
    assert_eq!(choose(&[claim("a", NONE, 2), claim("b", 5.0, 2)]), Some(1));
    // Nothing tells them apart: the first polled, once.
    assert_eq!(choose(&[a, a]), Some(0));
    // The survivor of a lost quorum still claiming, alone: it counts.
    assert_eq!(
        choose(&[claim("c", 100.0, 0), View::Leaderless(counts(3, 0))]),
        Some(0)
    );
}

#[test]
fn a_follower_pending_count_under_a_claim_is_not_served() {
    let json = |pending: u64, config: &str| {
        format!(r#"{{"num_pending":{pending},"delivered":{{"stream_seq":33}}{config}}}"#)
    };
    let stream: StreamDetail = serde_json::from_str(
        r#"{"state":{"first_seq":31,"last_seq":40,"messages":8,"num_deleted":2}}"#,
    )
    .unwrap();
    let unfiltered = r#","config":{"ack_policy":"none"}"#;
    let filtered = r#","config":{"filter_subject":"x.>"}"#;
    let c = |text: String| serde_json::from_str::<ConsumerInfo>(&text).unwrap();
    // 34..40 above the delivered 33, at most 2 of them deleted: 0 pending
    // is a follower's figure.
    assert!(!serves(&c(json(0, unfiltered)), &stream));
    assert!(serves(&c(json(6, unfiltered)), &stream));
    // A subject filter may leave nothing pending; without the
    // configuration nothing can be said.
    assert!(serves(&c(json(0, filtered)), &stream));
    assert!(serves(&c(json(0, "")), &stream));
    // Delivered up to the last, or only deletes above: 0 is right.
    let mut at_end = c(json(0, unfiltered));
    at_end.delivered.stream_seq = 38;
    assert!(serves(&at_end, &stream));
}
