//! Pending limits and per-subscription options.

/// How much an instrumented subscription may hold for the application before
/// it drops (and counts) new messages.
///
/// Both limits apply, like in nats.go and nats-py: a message is dropped when
/// accepting it would make the pending count exceed `messages` or the pending
/// payload bytes exceed `bytes`. Bytes are payload bytes (`message.payload.len()`),
/// which is also what nats.go and nats-py count.
///
/// The defaults are 65,536 messages (async-nats' own `subscription_capacity`
/// default, so switching a subscription to this crate keeps the message limit
/// it had) and 64 MiB (nats.go's byte default; async-nats has no byte limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingLimits {
    /// Most messages pending at once.
    pub messages: u64,
    /// Most payload bytes pending at once.
    pub bytes: u64,
}

impl PendingLimits {
    /// Default message limit: 65,536.
    pub const DEFAULT_MESSAGES: u64 = 65_536;
    /// Default byte limit: 64 MiB.
    pub const DEFAULT_BYTES: u64 = 64 * 1024 * 1024;

    /// No limit: the value [`Self::messages`] and [`Self::bytes`] take for
    /// "unlimited". An unlimited side exports no limit gauge.
    pub const UNLIMITED: u64 = u64::MAX;

    /// Limits of `messages` messages and `bytes` payload bytes, in that
    /// order; [`Self::UNLIMITED`] for no limit. The named setters say the
    /// same more readably:
    /// `PendingLimits::default().messages(10_000).unlimited_bytes()`.
    pub fn new(messages: u64, bytes: u64) -> Self {
        PendingLimits { messages, bytes }
    }

    /// No limit on either side: the subscription never drops; its memory
    /// grows while the application is behind.
    pub fn unlimited() -> Self {
        PendingLimits::new(Self::UNLIMITED, Self::UNLIMITED)
    }

    /// At most `messages` messages pending.
    pub fn messages(mut self, messages: u64) -> Self {
        self.messages = messages;
        self
    }

    /// At most `bytes` payload bytes pending.
    pub fn bytes(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }

    /// No limit on the number of pending messages.
    pub fn unlimited_messages(self) -> Self {
        self.messages(Self::UNLIMITED)
    }

    /// No limit on pending payload bytes.
    pub fn unlimited_bytes(self) -> Self {
        self.bytes(Self::UNLIMITED)
    }

    /// The message limit, `None` when unlimited.
    pub fn message_limit(&self) -> Option<u64> {
        (self.messages != Self::UNLIMITED).then_some(self.messages)
    }

    /// The byte limit, `None` when unlimited.
    pub fn byte_limit(&self) -> Option<u64> {
        (self.bytes != Self::UNLIMITED).then_some(self.bytes)
    }
}

impl Default for PendingLimits {
    fn default() -> Self {
        PendingLimits::new(Self::DEFAULT_MESSAGES, Self::DEFAULT_BYTES)
    }
}

/// Options for [`ClientMetrics::subscribe_with`](crate::ClientMetrics::subscribe_with).
///
/// ```
/// use nats_delivery_metrics::{PendingLimits, SubscribeOptions};
/// let options = SubscribeOptions::new()
///     .name("orders")
///     .queue_group("workers")
///     .pending_limits(PendingLimits::default().messages(10_000).bytes(16 << 20));
/// # let _ = options;
/// let bytes_only = PendingLimits::default().unlimited_messages().bytes(1 << 20);
/// assert_eq!(bytes_only.message_limit(), None);
/// assert_eq!(bytes_only.byte_limit(), Some(1 << 20));
/// ```
#[derive(Debug, Clone, Default)]
pub struct SubscribeOptions {
    pub(crate) name: Option<String>,
    pub(crate) queue_group: Option<String>,
    pub(crate) limits: PendingLimits,
}

impl SubscribeOptions {
    /// Default options: the subject pattern as the name, no queue group,
    /// default [`PendingLimits`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The `subscription` label value (default: the subscribed subject
    /// pattern). Keep the set of names small: it becomes a label.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Subscribe as a member of this queue group.
    pub fn queue_group(mut self, group: impl Into<String>) -> Self {
        self.queue_group = Some(group.into());
        self
    }

    /// The subscription's own pending limits.
    pub fn pending_limits(mut self, limits: PendingLimits) -> Self {
        self.limits = limits;
        self
    }
}
