//! One scrape from request to text: the [`exporter::Exporter`] (single
//! flight), the `poller::Poller` that asks every server, the
//! `snapshot::Snapshot` of what it saw and the streamed
//! `exposition::Exposition` of it, all built from plain
//! [`settings::ScrapeSettings`].

pub(crate) mod exporter;
pub(crate) mod exposition;
pub(crate) mod poller;
pub(crate) mod process_metrics;
pub(crate) mod settings;
pub(crate) mod snapshot;
