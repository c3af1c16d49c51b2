//! Where every message went, for one unfiltered consumer of a stream
//! created with it: the lab's truth for each column of the consumer
//! dashboard's ledger table, the column's own query run against Prometheus,
//! and both sums closed:
//!
//! stored for it = delivered once or more + removed before delivery + change in pending
//! delivered once or more = acknowledged + change in awaiting acknowledgement
//!                          + died at max deliveries + terminated (by reason)
//!
//! The stream and its consumers are new, so over the dashboard's range
//! (1 h, longer than the lab) each change is the level now. The table
//! derives delivered and acknowledged by difference, so its sums close by
//! construction; the lab also reads both another way (the delivered stream
//! sequence, the application's own count of acknowledgements).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;

use crate::Lab;

/// How long Prometheus may take to hold every term.
const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What one consumer's application saw and did, by stream sequence.
pub struct Truth {
    /// Consumer name.
    pub name: String,
    /// Ack policy none: the server takes each delivery as acknowledged.
    pub ack_none: bool,
    /// Every sequence delivered, once or more.
    pub delivered: BTreeSet<u64>,
    /// Acknowledged (the server confirmed each).
    pub acked: BTreeSet<u64>,
    /// Terminated by the application (`AckTerm`).
    pub terminated: BTreeSet<u64>,
    /// NAKed at its last allowed delivery: given up by `max_deliver`.
    pub dead: BTreeSet<u64>,
    /// Never acknowledged.
    pub held: BTreeSet<u64>,
}

impl Truth {
    /// Nothing delivered yet.
    pub fn new(name: &str, ack_none: bool) -> Self {
        Truth {
            name: name.to_string(),
            ack_none,
            delivered: BTreeSet::new(),
            acked: BTreeSet::new(),
            terminated: BTreeSet::new(),
            dead: BTreeSet::new(),
            held: BTreeSet::new(),
        }
    }
}

/// `account`, `stream` and `consumer` of a lab consumer, for a selector.
pub fn selector(stream: &str, consumer: &str) -> String {
    format!("account=\"APP\",stream=\"{stream}\",consumer=\"{consumer}\"")
}

/// The consumer dashboard and the title of its ledger table.
const DASHBOARD: &str = "dashboards/nats-delivery-consumer.json";
const PANEL: &str = "Ledger per consumer over the range";

/// The ledger's terms for one consumer, by the table's column names.
#[derive(Default)]
struct Terms {
    stored: u64,
    removed: u64,
    pending: u64,
    delivered: u64,
    acked: u64,
    awaiting: u64,
    dead: u64,
    /// By reason, as the exporter's `reason` label.
    terminated: BTreeMap<String, u64>,
}

/// The table's column of the exporter's new counter.
const REMOVED: &str = "removed before delivery";

/// Every `reason` of `nats_delivery_jetstream_terminated_total`.
const REASONS: [&str; 4] = ["client", "stream_limits", "unacked_deleted", "other"];

impl Terms {
    /// The lab's terms, given the sequences it published and those the
    /// stream still keeps.
    fn truth(t: &Truth, published: &[u64], kept: &BTreeSet<u64>) -> Terms {
        let count = |f: &dyn Fn(u64) -> bool| published.iter().filter(|s| f(**s)).count() as u64;
        let mut terminated: BTreeMap<String, u64> =
            REASONS.iter().map(|r| (r.to_string(), 0)).collect();
        terminated.insert("client".into(), t.terminated.len() as u64);
        // Held messages the stream removed: "Unacknowledged message was deleted".
        terminated.insert(
            "unacked_deleted".into(),
            t.held.difference(kept).count() as u64,
        );
        Terms {
            stored: published.len() as u64,
            removed: count(&|s| !t.delivered.contains(&s) && !kept.contains(&s)),
            pending: count(&|s| !t.delivered.contains(&s) && kept.contains(&s)),
            delivered: t.delivered.len() as u64,
            acked: if t.ack_none { &t.delivered } else { &t.acked }.len() as u64,
            awaiting: t.held.intersection(kept).count() as u64,
            dead: t.dead.len() as u64,
            terminated,
        }
    }

