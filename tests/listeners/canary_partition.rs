//! The canary's connection cut by the network: its server runs in a
//! network namespace whose link is taken down, so packets vanish and
//! neither side is told (a partition, not a closed connection). Needs root
//! and iproute2, as `tests/system/route_cut.rs`.
//!
//! Lost is defined by the deadline alone: a message not read back within
//! `--canary-deadline` of its publish is lost, whether its publish was
//! refused, went unanswered or its delivery was held up. Every message sent
//! while the link is down and more than a deadline before it comes back
//! is lost, so the loss is at least those; and at every reading `produced
//! == received + lost + pending`, so no message is counted twice or not at
//! all.
use crate::advisories_support::ACCOUNTS;
use crate::canary::{errors, Canary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_counted_as_loss_and_the_canary_comes_back() {
    let (s, net) = nats_test_server::server_in_namespace(ACCOUNTS);
    let url = s.client_url();
    let canary = Canary::start(&[
        "--nats-servers",
        &url,
        "--nats-account",
        "APP=user:app:app-secret",
        "--canary-interval",
        "100ms",
        "--canary-deadline",
        "2s",
    ]);
    let healthy = canary
        .until("APP", "20 messages back", 30, |c| c.received >= 20.0)
        .await;
    assert_eq!(healthy.lost, 0.0);

    net.cut(0);
    let cut = canary.counts("APP");
    // 20 messages lost: all sent after the cut (nothing comes back through
    // a link that is down), two seconds of them past their deadline.
    let during = canary
        .until("APP", "20 messages lost while cut", 30, |c| {
            c.lost >= cut.lost + 20.0
        })
        .await;
    assert!(
        during.received <= cut.received + cut.pending,
        "only what was out at the cut may still have come back: {cut:?} {during:?}"
    );
    let unanswered = errors(&canary.text(), "APP", "unanswered");
    assert!(unanswered >= 1.0, "publishes went unanswered");
    net.restore(0);

    let back = canary
        .until(
            "APP",
            "30 messages back after the link came back",
            60,
            |c| c.received >= during.received + 30.0 && c.up == 1.0,
        )
        .await;
    // Every message sent from the cut to `during`'s reading was out past
    // its deadline by then, or will be: none is received.
    assert!(
        back.lost >= during.produced - cut.produced - cut.pending,
        "every message sent while cut is lost: cut {cut:?} during {during:?} back {back:?}"
    );
    let settled = canary
        .until("APP", "30 more back", 30, |c| {
            c.received >= back.received + 30.0
        })
        .await;
    let after = canary
        .until("APP", "30 more back again", 30, |c| {
            c.received >= settled.received + 30.0
        })
        .await;
    println!("healthy {healthy:?}\ncut {cut:?}\nduring {during:?}\nback {back:?}\nafter {after:?}");
    assert_eq!(after.lost, settled.lost, "lost stopped growing");
    canary.stop().await;
}
