//! Asks every server of a cluster or supercluster at once, over one
//! system-account connection, and accounts for the replies.
//!
//! A request on `$SYS.REQ.SERVER.PING.<KIND>` (VARZ, JSZ, CONNZ, STATSZ, ...)
//! is answered by every server that sees it, each with its own identity and
//! its reply to the monitoring request. Nothing says how many servers there
//! are, so a survey ends when the servers expected have answered, when no
//! reply came for a gap after the last one, or at the deadline, whichever is
//! first. The servers expected are those given (a count) and those seen in
//! earlier surveys: a server seen before that did not answer is named as
//! missing, never forgotten in silence, until it has been silent for
//! [`roster::FORGET_MISSING_AFTER`] (an hour: a scale-down).
//!
//! Every survey has its own reply subject under one subscription: a reply to
//! an earlier survey that arrives late is counted as late, not taken for an
//! answer to the current one.

mod roster;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lock::LockOrRecover;
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

pub(crate) use roster::Roster;
pub use roster::SurveyOutcome;

/// A server's identity as it signs every system reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ServerInfo {
    /// The server's name (its ID when none was configured).
    pub name: String,
    /// The server's ID; a new one after every restart unless configured.
    pub id: String,
    /// The cluster's name, if clustered.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The JetStream domain, if any.
    #[serde(default)]
    pub(crate) domain: Option<String>,
    /// The server's version.
    #[serde(default, rename = "ver")]
    pub(crate) version: String,
}

/// The error a server sent instead of data (a filter it did not match is
/// not an error: such a server does not answer at all).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ServerError {
    /// The server's error code.
    #[serde(default)]
    pub(crate) code: i64,
    /// What went wrong.
    #[serde(default)]
    pub(crate) description: String,
}

/// One server's reply to a survey.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Who answered.
    pub server: ServerInfo,
    /// The monitoring reply (what the same endpoint returns over HTTP), as
    /// raw JSON for the source's own parser; or the server's error.
    pub data: Result<Bytes, ServerError>,
}

/// The envelope of every system reply.
#[derive(Deserialize)]
struct Envelope<'a> {
    server: ServerInfo,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ServerError>,
}

/// Why a reply could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplyError {
    /// Not the envelope every server reply has.
    #[error("not a server reply: {0}")]
    Envelope(String),
    /// An envelope with neither data nor an error.
    #[error("a reply from {0} without data")]
    Empty(String),
}

/// Reads one reply's envelope.
pub fn parse_reply(payload: &[u8]) -> Result<Answer, ReplyError> {
    let envelope: Envelope =
        serde_json::from_slice(payload).map_err(|e| ReplyError::Envelope(e.to_string()))?;
    let data = match (envelope.data, envelope.error) {
        (_, Some(error)) => Err(error),
        (Some(raw), None) => Ok(Bytes::copy_from_slice(raw.get().as_bytes())),
        (None, None) => return Err(ReplyError::Empty(envelope.server.name)),
    };
    Ok(Answer {
        server: envelope.server,
        data,
    })
}

/// Why a survey failed as a whole (single replies that fail are counted).
#[derive(Debug, thiserror::Error)]
pub enum SurveyError {
    /// The replies could not be subscribed to.
    #[error("cannot send the survey request: {0}")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// The request could not be sent.
    #[error("cannot send the survey request: {0}")]
    Publish(#[source] async_nats::PublishError),
    /// The system-account connection is not up: a request queued for a
    /// later connection would only wait out the deadline.
    #[error("cannot send the survey request: the system-account connection is not up ({0})")]
    NotConnected(async_nats::connection::State),
    /// The reply subscription is gone (the connection was closed).
    #[error("the survey reply subscription ended")]
    Closed,
}

/// How a survey waits for replies.
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    /// Ends the survey this long after the last reply (or the request,
    /// when no server has been seen yet).
    pub gap: Duration,
    /// Ends the survey at the latest this long after the request.
    pub deadline: Duration,
}

/// The replies routed to the survey waiting for them.
#[derive(Debug, Default)]
struct Routing {
    /// The survey under way: its number and where its replies go.
    current: Option<(u64, mpsc::UnboundedSender<Bytes>)>,
    /// Replies to surveys that had ended.
    late: u64,
    /// Who sent them, not yet taken into the roster: a server that is
    /// always slower than the others is still expected from then on.
    late_servers: Vec<ServerInfo>,
    /// Replies that could not be routed (a subject this survey never used).
    unexpected: u64,
}

impl Routing {
    /// Counts a reply that came after its survey ended, its sender to be
    /// expected from the next survey on.
    fn count_late(&mut self, payload: &[u8]) {
        self.late += 1;
        if let Ok(answer) = parse_reply(payload) {
            self.late_servers.push(answer.server);
        }
    }

    /// Ends the survey under way. Replies already routed to it that it did
    /// not read (it had all it expected, or its time was up) are late like
    /// any other: dropped with the channel, a server answering after the
    /// expected count would never be counted nor learned.
    fn end(&mut self, unread: &mut mpsc::UnboundedReceiver<Bytes>) {
        // The router routes under this lock: nothing more comes once cleared.
        self.current = None;
        while let Ok(payload) = unread.try_recv() {
            self.count_late(&payload);
        }
    }
}

