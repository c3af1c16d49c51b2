//! What the repository ships beside the code, checked against it: alert
//! rules, dashboards, the server support table, the flag tables.
mod alert_rules;
mod dashboards;
mod flags_table;
mod ledger;
mod module_cycles;
mod promql_check;
mod scrape_configs;
mod support_table;
