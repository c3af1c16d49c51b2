//! The canary's flags.

use std::time::Duration;

use crate::flags::duration::parse_duration;

/// End-to-end canary flags (`--canary` and its settings).
#[derive(clap::Args, Clone, Debug)]
pub struct CanaryArgs {
    /// Publish canary messages at a steady rate to a JetStream stream and
    /// read them back through a consumer, in every account of
    /// --nats-account (or those of --canary-account): produced,
    /// acknowledged, received and lost counts and the latency.
    #[arg(id = "canary", long = "canary", env = "NATS_DELIVERY_CANARY")]
    pub enabled: bool,

    /// Time between two canary messages of one account (e.g. 1s, 100ms).
    #[arg(
        id = "canary_interval",
        long = "canary-interval",
        env = "NATS_DELIVERY_CANARY_INTERVAL",
        default_value = "1s",
        value_parser = parse_interval
    )]
    pub interval: Duration,

    /// A canary message not read back this long after it was published
    /// counts as lost (also the canary stream's max age).
    #[arg(
        id = "canary_deadline",
        long = "canary-deadline",
        env = "NATS_DELIVERY_CANARY_DEADLINE",
        default_value = "5s",
        value_parser = parse_deadline
    )]
    pub deadline: Duration,

    /// The canary stream, made (or used, when it exists) in each account.
    #[arg(
        id = "canary_stream",
        long = "canary-stream",
        env = "NATS_DELIVERY_CANARY_STREAM",
        default_value = "NATS_DELIVERY_CANARY",
        value_parser = crate::flags::values::nats_name
    )]
    pub stream: String,

    /// Subject prefix of the canary stream (`<prefix>.>`); each exporter
    /// publishes on `<prefix>.<random id>` and reads only its own messages.
    #[arg(
        id = "canary_subject",
        long = "canary-subject",
        env = "NATS_DELIVERY_CANARY_SUBJECT",
        default_value = "nats_delivery.canary",
        value_parser = parse_subject
    )]
    pub subject: String,

    /// Replicas of the canary stream the exporter creates (1 to 5).
    #[arg(
        id = "canary_replicas",
        long = "canary-replicas",
        env = "NATS_DELIVERY_CANARY_REPLICAS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u8).range(1..=5)
    )]
    pub replicas: u8,

    /// Accounts of --nats-account that run a canary (repeatable or
    /// comma-separated); empty: every one.
    #[arg(
        id = "canary_accounts",
        value_name = "ACCOUNT",
        long = "canary-account",
        env = "NATS_DELIVERY_CANARY_ACCOUNTS",
        value_delimiter = ','
    )]
    pub accounts: Vec<String>,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_millis(10) {
        return Err("at least 10ms".into());
    }
    Ok(d)
}

fn parse_deadline(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_millis(100) {
        return Err("at least 100ms".into());
    }
    Ok(d)
}

/// A subject prefix: tokens separated by dots, none empty, no wildcard or
/// whitespace.
fn parse_subject(text: &str) -> Result<String, String> {
    let bad = text
        .split('.')
        .any(|t| t.is_empty() || t == "*" || t == ">" || t.chars().any(|c| c.is_whitespace()));
    if text.is_empty() || bad {
        return Err(format!(
            "'{text}' is not a subject prefix (dot-separated tokens, no wildcard or whitespace)"
        ));
    }
    Ok(text.to_string())
}