    /// The term of a column of the table; `None` for a column the lab
    /// does not know.
    fn column(&mut self, name: &str) -> Option<&mut u64> {
        Some(match name {
            "stored for it" => &mut self.stored,
            REMOVED => &mut self.removed,
            "change in pending" => &mut self.pending,
            "delivered once or more (derived)" => &mut self.delivered,
            "acknowledged (derived)" => &mut self.acked,
            "change in awaiting acknowledgement" => &mut self.awaiting,
            "died at max deliveries" => &mut self.dead,
            other => self
                .terminated
                .get_mut(other.strip_prefix("terminated: ")?)?,
        })
    }

    /// Whether both sums close exactly.
    fn closes(&self) -> bool {
        let terminated: u64 = self.terminated.values().sum();
        self.stored == self.delivered + self.removed + self.pending
            && self.delivered == self.acked + self.awaiting + self.dead + terminated
    }

    /// `stored = delivered + removed + pending`, in figures.
    fn stored_sum(&self) -> String {
        format!(
            "{} = {} + {} + {}",
            self.stored, self.delivered, self.removed, self.pending
        )
    }

    /// `delivered = acknowledged + awaiting + died + terminated`, in figures.
    fn delivered_sum(&self) -> String {
        let terminated: u64 = self.terminated.values().sum();
        format!(
            "{} = {} + {} + {} + {terminated}",
            self.delivered, self.acked, self.awaiting, self.dead
        )
    }

    /// Both sums, the terminated by reason.
    fn show(&self) -> String {
        let by_reason: Vec<String> = self
            .terminated
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        format!(
            "{}; {} = {} + {} + {} + ({})",
            self.stored_sum(),
            self.delivered,
            self.acked,
            self.awaiting,
            self.dead,
            by_reason.join(" + ")
        )
    }
}

/// The ledger table's columns, in order: (name, PromQL with the
/// dashboard's variables).
fn dashboard_columns() -> anyhow::Result<Vec<(String, String)>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD);
    let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let rows = dash["panels"].as_array().context("panels")?;
    let panel = rows
        .iter()
        .chain(
            rows.iter()
                .flat_map(|r| r["panels"].as_array().into_iter().flatten()),
        )
        .find(|p| p["title"] == PANEL)
        .with_context(|| {
            format!("{DASHBOARD} has no panel {PANEL:?}: update examples/lab/ledger.rs")
        })?;
    let names = panel["transformations"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|t| t["options"]["renameByName"].as_object())
        .context("the ledger table renames no column")?;
    let mut columns = Vec::new();
    for t in panel["targets"].as_array().into_iter().flatten() {
        let id = t["refId"].as_str().context("refId")?;
        let name = names
            .get(&format!("Value #{id}"))
            .and_then(|v| v.as_str())
            .with_context(|| format!("ledger query {id} has no column name"))?;
        let expr = t["expr"].as_str().context("expr")?;
        columns.push((name.to_string(), expr.to_string()));
    }
    Ok(columns)
}

/// A column's query for one lab consumer: the dashboard's variables set
/// to it, the range to 1 h.
fn for_consumer(expr: &str, stream: &str, consumer: &str) -> String {
    let expr = expr
        .replace("\"$job\"", "\"nats-delivery-exporter\"")
        .replace("\"$account\"", "\"APP\"")
        .replace("\"$stream\"", &format!("\"{stream}\""))
        .replace("\"$consumer\"", &format!("\"{consumer}\""));
    crate::promql_check::substitute(&expr)
}

/// The two terms read another way than the table derives them, with the
/// lab's value: delivered once or more from the delivered stream sequence,
/// less the removed messages it jumped (counted, and no longer ahead of it);
/// acknowledged from the application's own counter (explicit acks only).
fn other_readings(stream: &str, t: &Truth, want: &Terms) -> Vec<(String, String, u64)> {
    let sel = selector(stream, &t.name);
    let d = format!("max(nats_delivery_consumer_delivered_stream_sequence{{{sel}}})");
    let first =
        format!("max(nats_delivery_stream_first_sequence{{account=\"APP\",stream=\"{stream}\"}})");
    let removed =
        format!("max(nats_delivery_consumer_removed_before_delivery_messages_total{{{sel}}})");
    let mut out = vec![(
        "delivered once or more, from the delivered stream sequence".to_string(),
        format!("{d} - {removed} + clamp_min({first} - 1 - {d}, 0)"),
        want.delivered,
    )];
    if !t.ack_none {
        let sel = format!(
            "job=\"lab-app\",stream=\"{stream}\",consumer=\"{}\"",
            t.name
        );
        out.push((
            "acknowledged, by the application's own counter".to_string(),
            format!(
                "sum(nats_delivery_client_jetstream_acknowledgements_total{{{sel},kind=\"ack\"}})"
            ),
            want.acked,
        ));
    }
    out
}

