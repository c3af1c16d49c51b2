//! What runs beside the scrapes, subscribed over NATS: JetStream advisories
//! and the client reports of applications using the link-in crate.

pub mod advisories;
pub mod client_reports;
