//! A consumer's health status on its own, so that the cardinality settings
//! can count its series without depending on how health is computed.

/// A consumer's status, by the first rule that matches (see METRICS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// The window is not full yet: never a guess.
    Unknown,
    /// None of the below.
    Ok,
    /// The backlog was never empty, never fell, and grew over the window.
    Lagging,
    /// The ack floor did not move while messages waited for acknowledgement.
    Stalled,
    /// Nothing delivered, messages waiting, no pull request waiting.
    Stopped,
    /// The delivered position or the ack floor went back.
    Rewound,
    /// Paused (2.11+).
    Paused,
}

impl Status {
    /// Every status, in the order the series are written.
    pub(crate) const ALL: [Status; 7] = [
        Status::Unknown,
        Status::Ok,
        Status::Lagging,
        Status::Stalled,
        Status::Stopped,
        Status::Rewound,
        Status::Paused,
    ];

    /// The `status` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Unknown => "unknown",
            Status::Ok => "ok",
            Status::Lagging => "lagging",
            Status::Stalled => "stalled",
            Status::Stopped => "stopped",
            Status::Rewound => "rewound",
            Status::Paused => "paused",
        }
    }
}
