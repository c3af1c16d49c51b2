//! Counting async-nats connection events.
//!
//! async-nats hands events to the callback through a channel of 128 slots
//! filled with `try_send`: when the channel is full, events are lost before
//! any callback sees them. These counts are therefore lower bounds; the exact
//! drop counts come from instrumented subscriptions.

use std::sync::atomic::AtomicU64;

use async_nats::{Event, ServerError};

use crate::state::Shared;

fn add(counter: &AtomicU64) {
    // Several tasks may record events for one `ClientMetrics`, so this one is
    // a real read-modify-write (it is not on the per-message path).
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

impl Shared {
    /// Records one event. Constant time: an atomic add, or for a slow
    /// consumer one hash lookup under a short lock.
    pub(crate) fn record_event(&self, event: &Event) {
        let e = &self.events;
        match event {
            Event::Connected => add(&e.connected),
            Event::Disconnected => add(&e.disconnected),
            Event::LameDuckMode => add(&e.lame_duck),
            Event::Draining => add(&e.draining),
            Event::Closed => add(&e.closed),
            Event::SlowConsumer(sid) => self.slow_consumer_event(*sid),
            // Not sent by async-nats 0.51; counted the same way should a later
            // version report slow consumers through this variant instead.
            Event::ServerError(ServerError::SlowConsumer(sid)) => self.slow_consumer_event(*sid),
            Event::ServerError(_) => add(&e.server_error),
            Event::ClientError(_) => add(&e.client_error),
        }
    }
}
