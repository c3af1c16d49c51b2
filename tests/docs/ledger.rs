//! The consumer dashboard's ledger row, computed by Prometheus' own engine
//! (`promtool test rules`) on series made for it: each column's query becomes
//! a recording rule, and every column of every consumer must equal the figure
//! worked out by hand below, so that both sums close with the right terms.

use crate::promql_check;

use std::process::Command;

use promql_check::{read, root, substitute};
use serde_json::Value;

const LEDGER: &str = "Ledger per consumer over the range";

/// Series over 75 minutes, one sample a minute; the ledger is read at 70m
/// over 1h (`$__range`), so from 10m to 70m. Stream APP/ORDERS stores 10
/// messages a minute: 600 in the range.
/// - mailer: pending 50 -> 20, awaiting acknowledgement 10 -> 15, 100
///   removed (seen by exporter a; exporter b, started at 30m, saw 5), 4 dead,
///   2 terminated by the client (a series new in the range), 9 unacked_deleted.
///   Delivered once or more 600 - 100 + 30 = 530; acknowledged 530 - 5 - 4 - 11 = 510.
/// - audit: exporter a restarted at 32m: removed 0 -> 10, then 0 -> 4 (14).
///   `increase()` reads it, and extrapolates to the range's start unless
///   the counter is 0 there: Prometheus 3's range leaves out the sample at
///   10m (left-open), so from 20 it gave 14.24 where 2.42 gave 14.
/// - fresh: created at 41m: pending 30 and awaiting acknowledgement 3 count
///   from 0; stored is still the stream's 600.
/// - __ephemeral__: folded ephemerals, left out of the ledger.
/// - gone: deleted at 41m, after 40 removals in the range; no row at 70m,
///   though `increase()` over the range still sees its counter.
/// - OPS/JOBS is created at 31m (41 stored by 70m); runner has 1 pending, and
///   nohealth has no removed counter (consumer health off): its derived
///   columns are absent rather than wrong.
const SERIES: &str = r#"
      - series: 'nats_delivery_stream_last_sequence{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS"}'
        values: '0+10x75'
      - series: 'nats_delivery_stream_last_sequence{job="nats-delivery-exporter",instance="b",account="APP",stream="ORDERS"}'
        values: '0+10x75'
      - series: 'nats_delivery_consumer_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="mailer"}'
        values: '50x40 20x35'
      - series: 'nats_delivery_consumer_removed_before_delivery_messages_total{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="mailer"}'
        values: '5x10 5+5x20 105x45'
      - series: 'nats_delivery_consumer_removed_before_delivery_messages_total{job="nats-delivery-exporter",instance="b",account="APP",stream="ORDERS",consumer="mailer"}'
        values: '_x30 0 5x45'
      - series: 'nats_delivery_consumer_ack_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="mailer"}'
        values: '10x40 15x35'
      - series: 'nats_delivery_jetstream_max_deliveries_total{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="mailer"}'
        values: '3x40 7x35'
      - series: 'nats_delivery_jetstream_terminated_total{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="mailer",reason="client"}'
        values: '_x40 2x35'
      - series: 'nats_delivery_jetstream_terminated_total{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="mailer",reason="unacked_deleted"}'
        values: '0x40 9x35'
      - series: 'nats_delivery_consumer_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="audit"}'
        values: '0x75'
      - series: 'nats_delivery_consumer_ack_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="audit"}'
        values: '0x75'
      - series: 'nats_delivery_consumer_removed_before_delivery_messages_total{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="audit"}'
        values: '0x20 0+1x10 _ 0x10 0+1x4 4x30'
      - series: 'nats_delivery_consumer_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="__ephemeral__"}'
        values: '7x75'
      - series: 'nats_delivery_consumer_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="gone"}'
        values: '5x40'
      - series: 'nats_delivery_consumer_removed_before_delivery_messages_total{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="gone"}'
        values: '0+1x40'
      - series: 'nats_delivery_consumer_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="fresh"}'
        values: '_x40 30x35'
      - series: 'nats_delivery_consumer_ack_pending_messages{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="fresh"}'
        values: '_x40 3x35'
      - series: 'nats_delivery_consumer_removed_before_delivery_messages_total{job="nats-delivery-exporter",instance="a",account="APP",stream="ORDERS",consumer="fresh"}'
        values: '_x40 0x35'
      - series: 'nats_delivery_stream_last_sequence{job="nats-delivery-exporter",instance="a",account="OPS",stream="JOBS"}'
        values: '_x30 1+1x45'
      - series: 'nats_delivery_consumer_pending_messages{job="nats-delivery-exporter",instance="a",account="OPS",stream="JOBS",consumer="runner"}'
        values: '_x30 1x45'
      - series: 'nats_delivery_consumer_ack_pending_messages{job="nats-delivery-exporter",instance="a",account="OPS",stream="JOBS",consumer="runner"}'
        values: '_x30 0x45'
      - series: 'nats_delivery_consumer_removed_before_delivery_messages_total{job="nats-delivery-exporter",instance="a",account="OPS",stream="JOBS",consumer="runner"}'
        values: '_x30 0x45'
      - series: 'nats_delivery_consumer_pending_messages{job="nats-delivery-exporter",instance="a",account="OPS",stream="JOBS",consumer="nohealth"}'
        values: '_x30 0x45'
      - series: 'nats_delivery_consumer_ack_pending_messages{job="nats-delivery-exporter",instance="a",account="OPS",stream="JOBS",consumer="nohealth"}'
        values: '_x30 0x45'
