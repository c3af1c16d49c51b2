//! The shape every monitoring source shares: poll (fetch and parse one
//! reply), absorb (take the reply into the server's snapshot and into the
//! source's own memory of that server), finish (once the server's label is
//! known). The poller drives every source of a server through these steps
//! the same way, so a new source is a module implementing
//! [`MonitoringSource`] (its `--help` line and its query options' system-account
//! form included) plus one line in the source table and one field in [`TargetSnapshot`].

use std::fmt;
use std::future::Future;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{ServerLink, Source, TargetSnapshot};
use crate::poll_error::PollError;

/// One monitoring source of one server: one value per server, holding what
/// the source remembers of it between polls.
pub(crate) trait MonitoringSource: Send + Sync + fmt::Debug {
    /// One poll's parsed reply.
    type Reply: Send;

    /// What `--help` says of it among the `--sources` values.
    const HELP: &'static str;

    /// Every HTTP query option its polls send, with the form a request over
    /// the system account gives it; a source that sends none has none.
    const NATS_OPTIONS: &'static [NatsOption];

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

    /// Whether a request of this source to the server is under way beside
    /// the scrapes (outside any poll).
    fn reading_beside(&self) -> bool {
        false
    }
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
    /// [`MonitoringSource::reading_beside`].
    fn reading_beside(&self) -> bool;
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

    fn reading_beside(&self) -> bool {
        MonitoringSource::reading_beside(self)
    }
}

/// One HTTP query option of a source and its form in the JSON options of a
/// system-account request, whose names and types differ (`consumers=true`
/// over HTTP is `"consumer": true` over NATS, `state=closed` is `"state": 1`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NatsOption {
    /// Its name in the HTTP query.
    pub http: &'static str,
    /// Its name in a system request's options.
    pub nats: &'static str,
    /// How its value is written there.
    pub value: NatsValue,
}

/// The JSON form of an option's value in a system request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NatsValue {
    /// `true` for `true`, else `false`.
    Flag,
    /// A whole number; other text has no form.
    Number,
    /// The text as it is.
    Text,
    /// One of these words, as its number; another word has no form.
    Choice(&'static [(&'static str, u64)]),
}

impl NatsOption {
    /// A flag of the same name over NATS.
    pub(crate) const fn flag(http: &'static str) -> NatsOption {
        NatsOption::new(http, NatsValue::Flag)
    }

    /// A whole number of the same name over NATS.
    pub(crate) const fn number(http: &'static str) -> NatsOption {
        NatsOption::new(http, NatsValue::Number)
    }

    /// Text of the same name over NATS.
    pub(crate) const fn text(http: &'static str) -> NatsOption {
        NatsOption::new(http, NatsValue::Text)
    }

    /// One of `words` of the same name over NATS, sent as its number.
    pub(crate) const fn choice(
        http: &'static str,
        words: &'static [(&'static str, u64)],
    ) -> NatsOption {
        NatsOption::new(http, NatsValue::Choice(words))
    }

    /// The same option, named `nats` in a system request.
    pub(crate) const fn named(self, nats: &'static str) -> NatsOption {
        NatsOption { nats, ..self }
    }

    const fn new(http: &'static str, value: NatsValue) -> NatsOption {
        NatsOption {
            http,
            nats: http,
            value,
        }
    }

    /// `value` of this option in a system request, or `None` when it has no
    /// form there.
    pub(crate) fn json(&self, value: &str) -> Option<Value> {
        match self.value {
            NatsValue::Flag => Some(Value::Bool(value == "true")),
            NatsValue::Number => value.parse::<u64>().ok().map(Value::from),
            NatsValue::Text => Some(Value::String(value.to_string())),
            NatsValue::Choice(words) => words
                .iter()
                .find(|(word, _)| *word == value)
                .map(|(_, n)| Value::from(*n)),
        }
    }
}
