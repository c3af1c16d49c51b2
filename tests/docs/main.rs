//! What the repository ships beside the code, checked against it: alert
//! rules, dashboards, the server support table, the flag tables, the links
//! between the Markdown files.
mod alert_policy;
mod alert_rules;
mod dashboard_policy;
mod dashboards;
mod flags_table;
mod ledger;
mod links;
mod module_cycles;
mod promql_check;
mod scrape_configs;
mod support_table;
