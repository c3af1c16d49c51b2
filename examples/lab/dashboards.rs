//! Every query of the repository's dashboards, run against the lab's
//! Prometheus after the scenarios: each must return data. Queries are read
//! and their Grafana variables substituted by the same code as the
//! dashboard tests (`tests/promql_check`): every variable matches all
//! values, `$__rate_interval` is 5m and `$__range` 1h; except the job
//! variables, which name the lab's own jobs, so that a series selected under
//! the wrong job leaves its panel empty.

use crate::promql_check::{dashboard_queries, files, read, substitute};
use crate::Lab;

/// Panels that have no data in the lab, and why: the lab fails on any other
/// query without data.
const EMPTY_IN_LAB: &[(&str, &str)] = &[
    (
        "Replica margin",
        "the lab runs one server, so no stream has replicas; tests/system/replica_margin.rs \
         checks the margins on a real 3-node cluster",
    ),
    (
        "Routes and gateways closest to max_pending",
        "the lab runs one server, without routes or gateways; \
         tests/sources/link_pending_held.rs holds route and gateway bytes on real servers",
    ),
    (
        "Stream data lost from the store",
        "the lab damages no store; tests/jetstream/stream_lost.rs deletes a block file of a \
         stopped server and checks the gauges and counters",
    ),
    (
        "JetStream: API requests dropped, batches abandoned, pins lost",
        "the lab reads no system-account events and drives no atomic batch or pinned \
         group; tests/listeners/api_limit.rs and tests/listeners/since_2_11.rs make each \
         happen on real servers and check the counts",
    ),
    (
        "Canary: lost and received",
        "the lab's exporter runs without --canary (opt-in); tests/listeners/canary.rs and \
         canary_partition.rs run the canary against real servers, a restart and a cut",
    ),
    (
        "Canary: publish to receive latency",
        "the lab's exporter runs without --canary (opt-in); tests/listeners/canary.rs checks \
         the histogram on a real server",
    ),
    (
        "Canary: what it costs the servers",
        "the lab's exporter runs without --canary (opt-in); tests/listeners/canary.rs checks \
         the bytes sent and the stream's bounds on a real server",
    ),
    (
        "Account streams and consumers against their limits",
        "the lab's accounts have no stream limit and no tiers, so only the counts have data; \
         tests/jetstream/account_counts.rs and account_tiers.rs check counts, limits and tiers \
         on real servers",
    ),
    (
        "Account JetStream storage against its limit",
        "the lab's accounts have no JetStream limit; tests/jetstream/account_storage.rs sets \
         limits on a real server and checks usage and limits",
    ),
    (
        "Time until an account's JetStream storage is full",
        "the lab's accounts have no JetStream limit; tests/jetstream/account_storage.rs fills \
         a limited account and checks the forecast against the first refused publish",
    ),
    (
        "Mirrors and sources: seconds since the origin was last heard from",
        "the lab has no mirror or source; tests/jetstream/stream_origins.rs cuts a source \
         from another account on a real server",
    ),
    (
        "Mirrors and sources: messages behind the origin",
        "the lab has no mirror or source; tests/jetstream/stream_origins.rs checks the lag \
         against the server's own",
    ),
    (
        "Mirrors and sources: messages their origin removed before they copied them",
        "the lab has no mirror or source; tests/jetstream/stream_origins.rs counts what an \
         origin removed while a mirror and a source were cut off",
    ),
    (
        "Mirrors and sources: time until their origin removes what they have not copied",
        "the lab has no mirror or source; tests/jetstream/origin_forecast.rs stops three \
         mirrors in a full account and checks the forecast against each origin's removal",
    ),
    (
        "Servers answering the system-account survey",
        "the lab polls its server over HTTP; tests/system/system_polling.rs checks the \
         survey gauges on a real 3-node cluster",
    ),
];

/// The lab's scrape jobs (`processes.rs`) for the dashboards' job variables:
/// the exporter's, and the application's for the series it serves itself.
const JOBS: [(&str, &str); 2] = [
    ("\"$job\"", "\"nats-delivery-exporter\""),
    ("\"$app_job\"", "\"lab-app\""),
];

/// Runs every dashboard query; a query without data fails the lab, unless
/// its panel is listed in [`EMPTY_IN_LAB`].
pub async fn every_query_returns_data(lab: &mut Lab) -> anyhow::Result<()> {
    lab.report.scenario(
        "dashboards: every query of dashboards/*.json returns data",
        &[],
    );
    let (mut total, mut with_data) = (0, 0);
    for path in files("dashboards", ".json") {
        let name = format!(
            "dashboards/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        let dash: serde_json::Value = serde_json::from_str(&read(&path))?;
        for q in dashboard_queries(&name, &dash) {
            let expr = JOBS
                .iter()
                .fold(q.expr.clone(), |e, (var, job)| e.replace(var, job));
            let expr = substitute(&expr);
            let series = match lab.prom.query(&expr).await {
                Ok(s) => s.len(),
                Err(e) => {
                    lab.report.check(false, &format!("{}: {e}", q.place));
                    continue;
                }
            };
            total += 1;
            if series > 0 {
                with_data += 1;
            }
            let empty_why = EMPTY_IN_LAB
                .iter()
                .find(|(panel, _)| q.place.contains(&format!("panel \"{panel}\"")));
            match empty_why {
                Some((_, why)) if series == 0 => {
                    lab.report
                        .note(&format!("{}: no data, as expected: {why}", q.place));
                }
                _ => lab
                    .report
                    .check(series > 0, &format!("{}: {series} series", q.place)),
            }
        }
    }
    lab.report.note(&format!(
        "{with_data} of {total} dashboard queries return data"
    ));
    // Every scrape of the exporter so far should have succeeded: a failed
    // one hides every series for a second and can reset an alert's `for:`.
    // Summed over both exporters (the second one's series have ended).
    let scrapes = "sum(count_over_time(up{job=\"nats-delivery-exporter\"}[1h]))";
    let failed =
        format!("{scrapes} - sum(sum_over_time(up{{job=\"nats-delivery-exporter\"}}[1h]))");
    let slowest = "max(max_over_time(scrape_duration_seconds{job=\"nats-delivery-exporter\"}[1h]))";
    let (n, f, max) = (
        lab.prom.value(scrapes).await?.unwrap_or(0.0),
        lab.prom.value(&failed).await?.unwrap_or(f64::NAN),
        lab.prom.value(slowest).await?.unwrap_or(f64::NAN),
    );
    lab.report.note(&format!(
        "Prometheus scraped the exporter {n} times, {f} failed, the slowest took {:.0} ms",
        max * 1000.0
    ));
    lab.report
        .check(f == 0.0, "every scrape of the exporter succeeded");
    lab.report.fact(
        "dashboard queries returning data",
        with_data as f64,
        &format!("of {total} queries in dashboards/*.json"),
    );
    Ok(())
}
