//! Polling through the system account: clusters and super-clusters, the
//! survey of servers.
#[path = "../common/mod.rs"]
mod common;
mod replica_margin;
mod replica_tolerance;
mod route_cut;
mod survey;
mod system_polling;
mod system_polling_supercluster;
