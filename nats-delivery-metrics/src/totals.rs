//! Plain-value copies of the counters, for applications that want the
//! numbers without parsing the exposition.

use std::sync::atomic::Ordering;

use crate::state::{ConnectionEvents, SubscriptionSnapshot};

/// The totals of the subscriptions sharing one name, from
/// [`ClientMetrics::subscription_totals`](crate::ClientMetrics::subscription_totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriptionTotals {
    /// Messages handed to the application (0 for plain subscribers).
    pub delivered_messages: u64,
    /// Messages dropped because a pending limit was reached (exact).
    pub dropped_messages: u64,
    /// Payload bytes of `dropped_messages`.
    pub dropped_bytes: u64,
    /// Messages received and not yet handed to the application.
    pub pending_messages: u64,
    /// Payload bytes of `pending_messages`.
    pub pending_bytes: u64,
    /// Highest number of pending messages held.
    pub pending_messages_high_water: u64,
    /// Slow-consumer events async-nats reported for these subscriptions (a
    /// lower bound of async-nats' own drops).
    pub slow_consumer_events: u64,
}

impl From<&SubscriptionSnapshot> for SubscriptionTotals {
    fn from(s: &SubscriptionSnapshot) -> Self {
        let live = s.live.unwrap_or_default();
        SubscriptionTotals {
            delivered_messages: s.delivered,
            dropped_messages: s.dropped,
            dropped_bytes: s.dropped_bytes,
            pending_messages: live.pending_messages,
            pending_bytes: live.pending_bytes,
            pending_messages_high_water: live.high_water,
            slow_consumer_events: s.slow_consumer_events,
        }
    }
}

/// Connection events counted by the event callback, from
/// [`ClientMetrics::connection_events`](crate::ClientMetrics::connection_events).
/// Lower bounds: async-nats loses events when its queue of 128 is full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionEventTotals {
    /// Connections established (the first one and every reconnect).
    pub connected: u64,
    /// Connections lost.
    pub disconnected: u64,
    /// Lame-duck notices from the server.
    pub lame_duck: u64,
    /// Drains started.
    pub draining: u64,
    /// Clients closed.
    pub closed: u64,
    /// Errors the server sent.
    pub server_error: u64,
    /// Errors of the client itself.
    pub client_error: u64,
}

impl From<&ConnectionEvents> for ConnectionEventTotals {
    fn from(e: &ConnectionEvents) -> Self {
        let v = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        ConnectionEventTotals {
            connected: v(&e.connected),
            disconnected: v(&e.disconnected),
            lame_duck: v(&e.lame_duck),
            draining: v(&e.draining),
            closed: v(&e.closed),
            server_error: v(&e.server_error),
            client_error: v(&e.client_error),
        }
    }
}
