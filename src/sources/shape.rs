//! The shape every monitoring source shares: poll (fetch and parse one
//! reply), absorb (take the reply into the server's snapshot and into the
//! source's own memory of that server), finish (once the server's label is
//! known). The poller drives every source of a server through these steps
//! the same way, so a new source is a module implementing
//! [`MonitoringSource`] plus one line in [`super::per_target`].

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use futures::future::BoxFuture;

use super::accstatz::Accstatz;
use super::connz::{ClosedKey, TopPending};
use super::gatewayz::GatewayPending;
use super::jsz::JszPoll;
use super::routez::RoutePending;
use super::varz::Varz;
use super::{ServerLink, Source};
use crate::error::PollError;

/// How one poll of one source of one server went.
#[derive(Debug, Clone)]
pub struct SourceHealth {
    /// Which source.
    pub source: Source,
    /// Whether this poll succeeded.
    pub up: bool,
    /// How long the poll took, in seconds.
    pub duration: f64,
    /// Unix time of the last successful poll, if any.
    pub last_success: Option<f64>,
    /// Failed polls so far, by error kind.
    pub errors: BTreeMap<&'static str, u64>,
}

/// One server's data from one scrape. A source that failed is `None`: its
/// values are not shown, never stale ones.
#[derive(Debug, Default)]
pub struct TargetSnapshot {
    /// The `server` label.
    pub server: String,
    /// The server's own name, once any /varz poll has told it.
    pub server_name: Option<String>,
    /// The server's version (`/varz` `version`), once any /varz poll has told it.
    pub server_version: Option<String>,
    /// `/varz`, when polled successfully.
    pub varz: Option<Varz>,
    /// Top connections by pending bytes, when polled successfully.
    pub top_pending: Option<TopPending>,
    /// The server's `max_pending` (this poll's, else the last one known).
    pub max_pending: Option<i64>,
    /// `/jsz`, when polled successfully.
    pub jsz: Option<JszPoll>,
    /// `/accstatz`, when polled successfully.
    pub accstatz: Option<Accstatz>,
    /// Route connections, when `/routez` was polled successfully.
    pub routes: Option<Vec<RoutePending>>,
    /// Gateway connections, when `/gatewayz` was polled successfully.
    pub gateways: Option<Vec<GatewayPending>>,
    /// Connections cut as slow consumers, counted so far.
    pub closed: BTreeMap<ClosedKey, u64>,
    /// One entry per polled source.
    pub health: Vec<SourceHealth>,
}

/// One monitoring source of one server: one value per server, holding what
/// the source remembers of it between polls.
pub trait MonitoringSource: Send + Sync + fmt::Debug {
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
pub type Absorb<'a> = Box<dyn FnOnce(&mut TargetSnapshot) + Send + 'a>;

/// A [`MonitoringSource`] of any reply type, so that the poller can hold
/// every source of a server in one list.
pub trait AnySource: Send + Sync + fmt::Debug {
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

/// The settings the sources take from the configuration.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// The sources to poll.
    pub enabled: Vec<Source>,
    /// Connections listed by pending bytes per server.
    pub connz_top: u32,
    /// Distinct (account, client name) pairs kept for cut connections.
    pub max_client_names: usize,
    /// Accounts per /jsz request.
    pub jsz_page_size: u32,
    /// The accounts, streams and consumers /jsz keeps.
    pub jsz_filter: crate::cardinality::JszFilter,
}
