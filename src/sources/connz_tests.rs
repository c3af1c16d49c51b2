//! Unit tests of the `/connz` source.
use super::*;

fn conn(cid: u64, name: &str, reason: &str) -> ConnInfo {
    ConnInfo {
        cid,
        name: name.into(),
        account: "A".into(),
        pending_bytes: 0,
        reason: reason.into(),
    }
}

#[test]
fn counts_slow_consumers_once_and_caps_names() {
    let mut t = ClosedTracker::default();
    let poll = ClosedPoll {
        server_id: "S".into(),
        newest: [3, 2, 1].into(),
        new: vec![
            conn(3, "a", "Slow Consumer (Pending Bytes)"),
            conn(2, "b", "Client Closed"),
            conn(1, "c", "Slow Consumer (Write Deadline)"),
        ],
    };
    t.apply(poll, "srv", 1);
    let got: Vec<_> = t
        .counts
        .iter()
        .map(|(k, n)| (k.client_name.as_str(), k.reason, *n))
        .collect();
    assert_eq!(
        got,
        vec![
            (OVERFLOW_NAME, "write_deadline", 1),
            ("a", "pending_bytes", 1)
        ]
    );
    assert_eq!(t.known(), ("S".to_string(), [3, 2, 1].into()));
}
