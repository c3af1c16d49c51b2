//! Why a report was not accepted, and the `reason` label that counts it.

use std::fmt;

/// Why a report was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportError {
    /// Not JSON of the expected shape.
    Parse(String),
    /// A `version` this exporter does not understand (it reads version 1).
    Version(Option<u32>),
    /// `client` or `instance` missing or empty.
    Identity,
    /// `client` or `instance` longer than
    /// [`ReportLimits::max_label_bytes`](super::ReportLimits::max_label_bytes).
    IdentityTooLong,
    /// The body is larger than
    /// [`ReportLimits::max_report_bytes`](super::ReportLimits::max_report_bytes).
    TooLarge(usize),
    /// [`ReportLimits::max_instances`](super::ReportLimits::max_instances)
    /// instances are already kept and
    /// [`ReportLimits::max_folded_instances`](super::ReportLimits::max_folded_instances)
    /// more are summed under `__overflow__`.
    TooManyInstances,
    /// The report's `client` is not the last token of the subject it came
    /// on (`<prefix>.<client>`), or it came on the bare prefix: one
    /// application writing another's name.
    Subject,
    /// A number of 2^50 or more (docs/report-protocol.md).
    ImplausibleValue,
    /// A total grew by more than 2^32 a second since the instance's
    /// previous report (docs/report-protocol.md).
    ImplausibleJump,
    /// The client already has
    /// [`ReportLimits::max_instances_per_client`](super::ReportLimits::max_instances_per_client)
    /// instances.
    TooManyClientInstances,
}

impl ReportError {
    /// The `reason` label of `nats_delivery_app_reports_rejected_total`.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            ReportError::Parse(_) => "malformed",
            ReportError::Version(_) => "version",
            ReportError::Identity => "identity",
            ReportError::IdentityTooLong => "label_too_long",
            ReportError::TooLarge(_) => "too_large",
            ReportError::TooManyInstances => "too_many_instances",
            ReportError::Subject => "subject",
            ReportError::ImplausibleValue => "implausible_value",
            ReportError::ImplausibleJump => "implausible_jump",
            ReportError::TooManyClientInstances => "too_many_client_instances",
        }
    }

    /// Whether the report itself is broken (as opposed to over a limit).
    pub(super) fn malformed(&self) -> bool {
        matches!(
            self,
            ReportError::Parse(_) | ReportError::Version(_) | ReportError::Identity
        )
    }
}

/// Reasons in a fixed order, for the rejected counter.
pub(super) const REASONS: [&str; 10] = [
    "malformed",
    "version",
    "identity",
    "label_too_long",
    "too_large",
    "too_many_instances",
    "subject",
    "implausible_value",
    "implausible_jump",
    "too_many_client_instances",
];

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Parse(e) => write!(f, "malformed application report: {e}"),
            ReportError::Version(v) => write!(f, "unsupported application report version {v:?}"),
            ReportError::Identity => write!(f, "application report without client or instance"),
            ReportError::IdentityTooLong => {
                write!(f, "application report with an over-long client or instance")
            }
            ReportError::TooLarge(n) => write!(f, "application report of {n} bytes is too large"),
            ReportError::TooManyInstances => {
                write!(
                    f,
                    "application report of a new instance past the instance limits"
                )
            }
            ReportError::Subject => write!(
                f,
                "application report whose client is not its subject's last token"
            ),
            ReportError::ImplausibleValue => {
                write!(f, "application report with a number at or above 2^50")
            }
            ReportError::ImplausibleJump => write!(
                f,
                "application report with a total grown faster than the protocol allows"
            ),
            ReportError::TooManyClientInstances => write!(
                f,
                "application report of a new instance past its client's instance limit"
            ),
        }
    }
}

impl std::error::Error for ReportError {}
