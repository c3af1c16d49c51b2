//! The shape every monitoring source shares: poll (fetch and parse one
//! reply), absorb (take the reply into the server's snapshot and into the
//! source's own memory of that server), finish (once the server's label is
//! known). The poller drives every source of a server through these steps
//! the same way, so a new source is a module implementing
//! [`MonitoringSource`] plus one line in the source table and one field in [`TargetSnapshot`].

use std::fmt;
use std::future::Future;

use futures::future::BoxFuture;

use super::{ServerLink, Source, TargetSnapshot};
use crate::poll_error::PollError;

/// One monitoring source of one server: one value per server, holding what
/// the source remembers of it between polls.
pub(crate) trait MonitoringSource: Send + Sync + fmt::Debug {
    /// One poll's parsed reply.
    type Reply: Send;

    /// Which source this is (the `source` label).
    fn source(&self) -> Source;

    /// Fetches and parses one reply from the server `link` reaches.
    fn poll<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> impl Future<Output = Result<Self::Reply, PollError>> + Send + 'a;

    /// Takes a successful poll's reply into the snapshot (and the source's
    /// memory). Runs before the server's label is settled.
    fn absorb(&self, reply: Self::Reply, snap: &mut TargetSnapshot);

    /// Runs after every source absorbed its reply and `snap.server` is
    /// settled, whether this poll succeeded or not.
    fn finish(&self, _snap: &mut TargetSnapshot) {}
}

/// What a successful poll hands back: its absorb step, ready to run.
pub(crate) type Absorb<'a> = Box<dyn FnOnce(&mut TargetSnapshot) + Send + 'a>;

/// A [`MonitoringSource`] of any reply type, so that the poller can hold
/// every source of a server in one list.
pub(crate) trait AnySource: Send + Sync + fmt::Debug {
    /// [`MonitoringSource::source`].
    fn kind(&self) -> Source;
    /// [`MonitoringSource::poll`], its reply wrapped in its absorb step.
    fn poll_boxed<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> BoxFuture<'a, Result<Absorb<'a>, PollError>>;
    /// [`MonitoringSource::finish`].
    fn finish_boxed(&self, snap: &mut TargetSnapshot);
}

impl<S: MonitoringSource> AnySource for S {
    fn kind(&self) -> Source {
        self.source()
    }

    fn poll_boxed<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> BoxFuture<'a, Result<Absorb<'a>, PollError>> {
        Box::pin(async move {
            let reply = self.poll(link).await?;
            let absorb: Absorb<'a> = Box::new(move |snap| self.absorb(reply, snap));
            Ok(absorb)
        })
    }

    fn finish_boxed(&self, snap: &mut TargetSnapshot) {
        self.finish(snap)
    }
}
