//! The NATS listeners against real servers: JetStream advisories (live and
//! durable mode, dead-letter copies, faults and clusters), system events, the
//! end-to-end canary and the account label check.
mod advisories_binary;
mod advisories_connection;
mod advisories_dead_letter;
mod advisories_drops;
mod advisories_durable;
mod advisories_durable_repair;
mod advisories_incarnation;
mod advisories_listeners;
mod advisories_live;
mod advisories_startup;
mod advisories_support;
mod api_audits;
mod api_limit;
mod canary;
mod canary_partition;
mod canary_stall;
mod durable_cluster;
mod durable_faults;
mod durable_identity;
mod durable_permissions;
mod since_2_11;
mod system_events;
