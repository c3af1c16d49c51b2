//! Writing the exposition text: the format a scraper asked for, the family
//! writers every source uses, and the per-consumer label blocks. The lowest
//! layer of the output side: it knows metrics text, not where values come from.

pub(crate) mod consumer_labels;
pub(crate) mod families;

use prometheus_client::registry::Registry;

/// The exposition format a scraper asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Classic,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

/// Encodes one registry without the OpenMetrics `# EOF`, which the caller
/// adds once at the end of the text.
pub(crate) fn encode_registry(registry: &Registry, format: Format, capacity: usize) -> String {
    let mut out = String::with_capacity(capacity);
    let written = match format {
        Format::Classic => prometheus_client::encoding::prometheus_text::encode(&mut out, registry),
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_registry(&mut out, registry)
        }
    };
    // Writing into a String cannot fail; an error here would be a bug in an encoder.
    written.expect("encoding metrics into a String");
    out
}
