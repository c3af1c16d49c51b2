//! How the sources reach one server: its HTTP monitoring port, or a request
//! over a system-account NATS connection. A source names its endpoint (its
//! [`Source`]) and its options once, as HTTP query pairs; the system-account
//! side turns them into the JSON options the server's
//! `$SYS.REQ.SERVER.<id>.<KIND>` handlers read, each as the source's
//! [`MonitoringSource::NATS_OPTIONS`](super::MonitoringSource::NATS_OPTIONS) says.

use std::io::BufRead;
use std::sync::Arc;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use url::Url;

use super::kept::{self, KeptBudget};
use super::parse_error::{self, ParseError};
use super::{endpoint_url, Fetcher, Source};
use crate::poll_error::PollError;
use crate::system::poll::SystemRequests;
use crate::system::survey::ServerError;

/// One server, as its sources reach it for one poll.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ServerLink<'a> {
    /// Its monitoring port.
    Http {
        /// The HTTP client and its limits.
        fetch: &'a Fetcher,
        /// The monitoring base URL.
        base: &'a Url,
        /// What this poll's replies may keep.
        kept: &'a Arc<KeptBudget>,
    },
    /// Requests to it alone over a system-account connection.
    System(SystemLink<'a>),
}

/// One server reached over a system-account connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SystemLink<'a> {
    /// The connection and its limits.
    pub(crate) requests: &'a SystemRequests,
    /// The server's name (`server_name` filters of account requests).
    pub(crate) name: &'a str,
    /// The server's ID, in its request subjects.
    pub(crate) id: &'a str,
    /// Its `/varz` (or the error it sent), already in this poll's survey answer.
    pub(crate) varz: Option<&'a Result<Bytes, ServerError>>,
    /// What this poll's replies may keep (a NATS reply is whole when it
    /// arrives, at most the server's `max_payload`: only what its parse
    /// keeps is charged).
    pub(crate) kept: &'a Arc<KeptBudget>,
}

/// One server's link held apart from any poll, for a read that runs
/// beside the scrapes ([`ServerLink::detached`]).
#[derive(Debug, Clone)]
pub(crate) enum DetachedLink {
    /// Its monitoring port.
    Http {
        /// The HTTP client, with the read's own timeout.
        fetch: Fetcher,
        /// The monitoring base URL.
        base: Url,
    },
    /// Requests to it alone over a system-account connection.
    System {
        /// The connection, with the read's own timeout.
        requests: SystemRequests,
        /// The server's name.
        name: String,
        /// The server's ID.
        id: String,
    },
}

impl DetachedLink {
    /// The link of one read, its replies charged to `kept`.
    pub(crate) fn link<'b>(&'b self, kept: &'b Arc<KeptBudget>) -> ServerLink<'b> {
        match self {
            DetachedLink::Http { fetch, base } => ServerLink::Http { fetch, base, kept },
            DetachedLink::System { requests, name, id } => ServerLink::System(SystemLink {
                requests,
                name,
                id,
                varz: None,
                kept,
            }),
        }
    }
}

impl<'a> ServerLink<'a> {
    /// The same server for reads beside the scrapes: owned, with `timeout`
    /// per request instead of the scrape's.
    pub(crate) fn detached(&self, timeout: std::time::Duration) -> DetachedLink {
        match *self {
            ServerLink::Http { fetch, base, .. } => DetachedLink::Http {
                fetch: fetch.with_timeout(timeout),
                base: base.clone(),
            },
            ServerLink::System(link) => DetachedLink::System {
                requests: link.requests.with_timeout(timeout),
                name: link.name.to_string(),
                id: link.id.to_string(),
            },
        }
    }

