//! The end-to-end canary (`--canary`): some losses leave no counter
//! anywhere (a server with `no_fast_producer_stall` dropping to a slow
//! receiver, a publish refused that only its publisher saw, a partition),
//! so the exporter sends its own messages through the servers and counts
//! what comes back.
//!
//! In each account it runs in, the canary publishes one small message per
//! `--canary-interval` to a JetStream stream and reads it back through a
//! pull consumer of its own. A message not back within `--canary-deadline`
//! is lost ([`ledger`]). A stream rather than a core subject: its publish
//! acknowledgements tell "the server took it" apart from "it came back",
//! and a server that stores nothing (no JetStream, a full account) shows
//! as loss instead of as silence.
//!
//! Cleaning up: the stream is memory-backed and bounded ([`StreamBounds`]:
//! 1,000 messages, 1 MiB, messages kept for the deadline), so it cannot
//! grow whatever happens; the consumer is ephemeral, deleted on exit and
//! removed by the server after 30 s without a pull if the exporter dies.
//! The stream itself stays on exit: other exporters may share it, and
//! bounded and idle it holds nothing after a deadline.

mod args;
mod books;
mod ledger;
mod run;

use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use args::CanaryArgs;

use crate::nats::{ConnectionError, NatsArgs};

/// The limits of a canary stream the exporter creates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StreamBounds {
    /// Most messages kept.
    pub(crate) max_messages: i64,
    /// Most bytes kept.
    pub(crate) max_bytes: i64,
    /// How long a message is kept.
    pub(crate) max_age: Duration,
}

impl StreamBounds {
    /// The bounds for a deadline: a message is kept no longer than it may
    /// take to come back.
    fn for_deadline(deadline: Duration) -> StreamBounds {
        StreamBounds {
            max_messages: 1000,
            max_bytes: 1 << 20,
            max_age: deadline,
        }
    }
}

/// What one account's canary runs with: plain values, from [`CanaryArgs`].
#[derive(Clone, Debug)]
pub(crate) struct CanarySettings {
    pub(crate) interval: Duration,
    pub(crate) deadline: Duration,
    pub(crate) stream: String,
    pub(crate) subject: String,
    pub(crate) replicas: u8,
    pub(crate) bounds: StreamBounds,
}

/// Registers the canary's families and starts one canary per account of
/// `nats` (those `args.accounts` names, when given); nothing with
/// `--canary` off. Fails on an account `--canary-account` names that
/// `--nats-account` does not give. The tasks end after `shutdown` turns
/// true, deleting their consumers.
pub fn start_canary(
    nats: &NatsArgs,
    args: &CanaryArgs,
    registry: &mut Registry,
    shutdown: watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, ConnectionError> {
    if !args.enabled {
        return Ok(Vec::new());
    }
    let mut accounts = nats.resolved_accounts()?;
    if let Some(missing) = args
        .accounts
        .iter()
        .find(|a| !accounts.iter().any(|(name, _)| name == *a))
    {
        return Err(ConnectionError::Config(format!(
            "--canary-account {missing}: not an account of --nats-account (or --nats-account-name)"
        )));
    }
    if !args.accounts.is_empty() {
        accounts.retain(|(name, _)| args.accounts.contains(name));
    }
    let settings = CanarySettings {
        interval: args.interval,
        deadline: args.deadline,
        stream: args.stream.clone(),
        subject: args.subject.clone(),
        replicas: args.replicas,
        bounds: StreamBounds::for_deadline(args.deadline),
    };
    let names: Vec<String> = accounts.iter().map(|(n, _)| n.clone()).collect();
    let books = books::register(
        registry,
        &names,
        args.deadline.as_secs_f64(),
        settings.bounds,
    );
    let mut tasks = Vec::new();
    for ((_, auth), books) in accounts.into_iter().zip(books) {
        let (nats, settings, shutdown) = (nats.clone(), settings.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            let counting = books.clone();
            let on_failure: crate::nats::OnFailure =
                Box::new(move |_| counting.error("connect"));
            match crate::nats::connect_watched(&nats, &auth, "canary", 1024, Some(on_failure))
                .await
            {
                Ok(client) => run::run(client, settings, books, shutdown).await,
                Err(e) => {
                    books.error("connect");
                    tracing::error!(account = %books.account, error = %e, "the canary cannot connect");
                }
            }
        }));
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn flags(args: &[&str]) -> crate::cli::config::Config {
        let mut all = vec!["x"];
        all.extend_from_slice(args);
        crate::cli::config::Config::try_parse_from(all).unwrap()
    }

    #[test]
    fn off_registers_nothing_and_an_unknown_account_is_refused() {
        let (_stop, rx) = watch::channel(false);
        let mut registry = Registry::default();
        let off = flags(&[]);
        assert!(
            start_canary(&off.nats, &off.canary, &mut registry, rx.clone())
                .unwrap()
                .is_empty()
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("canary"), "{text}");
        let c = flags(&[
            "--canary",
            "--nats-account",
            "APP=token:t",
            "--canary-account",
            "OTHER",
        ]);
        let e = start_canary(&c.nats, &c.canary, &mut registry, rx).unwrap_err();
        assert!(e.to_string().contains("--canary-account OTHER"), "{e}");
    }

    #[test]
    fn the_stream_keeps_a_message_for_the_deadline() {
        let c = flags(&["--canary-deadline", "2s"]);
        assert_eq!(c.canary.interval, Duration::from_secs(1));
        let b = StreamBounds::for_deadline(c.canary.deadline);
        assert_eq!(
            (b.max_messages, b.max_bytes, b.max_age),
            (1000, 1 << 20, Duration::from_secs(2))
        );
    }
}
