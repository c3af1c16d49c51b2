//! Polling through the system account: one NATS connection instead of one
//! monitoring URL per server.
//!
//! Each poll starts with a survey (`$SYS.REQ.SERVER.PING.VARZ`): every
//! server of the cluster or supercluster answers with its identity and its
//! `/varz`, and the survey's roster names the servers seen before that did
//! not answer. Each answering server's other sources are then asked of that
//! server alone (`$SYS.REQ.SERVER.<id>.<KIND>`), so every source keeps the
//! memory and the parsing it has over HTTP.

pub(crate) mod filter;
pub(crate) mod report;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use std::time::Duration;

use crate::nats::{self, Auth, ConnectionError, NatsArgs};
use crate::poll_error::PollError;
use crate::system::survey::{parse_reply, Survey, SurveyError, SurveyOutcome, Waiting};

pub(crate) use report::SurveyReport;

/// Requests to one server at a time over the system-account connection,
/// bounded in time and in size like the HTTP requests.
#[derive(Debug, Clone)]
pub(crate) struct SystemRequests {
    client: async_nats::Client,
    timeout: Duration,
    max_reply_size: usize,
}

impl SystemRequests {
    /// Requests on `client` (a system-account connection), each answered
    /// within `timeout` with at most `max_reply_size` bytes.
    pub(crate) fn new(
        client: async_nats::Client,
        timeout: Duration,
        max_reply_size: usize,
    ) -> Self {
        SystemRequests {
            client,
            timeout,
            max_reply_size,
        }
    }

    /// The same connection with `timeout` per request instead: for reads
    /// beside the scrapes, which have a deadline of their own.
    pub(crate) fn with_timeout(&self, timeout: Duration) -> Self {
        SystemRequests {
            timeout,
            ..self.clone()
        }
    }

    /// Asks the server `id` (named `name`) for `endpoint` with `options`,
    /// and returns the reply's data: what the endpoint returns over HTTP.
    pub(crate) async fn ask(
        &self,
        name: &str,
        id: &str,
        endpoint: &str,
        mut options: Value,
    ) -> Result<Bytes, PollError> {
        // Per-account statistics have no per-server subject: the account
        // ping, filtered by the server's name. The filter matches names
        // that contain it (servers before 2.10 know no exact match), so
        // replies from other servers are passed over by their ID.
        let subject = match endpoint {
            "accstatz" => {
                options["server_name"] = Value::String(name.to_string());
                "$SYS.REQ.ACCOUNT.PING.STATZ".to_string()
            }
            _ => format!("$SYS.REQ.SERVER.{id}.{}", endpoint.to_ascii_uppercase()),
        };
        match tokio::time::timeout(self.timeout, self.exchange(id, subject, options)).await {
            Ok(reply) => reply,
            Err(_) => Err(PollError::Timeout(self.timeout)),
        }
    }

    async fn exchange(
        &self,
        id: &str,
        subject: String,
        options: Value,
    ) -> Result<Bytes, PollError> {
        let inbox = self.client.new_inbox();
        let mut replies = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| PollError::Nats(e.to_string()))?;
        self.client
            .publish_with_reply(subject, inbox, Bytes::from(options.to_string()))
            .await
            .map_err(|e| PollError::Nats(e.to_string()))?;
        while let Some(message) = replies.next().await {
            if message.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                return Err(PollError::NoReply(
                    "no server answers this request (gone, or a new server ID)".into(),
                ));
            }
            if message.payload.len() > self.max_reply_size {
                return Err(PollError::TooLarge(self.max_reply_size));
            }
            let answer =
                parse_reply(&message.payload).map_err(|e| PollError::Parse(e.to_string()))?;
            if answer.server.id != id {
                continue;
            }
            return answer.data.map_err(|e| server_error(&e));
        }
        Err(PollError::Nats("the reply subscription ended".into()))
    }
}

/// Why polling through the system account could not start.
#[derive(Debug, thiserror::Error)]
pub enum SystemPollingSetupError {
    /// `--system-account` was not given.
    #[error("--system-account-polling needs the system account's credentials in --system-account")]
    NoCredentials,
    /// The connection's settings were refused.
    #[error("cannot connect to the system account for polling: {0}")]
    Connect(#[from] ConnectionError),
    /// The survey's reply subscription could not be made.
    #[error("cannot subscribe to the survey replies: {0}")]
    Survey(#[from] SurveyError),
}

/// What polling through the system account needs from the configuration.
#[derive(Debug, Clone)]
pub struct PollSettings<'a> {
    /// The NATS servers and connection flags.
    pub(crate) nats: &'a NatsArgs,
    /// The system account's credentials; `None` is a setup error.
    pub(crate) auth: Option<&'a Auth>,
    /// How many servers a survey waits for (0: until the gap).
    pub(crate) expected_servers: usize,
    /// Per-request timeout.
    pub(crate) timeout: Duration,
    /// Largest reply accepted, in bytes.
    pub(crate) max_reply_size: usize,
    /// How long a survey waits after the last reply.
    pub(crate) survey_gap: Duration,
    /// The servers' own filters, sent with each survey.
    pub(crate) filter: Value,
}

/// Connects to the system account as `settings` say, for polling every
/// server through it. Returns once the settings are accepted; the
/// connection keeps trying in the background, and each survey meanwhile
/// reports `nats_delivery_survey_up` 0.
pub async fn connect(settings: PollSettings<'_>) -> Result<SystemPolling, SystemPollingSetupError> {
    let auth = settings
        .auth
        .ok_or(SystemPollingSetupError::NoCredentials)?;
    let client = nats::connect(settings.nats, auth, "system polling", 1024).await?;
    let survey = Survey::new(client.clone(), settings.expected_servers).await?;
    Ok(SystemPolling {
        survey,
        requests: SystemRequests::new(client, settings.timeout, settings.max_reply_size),
        gap: settings.survey_gap,
        filter: settings.filter,
    })
}

/// A server's error reply, as the `server_error` kind of failed poll.
pub(crate) fn server_error(e: &crate::system::survey::ServerError) -> PollError {
    PollError::ServerError(format!("code {}: {}", e.code, e.description))
}

/// The system-account side of the poller: the survey that finds the servers
/// and the requests that poll each one.
#[derive(Debug)]
pub struct SystemPolling {
    /// Finds the servers, and accounts for their replies.
    pub(crate) survey: Survey,
    /// Asks one server at a time.
    pub(crate) requests: SystemRequests,
    /// How long the survey waits after the last reply.
    pub(crate) gap: Duration,
    /// The servers' own filters, sent with the survey.
    pub(crate) filter: Value,
}

impl SystemPolling {
    /// Whether the system-account connection is up, so a survey can be sent.
    pub fn is_connected(&self) -> bool {
        nats::is_connected(&self.requests.client)
    }

    /// Surveys every server for its `/varz`, within `deadline`. While the
    /// connection is down the survey fails at once: a request queued for a
    /// later connection would only wait out the deadline and then name
    /// every server missing, when the exporter is the one cut off.
    /// The servers named in `awaited` are busy with another request of
    /// ours: they are awaited up to `deadline`.
    pub(crate) async fn survey(
        &self,
        deadline: Duration,
        awaited: &[String],
    ) -> Result<SurveyOutcome, SurveyError> {
        let state = self.requests.client.connection_state();
        if state != async_nats::connection::State::Connected {
            return Err(SurveyError::NotConnected(state));
        }
        let waiting = Waiting {
            gap: self.gap.min(deadline),
            deadline,
        };
        self.survey
            .ask_awaiting("VARZ", &self.filter, waiting, awaited)
            .await
    }
}