/// One figure to read: the consumer, the term, its query and the lab's value.
struct Row {
    consumer: String,
    term: String,
    query: String,
    truth: u64,
    /// A column of the dashboard's table (not another reading).
    column: bool,
}

/// The rows of one consumer: the table's columns, then the other readings.
fn rows_of(
    lab: &mut Lab,
    columns: &[(String, String)],
    stream: &str,
    (truth, want): (&Truth, &mut Terms),
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (column, expr) in columns {
        let Some(w) = want.column(column).copied() else {
            let what = format!("the ledger column {column:?} has a truth in the lab");
            lab.report.check(false, &what);
            continue;
        };
        rows.push(Row {
            consumer: truth.name.clone(),
            term: column.clone(),
            query: for_consumer(expr, stream, &truth.name),
            truth: w,
            column: true,
        });
    }
    for (term, query, w) in other_readings(stream, truth, want) {
        rows.push(Row {
            consumer: truth.name.clone(),
            term,
            query,
            truth: w,
            column: false,
        });
    }
    rows
}

/// For each consumer of `truths`: every column of the dashboard's ledger
/// table equals the lab's term, the lab's and Prometheus' ledgers both
/// close exactly, and the two derived terms read another way agree.
pub async fn check(
    lab: &mut Lab,
    stream: &str,
    truths: &[&Truth],
    (published, kept): (&[u64], &BTreeSet<u64>),
) -> anyhow::Result<()> {
    let columns = dashboard_columns()?;
    let mut rows = Vec::new();
    for truth in truths {
        let mut want = Terms::truth(truth, published, kept);
        let what = format!("{}: the lab's ledger closes: {}", truth.name, want.show());
        lab.report.check(want.closes(), &what);
        rows.extend(rows_of(lab, &columns, stream, (truth, &mut want)));
    }
    let pairs: Vec<(String, f64)> = rows
        .iter()
        .map(|r| (r.query.clone(), r.truth as f64))
        .collect();
    let got = lab.prom.settle_all(&pairs, WAIT).await?;
    for truth in truths {
        let mut read = Terms::default();
        let mut whole = true;
        for (r, g) in rows
            .iter()
            .zip(&got)
            .filter(|(r, _)| r.consumer == truth.name)
        {
            let shown = if r.column {
                format!("{DASHBOARD}, {PANEL:?}")
            } else {
                r.query.clone()
            };
            let what = format!("{}: {}", r.consumer, r.term);
            if r.term == REMOVED {
                lab.report.count(&what, r.truth as f64, &shown, *g);
            } else {
                lab.report.term(&what, r.truth as f64, &shown, *g);
            }
            if !r.column {
                continue;
            }
            let value = g.filter(|v| *v >= 0.0 && v.fract() == 0.0);
            whole &= value.is_some();
            let value = value.unwrap_or(0.0) as u64;
            match read.column(&r.term) {
                Some(slot) => *slot = value,
                None => {
                    let reason = r.term.strip_prefix("terminated: ").unwrap_or(&r.term);
                    read.terminated.insert(reason.to_string(), value);
                }
            }
        }
        let what = format!("{}: Prometheus' ledger closes: {}", truth.name, read.show());
        lab.report.check(whole && read.closes(), &what);
        let want = Terms::truth(truth, published, kept);
        let held = |s: String| if whole { s } else { "(no data)".to_string() };
        lab.report.sum(
            &format!("{}: stored = delivered + removed + pending", truth.name),
            &want.stored_sum(),
            &held(read.stored_sum()),
        );
        lab.report.sum(
            &format!(
                "{}: delivered = acked + awaiting + died + terminated",
                truth.name
            ),
            &want.delivered_sum(),
            &held(read.delivered_sum()),
        );
    }
    Ok(())
}
