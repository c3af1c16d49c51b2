//! What an alert sees while the configuration is read again and again: a
//! consumer stopped (messages wait, nobody reads) among 2,000 others, the
//! exporter reading the configuration every 2 s (`--jsz-config-interval`).
//! Every scrape during the stall must carry the consumer's status series
//! (`nats_delivery_consumer_status{status="stopped"}`, what
//! NatsJetStreamConsumerStopped reads): a scrape without it makes Prometheus
//! mark the series stale, and the alert's `for` starts again.
//!
//! The series as served, one sample per scrape, is then fed to promtool
//! with the alert as `alerts/pressure.rules.yml` writes it, the scrapes laid
//! 30 s apart (a common Prometheus scrape interval; the test's own scrapes
//! run back to back): the alert must fire at its `for` after the first
//! scrape, not a step before. The same series with one scrape lost in the middle must not
//! fire then: the check can see a lost scrape. Scaled down from the issue's
//! 100,000 consumers and 10 minutes; the benchmarks cover the size.
use crate::common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use nats_test_server::promtool;
use nats_test_server::sample::{label, samples, value};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

/// Other streams, each with this many consumers.
const STREAMS: usize = 20;
const CONSUMERS_PER_STREAM: usize = 100;

/// The least scrapes after the stall is first seen; promtool lays them
/// `STEP_SECONDS` apart, so they span more than the alert's `for` (5m).
const SCRAPES: usize = 14;
const STEP_SECONDS: u64 = 30;

/// The alert under test and the rule file that holds it.
const ALERT: &str = "NatsJetStreamConsumerStopped";
const RULES: &str = include_str!("../../alerts/pressure.rules.yml");

