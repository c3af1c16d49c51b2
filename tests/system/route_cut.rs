//! Replica margins when one server of a real 3-node cluster is cut off from
//! the others by the network, not stopped: each server runs in a network
//! namespace of its own, and taking its link down cuts its routes (and its
//! monitoring port, which the HTTP exporter then cannot reach). The
//! leader's view lowers the margins from 1 to 0 and restoring the link
//! restores them, over HTTP and through the system account alike. Needs
//! root and iproute2 (`scripts/install-deps.sh`); without them it fails
//! saying so.
use crate::common;
use crate::replica_margin::{full, one_down, stream_leader, until, watching, FALL_WITHIN};

use common::system_polling::ACCOUNTS;

#[tokio::test]
async fn margins_fall_when_a_server_is_cut_off_from_its_routes_and_come_back() {
    let (servers, net) = nats_test_server::cluster_in_namespaces(3, ACCOUNTS);
    let (http, system) = watching(&servers).await;
    let both = [("http", &http), ("system", &system)];

    // The victim: a follower of the stream, not the server the system
    // account's connection goes through.
    let leader = stream_leader(&servers[0]);
    let victim = (1..3)
        .find(|i| format!("n{i}") != leader)
        .expect("a follower besides n0");
    println!("stream leader {leader}, victim n{victim}");

    for round in 1..=2 {
        net.cut(victim);
        let took = until(&both, FALL_WITHIN, "margin 0 after the cut", one_down).await;
        println!("round {round}: cut to margin 0 in {took:.1?} s");
        net.restore(victim);
        until(&both, 20, "margin 1 after the link came back", full).await;
    }
}