"#;

/// The consumers, by account and stream.
const CONSUMERS: [(&str, &str, &str); 5] = [
    ("APP", "ORDERS", "mailer"),
    ("APP", "ORDERS", "audit"),
    ("APP", "ORDERS", "fresh"),
    ("OPS", "JOBS", "runner"),
    ("OPS", "JOBS", "nohealth"),
];

/// Each column's header, and its figure for each consumer in `CONSUMERS`'
/// order (`None`: no row).
const EXPECTED: [(&str, [Option<i64>; 5]); 11] = [
    (
        "stored for it",
        [Some(600), Some(600), Some(600), Some(41), Some(41)],
    ),
    (
        "removed before delivery",
        [Some(100), Some(14), Some(0), Some(0), None],
    ),
    (
        "change in pending",
        [Some(-30), Some(0), Some(30), Some(1), Some(0)],
    ),
    (
        "delivered once or more (derived)",
        [Some(530), Some(586), Some(570), Some(40), None],
    ),
    (
        "acknowledged (derived)",
        [Some(510), Some(586), Some(567), Some(40), None],
    ),
    (
        "change in awaiting acknowledgement",
        [Some(5), Some(0), Some(3), Some(0), Some(0)],
    ),
    (
        "died at max deliveries",
        [Some(4), Some(0), Some(0), Some(0), Some(0)],
    ),
    (
        "terminated: client",
        [Some(2), Some(0), Some(0), Some(0), Some(0)],
    ),
    (
        "terminated: stream_limits",
        [Some(0), Some(0), Some(0), Some(0), Some(0)],
    ),
    (
        "terminated: unacked_deleted",
        [Some(9), Some(0), Some(0), Some(0), Some(0)],
    ),
    (
        "terminated: other",
        [Some(0), Some(0), Some(0), Some(0), Some(0)],
    ),
];

/// The ledger table's queries by their column headers (the `organize`
/// transformation renames `Value #<refId>`), and the panel itself.
fn ledger_columns() -> (Vec<(String, String)>, Value) {
    let dash: Value = serde_json::from_str(&read(
        &root().join("dashboards/nats-delivery-consumer.json"),
    ))
    .expect("the consumer dashboard is JSON");
    let panel = dash["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .find(|p| p["title"] == LEDGER)
        .unwrap_or_else(|| panic!("no panel {LEDGER:?}"))
        .clone();
    let renames = panel["transformations"]
        .as_array()
        .expect("transformations")
        .iter()
        .find(|t| t["id"] == "organize")
        .expect("an organize transformation")["options"]["renameByName"]
        .clone();
    let columns = panel["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| {
            let field = format!("Value #{}", t["refId"].as_str().expect("refId"));
            let header = renames[&field]
                .as_str()
                .unwrap_or_else(|| panic!("{field} not renamed"));
            (
                header.to_string(),
                t["expr"].as_str().expect("expr").to_string(),
            )
        })
        .collect();
    (columns, panel)
}

