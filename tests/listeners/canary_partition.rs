//! The canary's connection cut by the network: its server runs in a
//! network namespace whose link is taken down, so packets vanish and
//! neither side is told (a partition, not a closed connection). Needs root
//! and iproute2, as `tests/system/route_cut.rs`.
//!
//! Lost is defined by the deadline alone: a message not read back within
//! `--canary-deadline` of its publish is lost, whether its publish was
//! refused, went unanswered or its delivery was held up (one read back
//! after it is late: the client delivers its publishes once the link is
//! back, and the reader set up again gets them). Every message sent
//! while the link is down and more than a deadline before it comes back
//! is lost, so the loss is at least those; and at every reading `produced
//! == received + lost + pending`, so no message is counted twice or not at
//! all. NatsDeliveryCanaryLoss is run with promtool on the lost counts
//! the test read.
use crate::advisories_support::ACCOUNTS;
use crate::canary::{errors, Canary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_counted_as_loss_and_the_canary_comes_back() {
    let (s, net) = nats_test_server::server_in_namespace(ACCOUNTS);
    let canary = Canary::start_fast(&s.client_url(), "2s");
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
    // What was lost at `during` stays lost (a message read back after its
    // deadline is late, lost already). What was still out then comes back
    // in time or is lost too: a cut of seconds leaves the connection open,
    // the client's publishes reach the server once the link is back, and
    // the reader, set up again past the last message it read, gets them.
    assert!(
        back.lost >= during.lost && back.received + back.lost >= during.produced,
        "every message sent while cut is settled: cut {cut:?} during {during:?} back {back:?}"
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
    let readings = [healthy, cut, during, back, settled, after].map(|c| c.lost);
    alert_fires_on(&readings);
}

/// Runs NatsDeliveryCanaryLoss (alerts/opt-in.rules.yml) with promtool on
/// `lost`, the lost counts this test read, one a minute: the alert fires
/// at the last, with the loss as its value, and not before the loss.
fn alert_fires_on(lost: &[f64]) {
    let dir = tempfile::tempdir().unwrap();
    let rules = nats_test_server::workspace_root().join("alerts/opt-in.rules.yml");
    let values: Vec<String> = lost.iter().map(|v| v.to_string()).collect();
    let last = lost.len() - 1;
    let total = lost[last] - lost[0];
    let test = format!(
        r#"rule_files: ["{rules}"]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'nats_delivery_canary_lost_messages_total{{job="nats-delivery-exporter",instance="exporter:7777",account="APP"}}'
        values: '{values}'
    alert_rule_test:
      - eval_time: 0m
        alertname: NatsDeliveryCanaryLoss
        exp_alerts: []
      - eval_time: {last}m
        alertname: NatsDeliveryCanaryLoss
        exp_alerts:
          - exp_labels: {{severity: warning, category: loss_event, account: APP}}
            exp_annotations:
              summary: "The delivery canary lost messages in account APP"
              description: "The exporter's canary lost {total} of its own messages in account APP over the last 10 minutes: published to its stream and not read back within its deadline. Something between the exporter and the servers, or inside them, is losing or holding up messages. (Read only with --canary.)"
              runbook_url: https://github.com/nats-delivery-exporter/nats-delivery-exporter/blob/main/docs/runbook.md#natsdeliverycanaryloss
"#,
        rules = rules.display(),
        values = values.join(" "),
    );
    let file = dir.path().join("canary.test.yml");
    std::fs::write(&file, &test).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .expect("promtool on PATH (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "NatsDeliveryCanaryLoss on {lost:?}:\n{}{}\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
