//! What the repository ships beside the code, checked against it: alert
//! rules, dashboards, the server support table.
mod alert_rules;
mod dashboards;
mod ledger;
mod module_cycles;
mod promql_check;
mod scrape_configs;
mod support_table;