#[tokio::test(flavor = "multi_thread")]
async fn no_scrape_loses_a_stalled_consumer_while_configuration_is_read_again() {
    let server = NatsServer::builder().jetstream().start();
    let js = jetstream::new(async_nats::connect(server.client_url()).await.unwrap());
    let consumer = |name: String| durable(&name, 1000);
    common::make_streams(&js, 0..STREAMS, CONSUMERS_PER_STREAM, consumer, false).await;
    let stall = js
        .create_stream(stream::Config {
            name: "STALL".into(),
            subjects: vec!["stall.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    stall
        .create_consumer(durable("stopped", 1000))
        .await
        .unwrap();
    stall.create_consumer(durable("canary", 100)).await.unwrap();
    common::publish_acked(&js, (0..3).map(|i| format!("stall.{i}")), "x").await;
    // A long timeout: what is under test is the refresh, not a loaded
    // machine's slow reply (a late read is config_read_fails.rs's case).
    let exporter = common::exporter(
        &[server.monitor_url()],
        &[
            "--sources",
            "varz,jsz",
            "--jsz-config-interval",
            "2s",
            "--consumer-status-window",
            "3s",
            "--timeout",
            "30s",
        ],
    );
    Wait::secs("the exporter to say STALL/stopped is stopped", 120)
        .every(Duration::from_millis(200))
        .until_async(async || stopped(&common::scrape(&exporter).await))
        .await;
    let (served, read_twice) = scrapes_during_the_stall(&exporter, &stall).await;
    let reads = served.iter().filter(|s| s.config_read == Some(1.0)).count();
    let slowest = served.iter().map(|s| s.took).fold(0.0, f64::max);
    eprintln!(
        "{} scrapes in {:.1} s (the slowest {slowest:.3} s), {reads} of them read the configuration",
        served.len(),
        served.last().map_or(0.0, |s| s.at)
    );
    let lost: Vec<&Scrape> = served.iter().filter(|s| s.stopped.is_none()).collect();
    assert!(
        lost.is_empty(),
        "{} of {} scrapes lost the stall series:\n{served:#?}",
        lost.len(),
        served.len()
    );
    assert!(
        read_twice,
        "no two configuration reads seen in {} scrapes during the stall:\n{served:#?}",
        served.len()
    );
    assert_fires_on_time(&served);
}

/// One scrape: when it began (seconds since the first) and how long it
/// took, the stall series, whether `/jsz` was up and whether the poll read
/// the configuration.
#[derive(Debug)]
#[allow(dead_code, reason = "printed when the test fails")]
struct Scrape {
    at: f64,
    took: f64,
    stopped: Option<(String, f64)>,
    jsz_up: Option<f64>,
    config_read: Option<f64>,
}

/// Scrapes back to back, at least [`SCRAPES`] times and until two changes of
/// the canary's configuration were seen (each seen only through a
/// configuration read made during the stall), for two minutes at most;
/// what each scrape served, and whether both changes were seen.
async fn scrapes_during_the_stall(
    exporter: &nats_delivery_exporter::Exporter,
    stall: &stream::Stream,
) -> (Vec<Scrape>, bool) {
    let start = Instant::now();
    let mut served = Vec::new();
    // The canary's max_ack_pending: 100, then 101 and 102 set in turn.
    let mut wanted = 100.0;
    let read_twice = Wait::secs("two configuration reads during the stall", 120)
        .every(Duration::ZERO)
        .try_until_async(async || {
            let began = start.elapsed().as_secs_f64();
            let text = common::scrape(exporter).await;
            let of = |name: &str, labels: &[(&str, &str)]| value(&text, name, labels);
            served.push(Scrape {
                at: began,
                took: start.elapsed().as_secs_f64() - began,
                stopped: stopped(&text),
                jsz_up: of("nats_delivery_up", &[("source", "jsz")]),
                config_read: of("nats_delivery_jsz_config_read", &[]),
            });
            let canary = [("stream", "STALL"), ("consumer", "canary")];
            let seen = of("nats_delivery_consumer_max_ack_pending", &canary);
            if seen == Some(wanted) && wanted < 102.0 && served.len() > 2 {
                wanted += 1.0;
                let config = durable("canary", wanted as i64);
                stall.update_consumer(config).await.unwrap();
            }
            (seen == Some(102.0) && served.len() >= SCRAPES).then_some(())
        })
        .await;
    (served, read_twice.is_ok())
}

/// The stall series in `text`, if it is there: its labels as written and
/// its value.
fn stopped(text: &str) -> Option<(String, f64)> {
    let labels = [
        ("stream", "STALL"),
        ("consumer", "stopped"),
        ("status", "stopped"),
    ];
    let mut found = samples(text, "nats_delivery_consumer_status", &labels);
    assert!(found.len() < 2, "one stall series: {found:?}");
    found.pop()
}

/// The served series makes promtool fire the alert at its `for`, not a
/// step before; with one scrape lost in the middle, not at its `for`.
fn assert_fires_on_time(served: &[Scrape]) {
    let (rule, for_seconds) = alert_rule(ALERT);
    let rules = format!("groups:\n  - name: stall\n    rules:\n{rule}");
    // The series' labels as served (every scrape served the same ones).
    let labels = served[0].stopped.as_ref().expect("served").0.clone();
    let values: Vec<String> = served
        .iter()
        .map(|s| match &s.stopped {
            Some((l, v)) if *l == labels => v.to_string(),
            Some((l, _)) => panic!("the stall series changed labels: {l} after {labels}"),
            None => "stale".into(),
        })
        .collect();
    let fire = for_seconds / STEP_SECONDS;
    assert!(served.len() as u64 > fire, "the scrapes span the `for`");
    let account = label(&labels, "account").expect("an account label");
    let firing = format!(
        "[{{exp_labels: {{severity: warning, account: '{account}', stream: STALL, consumer: stopped}}}}]"
    );
    let checks = [(fire - 1, "[]"), (fire, firing.as_str())];
    let test = rule_test(&labels, &values, &checks);
    let (passed, said) = promtool::test_rules(&[("stall.rules.yml", &rules)], &test);
    assert!(passed, "promtool on the served series:\n{said}\n{test}");
    // The control: the same series with one scrape lost (a stale marker).
    let mut gap = values.clone();
    gap[values.len() / 4] = "stale".into();
    let test = rule_test(&labels, &gap, &[(fire, "[]")]);
    let (passed, said) = promtool::test_rules(&[("stall.rules.yml", &rules)], &test);
    assert!(passed, "promtool on the series with a gap:\n{said}\n{test}");
}

/// A promtool unit test of the status series with `labels` (as written
/// between braces) and `values` (one a step), with the alert's expected
/// firing alerts at each step of `checks`.
fn rule_test(labels: &str, values: &[String], checks: &[(u64, &str)]) -> String {
    let series = format!("nats_delivery_consumer_status{{{labels}}}");
    let mut test = format!(
        "rule_files: [stall.rules.yml]\nevaluation_interval: {STEP_SECONDS}s\ntests:\n  - interval: {STEP_SECONDS}s\n    input_series:\n      - series: {}\n        values: '{}'\n    alert_rule_test:\n",
        serde_json::to_string(&series).expect("a string encodes"),
        values.join(" ")
    );
    for (step, alerts) in checks {
        let at = step * STEP_SECONDS;
        test.push_str(&format!(
            "      - eval_time: {at}s\n        alertname: {ALERT}\n        exp_alerts: {alerts}\n"
        ));
    }
    test
}

/// The rule of alert `name` in `alerts/pressure.rules.yml` without its
/// annotations (the lines from `- alert:` to `annotations:`), and its
/// `for` in seconds (minutes in that file).
fn alert_rule(name: &str) -> (String, u64) {
    let start = format!("- alert: {name}");
    let lines: Vec<&str> = RULES
        .lines()
        .skip_while(|l| l.trim() != start)
        .take_while(|l| l.trim() != "annotations:")
        .collect();
    assert!(!lines.is_empty(), "{name} in alerts/pressure.rules.yml");
    let minutes = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("for: "))
        .and_then(|f| f.strip_suffix('m'))
        .and_then(|m| m.parse::<u64>().ok())
        .expect("the alert's `for` in minutes");
    (lines.join("\n") + "\n", minutes * 60)
}

fn durable(name: &str, max_ack_pending: i64) -> pull::Config {
    pull::Config {
        durable_name: Some(name.into()),
        max_ack_pending,
        ack_wait: Duration::from_secs(3600),
        ..Default::default()
    }
}
