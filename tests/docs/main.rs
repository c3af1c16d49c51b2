//! What the repository ships beside the code, checked against it: alert
//! rules, dashboards, the server support table.
mod alert_rules;
mod dashboards;
mod scrape_configs;
mod promql_check;
mod support_table;