/// One system-account connection's surveys, one at a time.
#[derive(Debug)]
pub struct Survey {
    client: async_nats::Client,
    /// `<inbox>.` : survey `n` is answered on `<inbox>.n`.
    reply_prefix: String,
    next: AtomicU64,
    routing: Arc<Mutex<Routing>>,
    roster: Mutex<Roster>,
    router: tokio::task::JoinHandle<()>,
}

impl Drop for Survey {
    fn drop(&mut self) {
        self.router.abort();
    }
}

impl Survey {
    /// Subscribes to the replies on `client`, which must be a system-account
    /// connection; `expected` servers are awaited in every survey (0: only
    /// those seen before).
    pub async fn new(client: async_nats::Client, expected: usize) -> Result<Survey, SurveyError> {
        let inbox = client.new_inbox();
        let mut replies = client
            .subscribe(format!("{inbox}.*"))
            .await
            .map_err(SurveyError::Subscribe)?;
        let routing = Arc::new(Mutex::new(Routing::default()));
        let reply_prefix = format!("{inbox}.");
        let router = tokio::spawn({
            let routing = routing.clone();
            let prefix = reply_prefix.clone();
            async move {
                while let Some(m) = replies.next().await {
                    let n: Option<u64> = m
                        .subject
                        .strip_prefix(prefix.as_str())
                        .and_then(|n| n.parse().ok());
                    let mut r = routing.lock_or_recover();
                    match (&r.current, n) {
                        (Some((current, to)), Some(n)) if *current == n => {
                            let _ = to.send(m.payload);
                        }
                        (_, Some(_)) => r.count_late(&m.payload),
                        (_, None) => r.unexpected += 1,
                    }
                }
                // Ended: no survey can be answered any more.
                routing.lock_or_recover().current = None;
            }
        });
        Ok(Survey {
            client,
            reply_prefix,
            next: AtomicU64::new(1),
            routing,
            roster: Mutex::new(Roster::new(expected)),
            router,
        })
    }

    /// Asks every server for `kind` (`VARZ`, `JSZ`, ...) with `options` (a
    /// JSON object: the endpoint's options and the server filters), and
    /// waits as `waiting` says.
    pub async fn ask(
        &self,
        kind: &str,
        options: &serde_json::Value,
        waiting: Waiting,
    ) -> Result<SurveyOutcome, SurveyError> {
        self.ask_awaiting(kind, options, waiting, &[]).await
    }

    /// [`Survey::ask`], waiting up to the deadline for the servers named in
    /// `awaited` as long as one has not answered: a server handles the
    /// system account's requests one at a time, so one still answering
    /// another request of ours answers the survey only after it.
    pub async fn ask_awaiting(
        &self,
        kind: &str,
        options: &serde_json::Value,
        waiting: Waiting,
        awaited: &[String],
    ) -> Result<SurveyOutcome, SurveyError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (to, mut replies) = mpsc::unbounded_channel();
        let late_servers = {
            let mut routing = self.routing.lock_or_recover();
            routing.current = Some((n, to));
            std::mem::take(&mut routing.late_servers)
        };
        self.roster
            .lock_or_recover()
            .learn(late_servers, std::time::Instant::now());
        let request = Bytes::from(options.to_string());
        let subject = format!("$SYS.REQ.SERVER.PING.{kind}");
        let reply = format!("{}{n}", self.reply_prefix);
        let sent = self
            .client
            .publish_with_reply(subject, reply, request)
            .await
            .map_err(SurveyError::Publish);
        let expected = self.roster.lock_or_recover().expected();
        let mut answers = Vec::new();
        let mut broken = 0;
        if sent.is_ok() {
            let deadline = tokio::time::Instant::now() + waiting.deadline;
            loop {
                // The gap runs from a reply: before the first, a server
                // seen before is awaited up to the deadline, as is one in
                // `awaited` that has not answered.
                let silent =
                    |name: &String| !answers.iter().any(|a: &Answer| a.server.name == *name);
                let hold = (answers.is_empty() && expected > 0) || awaited.iter().any(silent);
                let until = match hold {
                    true => deadline,
                    false => deadline.min(tokio::time::Instant::now() + waiting.gap),
                };
                match tokio::time::timeout_at(until, replies.recv()).await {
                    Ok(Some(payload)) => match parse_reply(&payload) {
                        Ok(answer) => answers.push(answer),
                        Err(_) => broken += 1,
                    },
                    Ok(None) => {
                        self.end_survey(&mut replies);
                        return Err(SurveyError::Closed);
                    }
                    Err(_) => break,
                }
                if expected > 0 && answers.len() >= expected {
                    break;
                }
            }
        }
        self.end_survey(&mut replies);
        sent?;
        let late = self.routing.lock_or_recover().late;
        let mut roster = self.roster.lock_or_recover();
        Ok(roster.account(answers, broken, late, std::time::Instant::now()))
    }

    fn end_survey(&self, unread: &mut mpsc::UnboundedReceiver<Bytes>) {
        self.routing.lock_or_recover().end(unread);
    }
}

#[cfg(test)]
mod tests;
