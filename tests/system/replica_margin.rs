//! Replica margins on a real 3-node cluster with an R3 stream and two R3
//! consumers, over HTTP and through the system account side by side: a
//! frozen server (SIGSTOP) lowers the stream's and the consumers' margin
//! from 1 to 0 and SIGCONT restores it; a killed server lowers it and its
//! restart restores it; with two of three servers gone the stream is still
//! reported, below 0.
use crate::common;

use std::time::{Duration, Instant};

use nats_delivery_exporter::Exporter;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::Value;

use common::system_polling::{system_exporter, work_stream, ACCOUNTS};

const STREAM: [(&str, &str); 2] = [("account", "APP"), ("stream", "WORK")];

/// The bound on a margin's fall: the server marks a replica not current
/// after about 10 s without word from it, then a scrape reads it.
pub(super) const FALL_WITHIN: u64 = 25;

/// (stream margin, smallest consumer margin, consumers without margin).
pub(super) type Margins = (Option<f64>, Option<f64>, Option<f64>);

fn margins(text: &str) -> Margins {
    (
        value(text, "nats_delivery_stream_replica_margin", &STREAM),
        value(
            text,
            "nats_delivery_stream_consumer_replica_margin_min",
            &STREAM,
        ),
        value(
            text,
            "nats_delivery_stream_consumers_without_replica_margin",
            &STREAM,
        ),
    )
}

/// Scrapes both exporters until `done` holds for each (at most `secs`);
/// returns how long each took, or what each last showed.
async fn try_until(
    exporters: &[(&str, &Exporter)],
    secs: u64,
    what: &str,
    done: impl Fn(Margins) -> bool,
) -> Result<Vec<f64>, String> {
    let start = Instant::now();
    let mut took = vec![None; exporters.len()];
    Wait::secs(what, secs)
        .every(Duration::from_millis(250))
        .try_until_async(async || {
            let mut seen = Vec::new();
            for (i, (name, e)) in exporters.iter().enumerate() {
                let m = margins(&common::scrape(e).await);
                if took[i].is_none() && done(m) {
                    took[i] = Some(start.elapsed().as_secs_f64());
                }
                seen.push((*name, m));
            }
            match took.iter().all(Option::is_some) {
                true => Ok(()),
                false => Err(seen),
            }
        })
        .await
        .map_err(|seen| format!("{what} within {secs} s: {seen:?}"))?;
    let took: Vec<f64> = took.into_iter().flatten().collect();
    println!("{what}: {took:.1?} s (http, system account)");
    Ok(took)
}

/// [`try_until`], failing the test on a timeout.
pub(super) async fn until(
    exporters: &[(&str, &Exporter)],
    secs: u64,
    what: &str,
    done: impl Fn(Margins) -> bool,
) -> Vec<f64> {
    try_until(exporters, secs, what, done)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Every replica current: the stream's margin 1, its consumers' too.
pub(super) fn full(m: Margins) -> bool {
    m == (Some(1.0), Some(1.0), Some(0.0))
}

/// One server out: the stream at a bare quorum, both consumers too.
pub(super) fn one_down(m: Margins) -> bool {
    m == (Some(0.0), Some(0.0), Some(2.0))
}

/// The work stream made on `servers`, and an exporter over HTTP and one
/// through the system account watching them, once every replica is current.
pub(super) async fn watching(servers: &[NatsServer]) -> (Exporter, Exporter) {
    work_stream(&servers[0].client_url()).await;
    let urls: Vec<String> = servers.iter().map(|s| s.monitor_url()).collect();
    let flags = ["--sources", "varz,jsz", "--timeout", "1s"];
    let http = common::exporter(&urls, &flags);
    let system = system_exporter(&servers[0].client_url(), "varz,jsz").await;
    let both = [("http", &http), ("system", &system)];
    until(&both, 15, "all replicas current", full).await;
    (http, system)
}

/// Kills `server` and starts it again until its replicas are current again
/// (at most 3 starts): a restarted nats-server 2.10.26 can stay unheard by
/// the leader ("Duplicate Route" in both logs), its replica left behind,
/// which the margins must show (0) rather than hide.
async fn restart_until_current(
    server: &mut NatsServer,
    exporters: &[(&str, &Exporter)],
    full: impl Fn(Margins) -> bool + Copy,
) {
    for start in 1..=3 {
        server.kill_and_restart(false);
        match try_until(exporters, 20, "margin 1 after the restart", full).await {
            Ok(_) => return,
            Err(e) => println!("start {start}: a replica left behind, {e}"),
        }
    }
    panic!("the restarted server's replicas not current after 3 starts");
}

/// The stream's leader, as the server at `monitor_url` names it.
pub(super) fn stream_leader(server: &NatsServer) -> String {
    let url = format!("{}/jsz?accounts=true&streams=true", server.monitor_url());
    let jsz: Value = serde_json::from_str(&nats_test_server::http_get(&url)).unwrap();
    let accounts = jsz["account_details"].as_array().unwrap();
    let app = accounts.iter().find(|a| a["name"] == "APP").unwrap();
    app["stream_detail"][0]["cluster"]["leader"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn margins_fall_with_a_frozen_or_killed_server_and_come_back() {
    let mut servers = nats_test_server::cluster(3, ACCOUNTS);
    let (http, system) = watching(&servers).await;
    let both = [("http", &http), ("system", &system)];
    let text = common::scrape(&http).await;
    nats_test_server::reference::assert_documented(&text);

    // The victim: a follower of the stream, not the server the system
    // account's connection goes through.
    let leader = stream_leader(&servers[0]);
    let victim = (1..3)
        .find(|i| format!("n{i}") != leader)
        .expect("a follower besides n0");
    println!("stream leader {leader}, victim n{victim}");

    servers[victim].signal("-STOP");
    until(&both, FALL_WITHIN, "margin 0 after SIGSTOP", one_down).await;
    servers[victim].signal("-CONT");
    until(&both, 15, "margin 1 after SIGCONT", full).await;

    servers[victim].signal("-KILL");
    until(&both, FALL_WITHIN, "margin 0 after SIGKILL", one_down).await;
    restart_until_current(&mut servers[victim], &both, full).await;

    // Two of three gone: no quorum. The stream stays in the output, below 0.
    let other = 3 - victim;
    servers[victim].signal("-KILL");
    servers[other].signal("-KILL");
    let below = |m: Margins| m.0.is_some_and(|v| v < 0.0) && m.1.is_some_and(|v| v < 0.0);
    until(
        &both,
        FALL_WITHIN,
        "margins below 0 with two of three servers gone",
        below,
    )
    .await;
}