    /// What this poll's replies may keep.
    pub(crate) fn kept(&self) -> &'a Arc<KeptBudget> {
        match self {
            ServerLink::Http { kept, .. } => kept,
            ServerLink::System(link) => link.kept,
        }
    }

    /// The same server, its replies charged to `kept` (a share of this
    /// link's budget, for one part of a poll).
    pub(crate) fn with_kept<'b>(&self, kept: &'b Arc<KeptBudget>) -> ServerLink<'b>
    where
        'a: 'b,
    {
        match *self {
            ServerLink::Http { fetch, base, .. } => ServerLink::Http { fetch, base, kept },
            ServerLink::System(link) => ServerLink::System(SystemLink { kept, ..link }),
        }
    }

    /// Reads the endpoint of `source` with `query` and parses the reply as `T`.
    pub(crate) async fn get_json<T: DeserializeOwned + Send + 'static>(
        &self,
        source: Source,
        query: &[(&str, String)],
    ) -> Result<T, PollError> {
        match *self {
            ServerLink::Http { fetch, base, kept } => {
                fetch.get_json(http_url(base, source, query), kept).await
            }
            ServerLink::System(link) => {
                let body = link.reply(source, query).await?;
                serde_json::from_slice(&body).map_err(|e| PollError::Parse(e.to_string()))
            }
        }
    }

    /// [`ServerLink::get_json`] that also takes an HTTP reply with one of the
    /// `accepted` error statuses (a system-account reply has none).
    pub(crate) async fn get_json_accepting<T: DeserializeOwned + Send + 'static>(
        &self,
        source: Source,
        query: &[(&str, String)],
        accepted: &'static [u16],
    ) -> Result<T, PollError> {
        match *self {
            ServerLink::Http { fetch, base, kept } => {
                let url = http_url(base, source, query);
                fetch.get_json_accepting(url, kept, accepted).await
            }
            ServerLink::System(_) => self.get_json(source, query).await,
        }
    }

    /// [`ServerLink::get_json`] for large replies: over HTTP the body is
    /// parsed by `parse` as it arrives (see [`Fetcher::get_streamed`]); a
    /// NATS reply is one message, already whole, so `whole` parses it in one
    /// pass (cutting it in pieces first would read it twice), off the async
    /// runtime. Both must give the same result for the same bytes.
    pub(crate) async fn get_streamed<T, P, W>(
        &self,
        source: Source,
        query: &[(&str, String)],
        parse: P,
        whole: W,
    ) -> Result<T, PollError>
    where
        T: Send + 'static,
        P: FnOnce(&mut dyn BufRead) -> Result<T, ParseError> + Send + 'static,
        W: FnOnce(&[u8]) -> Result<T, ParseError> + Send + 'static,
    {
        match *self {
            ServerLink::Http { fetch, base, kept } => {
                fetch
                    .get_streamed(http_url(base, source, query), kept, parse)
                    .await
            }
            ServerLink::System(link) => {
                let body = link.reply(source, query).await?;
                let budget = link.kept.clone();
                let parsed =
                    tokio::task::spawn_blocking(move || kept::scope(&budget, || whole(&body)))
                        .await;
                parse_error::parsed(parsed)
            }
        }
    }
}

impl SystemLink<'_> {
    /// The server's reply to `source`'s endpoint with the options `query` means.
    async fn reply(&self, source: Source, query: &[(&str, String)]) -> Result<Bytes, PollError> {
        if let (Some(varz), Source::Varz) = (self.varz, source) {
            // Sent once, in the survey's answer.
            let body = varz.clone();
            if let Ok(body) = &body {
                super::server_cost::count_reply_bytes(body.len());
            }
            return body.map_err(|e| crate::system::poll::server_error(&e));
        }
        let options = nats_options(source, query)?;
        let body = self
            .requests
            .ask(self.name, self.id, source.as_str(), options)
            .await?;
        super::server_cost::count_reply_bytes(body.len());
        Ok(body)
    }
}

/// The URL of `source`'s endpoint with `query`. Every option is one the
/// source lists with its system-account form: tests that poll a source
/// over HTTP find one it left out, not only those through the system account.
fn http_url(base: &Url, source: Source, query: &[(&str, String)]) -> Url {
    debug_assert!(
        query
            .iter()
            .all(|(key, _)| source.nats_options().iter().any(|o| o.http == *key)),
        "{} sends an option its NATS_OPTIONS lacks: {query:?}",
        source.as_str()
    );
    endpoint_url(base, source.as_str(), query)
}

/// The JSON options of a system request for `source`, from the query
/// pairs the same request has over HTTP. A pair without a known form is an
/// error rather than a silently different request.
pub(super) fn nats_options(source: Source, query: &[(&str, String)]) -> Result<Value, PollError> {
    let mut options = Map::new();
    for (key, value) in query {
        let unknown = || {
            PollError::Request(format!(
                "no system-account form of the {source} option {key}={value}",
                source = source.as_str()
            ))
        };
        let option = source.nats_options().iter().find(|o| o.http == *key);
        let option = option.ok_or_else(unknown)?;
        let json = option.json(value).ok_or_else(unknown)?;
        options.insert(option.nats.to_string(), json);
    }
    Ok(Value::Object(options))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_options_become_the_servers_json_options() {
        let jsz = nats_options(
            Source::Jsz,
            &[
                ("accounts", "true".into()),
                ("consumers", "true".into()),
                ("offset", "1024".into()),
                ("acc", "APP".into()),
            ],
        )
        .unwrap();
        assert_eq!(
            jsz,
            serde_json::json!({"accounts": true, "consumer": true, "offset": 1024, "account": "APP"})
        );
        let connz = nats_options(
            Source::Connz,
            &[
                ("state", "closed".into()),
                ("sort", "stop".into()),
                ("auth", "true".into()),
                ("limit", "64".into()),
            ],
        )
        .unwrap();
        assert_eq!(
            connz,
            serde_json::json!({"state": 1, "sort": "stop", "auth": true, "limit": 64})
        );
        assert_eq!(
            nats_options(Source::Accstatz, &[("unused", "true".into())]).unwrap(),
            serde_json::json!({"include_unused": true})
        );
        assert_eq!(
            nats_options(Source::Varz, &[]).unwrap(),
            serde_json::json!({})
        );
    }

    #[test]
    fn options_without_a_known_form_are_refused() {
        for (endpoint, key, value) in [
            (Source::Jsz, "leader-only", "true"),
            (Source::Connz, "state", "sleeping"),
            (Source::Connz, "limit", "many"),
            (Source::Varz, "x", "1"),
        ] {
            let e = nats_options(endpoint, &[(key, value.to_string())]).unwrap_err();
            assert_eq!(e.kind(), "request", "{endpoint:?} {key}");
        }
    }
}
