//! A server stalled (SIGSTOP) under the canary's reader. Its pulls ask for
//! a heartbeat every second, and async-nats reports a window of two
//! without anything as a missed heartbeat. One such window is a stalled
//! server or machine as often as a dead reading: the reader reads on. The
//! second in a row ends the reading, which is set up again past the last
//! message read (as async-nats' ordered consumer does).
use crate::advisories_support;
use crate::canary::{errors, Canary};

use std::time::Duration;

/// Stops the server for `stall` once 20 messages came back, then waits
/// for 30 more; returns the exposition then.
async fn stall_under_the_reader(stall: Duration) -> (String, crate::canary::Counts) {
    let s = advisories_support::server();
    // A deadline no stall here reaches: nothing may count lost or late.
    let canary = Canary::start_fast(&s.client_url(), "20s");
    let before = canary
        .until("APP", "20 messages back", 30, |c| c.received >= 20.0)
        .await;
    s.signal("-STOP");
    // The stall itself, the premise of the test (not a wait for a fact).
    tokio::time::sleep(stall).await;
    s.signal("-CONT");
    let after = canary
        .until("APP", "30 more back", 60, |c| {
            c.received >= before.received + 30.0
        })
        .await;
    let text = canary.text();
    canary.stop().await;
    println!("before {before:?}\nafter {after:?}");
    assert_eq!((after.lost, after.late), (0.0, 0.0), "{after:?}");
    (text, after)
}

/// 2.6 s: the first window (2 s from the last message) passes while the
/// server is stopped; the second would end 1.3 s after it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stalled_for_one_heartbeat_window_is_read_on() {
    let (text, _) = stall_under_the_reader(Duration::from_millis(2600)).await;
    assert_eq!(errors(&text, "APP", "read"), 0.0, "{text}");
}

/// 6 s: two windows in a row; the reading is set up again, and what was
/// sent meanwhile comes back all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stalled_for_two_heartbeat_windows_is_read_again() {
    let (text, _) = stall_under_the_reader(Duration::from_secs(6)).await;
    assert!(errors(&text, "APP", "read") >= 1.0, "{text}");
}
