//! What runs beside the scrapes, over NATS: JetStream advisories, the
//! client reports of applications using the link-in crate, and the
//! end-to-end canary.

pub(crate) mod advisories;
pub(crate) mod canary;
pub(crate) mod client_reports;
