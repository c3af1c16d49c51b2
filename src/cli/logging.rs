//! The log flags, named as exporter-toolkit names them (`--log.level`,
//! `--log.format`), and the logger they set up: one line per event on
//! stderr, logfmt by default as node_exporter writes, or one JSON object.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How much is logged, and how.
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Least severe level logged: error, warn, info or debug.
    /// `NATS_DELIVERY_LOG`, when set, is a full filter that takes its place
    /// (`warn,nats_delivery_exporter=debug`, ...).
    #[arg(long = "log.level", env = "NATS_DELIVERY_LOG_LEVEL", value_enum, default_value_t = LogLevel::Info)]
    pub(crate) level: LogLevel,

    /// Format of each log line: `logfmt` (key=value pairs) or `json` (one
    /// JSON object per line).
    #[arg(long = "log.format", env = "NATS_DELIVERY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Logfmt)]
    pub(crate) format: LogFormat,
}

/// A level of `--log.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// And what the exporter does: start, stop, connections.
    Info,
    /// And the details behind each decision.
    Debug,
}

/// A format of `--log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// `time=... level=info module=... msg="..." key=value`.
    Logfmt,
    /// `{"timestamp":"...","level":"INFO","target":"...","message":"...",...}`.
    Json,
}

impl LogLevel {
    fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// Starts logging to stderr. By default the NATS client's own connection
/// lines are left out: the exporter says the same in one line naming the
/// account, the servers and the cause, rate-limited; `cause_layer` keeps the
/// client's debug-level cause for that line.
pub fn init<L>(args: &LogArgs, cause_layer: L)
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let default = format!(
        "{},async_nats=warn,async_nats::connector=off",
        args.level.as_str()
    );
    let filter = tracing_subscriber::EnvFilter::try_from_env("NATS_DELIVERY_LOG")
        .unwrap_or_else(|_| default.into());
    let causes = tracing_subscriber::filter::Targets::new()
        .with_target("async_nats::connector", tracing::Level::DEBUG);
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let lines = match args.format {
        LogFormat::Logfmt => lines.event_format(Logfmt).boxed(),
        LogFormat::Json => lines.json().flatten_event(true).boxed(),
    };
    tracing_subscriber::registry()
        .with(cause_layer.with_filter(causes))
        .with(lines.with_filter(filter))
        .init();
}

/// One logfmt line per event: time, level, module, message, then the
/// event's fields in their order.
pub(crate) struct Logfmt;

impl<S, N> FormatEvent<S, N> for Logfmt
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        writer.write_str("time=")?;
        SystemTime.format_time(&mut writer)?;
        let level = meta.level().as_str().to_ascii_lowercase();
        write!(writer, " level={level} module={}", meta.target())?;
        let mut fields = LogfmtFields { out: String::new() };
        event.record(&mut fields);
        writeln!(writer, "{}", fields.out)
    }
}

/// Writes each field as ` key=value`, the message as `msg`.
struct LogfmtFields {
    out: String,
}

impl Visit for LogfmtFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.pair(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.pair(field, &format!("{value:?}"));
    }
}

impl LogfmtFields {
    fn pair(&mut self, field: &Field, value: &str) {
        let key = match field.name() {
            "message" => "msg",
            name => name.strip_prefix("r#").unwrap_or(name),
        };
        let _ = write!(self.out, " {key}=");
        push_logfmt_value(&mut self.out, value);
    }
}

/// A value as logfmt readers expect it: bare when it holds no space, quote,
/// `=` or control character, else quoted with `\"`, `\\`, `\n`, `\t`
/// escaped (so one event stays one line).
pub(crate) fn push_logfmt_value(out: &mut String, value: &str) {
    let bare = !value.is_empty()
        && !value
            .chars()
            .any(|c| c == ' ' || c == '"' || c == '=' || c == '\\' || c.is_control());
    if bare {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::push_logfmt_value;

    fn value(v: &str) -> String {
        let mut out = String::new();
        push_logfmt_value(&mut out, v);
        out
    }

    #[test]
    fn values_are_quoted_only_when_they_must_be() {
        assert_eq!(value("advisories"), "advisories");
        assert_eq!(value("127.0.0.1:7778"), "127.0.0.1:7778");
        assert_eq!(value(""), "\"\"");
        assert_eq!(value("serving /metrics"), "\"serving /metrics\"");
        assert_eq!(value("a=b"), "\"a=b\"");
        assert_eq!(value("say \"hi\"\nbye"), "\"say \\\"hi\\\"\\nbye\"");
        assert_eq!(value("C:\\x"), "\"C:\\\\x\"");
    }
}
