//! What the survey of one poll says about the servers: how many were
//! expected, how many answered, and the replies that did not count.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use crate::text::families::{counter_family, gauge_family};

/// The survey's accounting, as exported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SurveyReport {
    /// Whether the survey request could be sent and read.
    pub(crate) up: bool,
    /// Servers expected: `--system-expected-servers`, or the servers seen so
    /// far, if more.
    pub(crate) expected: u64,
    /// Servers that answered this survey.
    pub(crate) answered: u64,
    /// Replies that came after their survey ended, so far.
    pub(crate) late_total: u64,
    /// Replies that were not a server reply, so far.
    pub(crate) broken_total: u64,
    /// Second replies from a server that had answered, so far.
    pub(crate) duplicates_total: u64,
    /// Each server known (by name), and whether it answered this survey.
    pub(crate) servers: Vec<(String, bool)>,
}

/// Writes the survey families.
pub(crate) fn encode(enc: &mut DescriptorEncoder, report: &SurveyReport) -> fmt::Result {
    let no_labels: [(&str, &str); 0] = [];
    let one = |v: u64| [(no_labels, v)];
    gauge_family(
        enc,
        "nats_delivery_survey_up",
        "Whether the last survey of the servers through the system account could be sent (1) or not (0).",
        one(u64::from(report.up)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_survey_servers_expected",
        "Servers the survey waited for: --system-expected-servers, or every server seen since start if more.",
        one(report.expected),
    )?;
    gauge_family(
        enc,
        "nats_delivery_survey_servers_answered",
        "Servers that answered the last survey; each expected server that did not has nats_delivery_up 0.",
        one(report.answered),
    )?;
    gauge_family(
        enc,
        "nats_delivery_survey_server_answered",
        "Whether this server, seen since start, answered the last survey (1) or not (0).",
        report
            .servers
            .iter()
            .map(|(name, answered)| ([("server", name.as_str())], u64::from(*answered))),
    )?;
    counter_family(
        enc,
        "nats_delivery_survey_late_replies",
        "Survey replies that came after their survey had ended (the server is expected from then on).",
        one(report.late_total),
    )?;
    counter_family(
        enc,
        "nats_delivery_survey_broken_replies",
        "Survey replies that were not a server reply.",
        one(report.broken_total),
    )?;
    counter_family(
        enc,
        "nats_delivery_survey_duplicate_replies",
        "Second replies to one survey from a server name that had answered it (two servers with one name).",
        one(report.duplicates_total),
    )
}
