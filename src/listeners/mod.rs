//! What runs beside the scrapes, subscribed over NATS: JetStream advisories
//! and the client reports of applications using the link-in crate.

pub(crate) mod advisories;
pub(crate) mod client_reports;
