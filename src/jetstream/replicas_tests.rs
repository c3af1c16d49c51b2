use super::*;
use crate::sources::jsz::replicas::ReplicaCounts;
use crate::sources::jsz::ClusterInfo;
use crate::sources::jsz::{AccountDetail, ConsumerInfo, StreamDetail};

fn cluster(leader: &str, listed: u8, current: u8) -> Option<ClusterInfo> {
    Some(ClusterInfo {
        leader: leader.into(),
        leader_since: f64::NAN,
        replicas: ReplicaCounts {
            listed,
            current,
            offline: 0,
            lag: 0,
        },
    })
}

/// The view that counts when `server` alone lists a group with `cluster`.
fn one(cluster: Option<ClusterInfo>, server: Option<&str>) -> Option<GroupView> {
    let cluster = cluster.as_ref();
    GroupView::of(&[crate::sources::jsz::view::view(cluster, server, false)])
}

/// One server's poll of stream S (its cluster as given) with consumer c.
fn poll(stream: Option<ClusterInfo>, consumer: Option<ClusterInfo>) -> JszPoll {
    JszPoll {
        now: None,
        accounts: vec![AccountDetail {
            name: "A".into(),
            stream_detail: vec![StreamDetail {
                name: "S".into(),
                cluster: stream,
                consumer_detail: vec![ConsumerInfo {
                    name: "c".into(),
                    cluster: consumer,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        config_read: true,
        config_read_failures: 0,
        ..Default::default()
    }
}

#[test]
fn margins_from_the_leaders_view() {
    // R3 led by n1 with both followers current: margin 1.
    let v = one(cluster("n1", 2, 2), Some("n1")).unwrap();
    assert_eq!((v.replicas, v.current, v.margin()), (3, 3, 1));
    // One follower gone: 0, one more failure stops it.
    let v = one(cluster("n1", 2, 1), Some("n1")).unwrap();
    assert_eq!(v.margin(), 0);
    // Both gone, the leader still claiming: -1.
    let v = one(cluster("n1", 2, 0), Some("n1")).unwrap();
    assert_eq!(v.margin(), -1);
    // R5 with 2 followers gone: 3 current, quorum 3.
    let v = one(cluster("n1", 4, 2), Some("n1")).unwrap();
    assert_eq!(v.margin(), 0);
    // A follower's view does not count; an R1 group has no margin.
    assert_eq!(one(cluster("n1", 2, 1), Some("n2")), None);
    assert_eq!(one(cluster("n1", 0, 0), Some("n1")), None);
    // Nobody leads: every replica listed, none current, margin -2.
    let v = one(cluster("", 3, 1), Some("n2")).unwrap();
    assert_eq!(
        (v.replicas, v.current, v.margin(), v.led),
        (3, 0, -2, false)
    );
}

#[test]
fn failures_tolerated_follow_the_groups_size_alone() {
    // (followers listed, current): R2, R3, R4, R5 all current, then R3 and
    // R2 with a follower lost: the tolerance is the size's, the margin falls.
    let size = |listed, current| {
        let v = one(cluster("n1", listed, current), Some("n1")).unwrap();
        (v.replicas, v.failures_tolerated(), v.margin())
    };
    assert_eq!(size(1, 1), (2, 0, 0));
    assert_eq!(size(2, 2), (3, 1, 1));
    assert_eq!(size(3, 3), (4, 1, 1));
    assert_eq!(size(4, 4), (5, 2, 2));
    assert_eq!(size(2, 1), (3, 1, 0));
    assert_eq!(size(1, 0), (2, 0, -1));
    // Nobody leads: still the size's.
    let v = one(cluster("", 3, 1), None).unwrap();
    assert_eq!((v.failures_tolerated(), v.margin()), (1, -2));
}

#[test]
fn the_leaders_view_wins_over_a_leaderless_one() {
    let (a, b) = (
        poll(cluster("", 3, 1), cluster("", 3, 1)),
        poll(cluster("n2", 2, 1), cluster("n3", 2, 2)),
    );
    let polls = [Some((Some("n1"), &a)), Some((Some("n2"), &b))];
    let g = groups(&polls);
    let s = &g[&("A", "S")];
    assert_eq!(s.stream.map(|v| v.margin()), Some(0));
    // The consumer's leader n3 was not polled: n1 saw it leaderless.
    assert_eq!(s.consumers["c"].margin(), -2);
    // Polled the other way round, the same.
    let polls = [Some((Some("n2"), &b)), Some((Some("n1"), &a))];
    assert_eq!(
        groups(&polls)[&("A", "S")].stream.map(|v| v.margin()),
        Some(0)
    );
}

#[test]
fn streams_outside_a_cluster_have_no_replica_series() {
    let p = poll(None, None);
    assert!(groups(&[Some((Some("n1"), &p))]).is_empty());
    assert_eq!(series(&[Some((Some("n1"), &p))]), 0);
}
