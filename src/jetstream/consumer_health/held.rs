//! The health of consumers written from their last leader's figures
//! (`jetstream/leaderless.rs`): read from what was kept, never recorded, so
//! a figure held again is neither a new snapshot nor a count.

use super::{age, positions, ConsumerHealth, ConsumerHealthRow};
use crate::sources::jsz::ConsumerRow;

impl ConsumerHealth {
    /// Each held consumer's row as its last poll left it: its status at that
    /// poll, its removal count, its ages from the held positions at the
    /// held clock (`now` when none); no forecast. Unjudged when not known.
    pub(crate) fn held_rows(&self, held: &[ConsumerRow], now: f64) -> Vec<ConsumerHealthRow> {
        let row = |&(account, stream, c, server_now): &ConsumerRow| {
            let st = self.stream(account, stream)?;
            let state = st.consumers.get(&*c.name)?;
            let seen = state.window.last_seen()?;
            let status = state.window.status(seen, self.window);
            let now = server_now.unwrap_or(now);
            let [lag, unacked] =
                positions(c, st.first_seq).map(|seq| age(&st.history, seq, now, None));
            let removed = state.removed.shown();
            Some(ConsumerHealthRow::new(
                status,
                (lag, unacked),
                removed,
                None,
            ))
        };
        (held.iter())
            .map(|r| row(r).unwrap_or(ConsumerHealthRow::UNJUDGED))
            .collect()
    }
}
