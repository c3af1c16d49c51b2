//! The per-consumer families, written straight into the exposition text.
//!
//! At 10,000 consumers they are most of a scrape's text (some 25 families,
//! the status family seven series per consumer). Through prometheus-client
//! every series escaped and wrote its consumer's three labels again, piece
//! by piece through the encoder's layers. Here each consumer's labels are
//! rendered once per encoding ([`ConsumerLabelText`]) and every family copies
//! them; the numbers are formatted by the crates prometheus-client uses
//! (itoa, dtoa), the same way. The family headers are still written by
//! prometheus-client. The text is byte for byte what prometheus-client
//! writes: the tests below compare the two in both formats.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::encode_registry;
use super::Format;
use crate::text::families::Num;

/// Each exported consumer's labels, rendered once and escaped:
/// `account="…",stream="…",consumer="…"`, in the order of the rows.
#[derive(Debug, Default)]
pub(crate) struct ConsumerLabelText {
    text: String,
    /// Where each consumer's labels end in `text`.
    ends: Vec<usize>,
}

impl ConsumerLabelText {
    /// The labels of `consumers` (account, stream, consumer), in their order.
    pub(crate) fn new<'a>(
        consumers: impl ExactSizeIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> ConsumerLabelText {
        let mut labels = ConsumerLabelText {
            text: String::with_capacity(consumers.len() * 48),
            ends: Vec::with_capacity(consumers.len()),
        };
        for (account, stream, consumer) in consumers {
            labels.push(account, stream, consumer);
        }
        labels
    }

    /// Adds one more consumer's labels.
    pub(crate) fn push(&mut self, account: &str, stream: &str, consumer: &str) {
        let out = &mut self.text;
        push_label(out, "account", account);
        out.push(',');
        push_label(out, "stream", stream);
        out.push(',');
        push_label(out, "consumer", consumer);
        self.ends.push(out.len());
    }

    /// The labels of consumer `i`.
    pub(crate) fn get(&self, i: usize) -> &str {
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        &self.text[start..self.ends[i]]
    }

    /// The labels from consumer `start` on, numbered from 0: those of a
    /// block of consumers written as one piece of the text.
    pub(crate) fn from(&self, start: usize) -> BlockLabels<'_> {
        BlockLabels { all: self, start }
    }
}

/// The rendered labels of a block of consumers: [`ConsumerLabelText::from`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockLabels<'a> {
    all: &'a ConsumerLabelText,
    start: usize,
}

impl<'a> BlockLabels<'a> {
    /// The labels of the block's consumer `i`.
    pub(crate) fn get(&self, i: usize) -> &'a str {
        self.all.get(self.start + i)
    }
}

/// Appends `key="value"`, the value escaped as prometheus-client escapes
/// label values (the same in both formats).
pub(crate) fn push_label(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A family's `# HELP` and `# TYPE` lines, written by prometheus-client so
/// that their escaping and the counters' `_total` follow the format.
#[derive(Debug)]
struct Header {
    name: &'static str,
    help: &'static str,
    metric_type: MetricType,
}

impl Collector for Header {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        enc.encode_descriptor(self.name, self.help, None, self.metric_type)
            .map(drop)
    }
}

/// One series: the consumer's rendered labels, more labels to follow them
/// (`,key="value"`, or empty) and the value.
pub(crate) type Series<'a> = (&'a str, &'a str, Num);

/// Appends a family (a gauge, or a counter with `name` given without
/// `_total`) with one sample per series; nothing when there are none, as
/// prometheus-client writes nothing for a family without samples here.
pub(crate) fn write_family<'a>(
    out: &mut String,
    format: Format,
    metric_type: MetricType,
    (name, help): (&'static str, &'static str),
    series: impl IntoIterator<Item = Series<'a>>,
) {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return;
    }
    let mut header = Registry::default();
    header.register_collector(Box::new(Header {
        name,
        help,
        metric_type,
    }));
    out.push_str(&encode_registry(&header, format, 0));
    let suffix = match metric_type {
        MetricType::Counter => "_total{",
        _ => "{",
    };
    let (mut int, mut float) = (itoa::Buffer::new(), dtoa::Buffer::new());
    // Room for the lines to come, taken once after the first: a piece grown
    // by doubling copies its text about once more.
    let mut to_reserve = series.size_hint().1.map(|n| n.saturating_sub(1));
    for (labels, more, value) in series {
        let line_start = out.len();
        out.push_str(name);
        out.push_str(suffix);
        out.push_str(labels);
        out.push_str(more);
        out.push_str("} ");
        out.push_str(match value {
            Num::U(v) => int.format(v),
            Num::I(v) => int.format(v),
            Num::F(v) => format_float(&mut float, v, format),
        });
        out.push('\n');
        if let Some(lines) = to_reserve.take() {
            out.reserve(lines.min(RESERVED_LINES) * (out.len() - line_start + LINE_SLACK));
        }
    }
}

/// Lines of a family reserved at once, at most: a block of consumers is
/// far fewer.
const RESERVED_LINES: usize = 1 << 16;

/// Bytes reserved per line beyond the first line's length, for longer names
/// and values further on.
const LINE_SLACK: usize = 8;

/// A float as prometheus-client writes a gauge's or counter's: the shortest
/// digits that read back the same; the classic format writes `+Inf`, `-Inf`
/// and `NaN`, OpenMetrics what dtoa writes (`inf`, `-inf`, `NaN`).
fn format_float(buf: &mut dtoa::Buffer, v: f64, format: Format) -> &str {
    match format {
        Format::OpenMetrics => buf.format(v),
        Format::Classic if v.is_finite() => buf.format_finite(v),
        Format::Classic if v.is_nan() => "NaN",
        Format::Classic if v > 0.0 => "+Inf",
        Format::Classic => "-Inf",
    }
}

#[cfg(test)]
#[path = "consumer_labels_tests.rs"]
mod tests;