/// The panel says that the derived columns are derived, and so does each
/// such column's own description.
fn assert_derived_terms_say_so(panel: &Value, columns: &[(String, String)]) {
    let description = panel["description"].as_str().unwrap_or("");
    assert!(
        description.contains("derived by difference"),
        "{description}"
    );
    for (header, _) in columns.iter().filter(|(h, _)| h.ends_with("(derived)")) {
        let says = panel["fieldConfig"]["overrides"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|o| {
                o["matcher"]["options"] == header.as_str()
                    && o["properties"][0]["value"]
                        .as_str()
                        .is_some_and(|v| v.starts_with("Derived by difference"))
            });
        assert!(says, "{header}: its column does not say it is derived");
    }
}

/// The hand-worked figures are themselves a ledger: both sums close.
fn assert_expected_figures_close() {
    for (c, consumer) in CONSUMERS.iter().enumerate() {
        let v = |h: &str| EXPECTED.iter().find(|(x, _)| *x == h).unwrap().1[c];
        let Some(delivered) = v("delivered once or more (derived)") else {
            continue;
        };
        let sum = |pick: &dyn Fn(&str) -> bool| -> i64 {
            EXPECTED
                .iter()
                .filter(|(h, _)| pick(h))
                .map(|(_, vs)| vs[c].unwrap())
                .sum()
        };
        assert_eq!(
            v("stored for it").unwrap(),
            delivered + sum(&|h| h == "removed before delivery" || h == "change in pending"),
            "{consumer:?}"
        );
        let after_delivery = |h: &str| {
            h == "acknowledged (derived)"
                || h == "change in awaiting acknowledgement"
                || h == "died at max deliveries"
                || h.starts_with("terminated: ")
        };
        assert_eq!(delivered, sum(&after_delivery), "{consumer:?}");
    }
}

/// A rule file recording each column as `ledger_<i>`, and a promtool unit
/// test of those records against `EXPECTED`.
fn promtool_files(columns: &[(String, String)]) -> (String, String) {
    let mut rules = String::from("groups:\n  - name: ledger\n    rules:\n");
    let mut tests = format!(
        "rule_files:\n  - ledger.rules.yml\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:{SERIES}    promql_expr_test:\n"
    );
    for (i, ((_, expr), (header, values))) in columns.iter().zip(EXPECTED).enumerate() {
        let expr = serde_json::to_string(&substitute(expr)).expect("a string encodes");
        rules.push_str(&format!(
            "      - record: ledger_{i}\n        expr: {expr}\n"
        ));
        tests.push_str(&format!(
            "      # {header}\n      - expr: ledger_{i}\n        eval_time: 70m\n        exp_samples:\n"
        ));
        for ((account, stream, consumer), value) in CONSUMERS.iter().zip(values) {
            if let Some(v) = value {
                tests.push_str(&format!(
                    "          - labels: 'ledger_{i}{{account=\"{account}\",stream=\"{stream}\",consumer=\"{consumer}\"}}'\n            value: {v}\n"
                ));
            }
        }
    }
    (rules, tests)
}

#[test]
fn the_ledger_balances_on_made_series_and_says_which_terms_are_derived() {
    let (columns, panel) = ledger_columns();
    let headers: Vec<&str> = columns.iter().map(|(h, _)| h.as_str()).collect();
    let wanted: Vec<&str> = EXPECTED.iter().map(|(h, _)| *h).collect();
    assert_eq!(headers, wanted, "the ledger's columns");
    assert_derived_terms_say_so(&panel, &columns);
    assert_expected_figures_close();
    let (rules, tests) = promtool_files(&columns);
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("ledger.rules.yml"), rules).expect("writing the rules");
    std::fs::write(dir.path().join("ledger.test.yml"), &tests).expect("writing the test");
    let out = Command::new("promtool")
        .args(["test", "rules", "ledger.test.yml"])
        .current_dir(dir.path())
        .output()
        .expect("promtool on PATH (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}\non:\n{tests}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
