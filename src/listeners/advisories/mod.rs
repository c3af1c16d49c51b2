//! JetStream delivery advisories: messages that exhausted `max_deliver`, were
//! terminated (by a client or by stream limits) or NAKed, counted exactly once.
//!
//! Two ways to listen, per account:
//! - live (`live`): a core subscription to the advisory subjects. Advisories
//!   sent while the exporter is down are lost (core NATS is at-most-once).
//! - durable ([`durable`], recommended): a stream captures the advisories and
//!   the exporter reads it with a durable pull consumer, acknowledging each
//!   advisory only after counting it, so nothing is lost across restarts and
//!   replicas sharing the consumer split the work without double counting.
//!
//! Optionally (`dead_letter`) each dead message is copied into a
//! dead-letter stream.
//!
//! In both modes the JetStream API audits are read live ([`api_audit`]):
//! messages removed by purges and message deletes, per stream; and so are
//! the advisories added after 2.10 ([`since_2_11`]): abandoned atomic
//! batches and priority-group pins.

pub(crate) mod api_audit;
mod api_errors;
mod args;
mod batch;
mod counting;
mod dead_letter;
pub(crate) mod durable;
mod durable_setup;
mod incarnation;
mod live;
mod live_queue;
pub(crate) mod metrics;
pub(crate) mod parse;
mod since_2_11;
pub(crate) mod store;
pub(crate) mod totals;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::sync::watch;

pub use args::AdvisoryArgs;
pub use metrics::AdvisoryMetrics;

use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use crate::nats::retry::{ErrorKind, ListenerError};
use crate::nats::{Auth, ConnectionError, NatsArgs};

/// True when every subject matched by `subject` is matched by the stream
/// subject `filter` (token-wise, honouring `*` and `>`).
pub(crate) fn subject_covers(filter: &str, subject: &str) -> bool {
    let f: Vec<&str> = filter.split('.').collect();
    let s: Vec<&str> = subject.split('.').collect();
    for (i, ft) in f.iter().enumerate() {
        if *ft == ">" {
            return i < s.len();
        }
        match s.get(i) {
            None => return false,
            Some(&">") => return false,
            Some(st) if *ft == "*" || ft == st => {}
            Some(_) => return false,
        }
    }
    f.len() == s.len()
}

/// Everything one account's listener needs.
#[derive(Clone, Debug)]
pub struct AccountListener {
    /// Connection flags (servers, TLS, client name).
    pub nats: NatsArgs,
    /// Account label.
    pub account: String,
    /// Credentials for this account.
    pub auth: Auth,
    /// Advisory flags.
    pub args: AdvisoryArgs,
    /// Where to count.
    pub metrics: AdvisoryMetrics,
}

impl crate::nats::retry::ListenerHealth for AccountListener {
    fn set_up(&self, up: bool) {
        self.metrics.set_up(&self.account, up);
    }

    fn count_error(&self, kind: ErrorKind) {
        self.metrics.listener_error(&self.account, kind.as_label());
    }

    fn account(&self) -> Option<&str> {
        Some(&self.account)
    }
}

impl AccountListener {
    /// Connects for `purpose`, counting the connection's background failures
    /// (a refused login once per outage, each refused subject) in
    /// `nats_delivery_advisory_listener_errors_total` of this account.
    pub(crate) async fn connect(
        &self,
        purpose: &str,
        subscription_capacity: usize,
    ) -> Result<async_nats::Client, ListenerError> {
        self.connect_counting(purpose, subscription_capacity, true)
            .await
    }

    /// Connects as [`Self::connect`] does, counting refused logins only with
    /// `count_login`: a second connection of the listener, beside one that
    /// counts them, would count each outage twice.
    pub(crate) async fn connect_counting(
        &self,
        purpose: &str,
        subscription_capacity: usize,
        count_login: bool,
    ) -> Result<async_nats::Client, ListenerError> {
        let (metrics, account) = (self.metrics.clone(), self.account.clone());
        let on_failure: crate::nats::OnFailure = Box::new(move |kind| {
            if count_login || kind != ErrorKind::Connect {
                metrics.listener_error(&account, kind.as_label())
            }
        });
        crate::nats::connect_watched(
            &self.nats,
            &self.auth,
            purpose,
            subscription_capacity,
            Some(on_failure),
        )
        .await
        .map_err(|e| ListenerError::new(ErrorKind::Connect, e.to_string()))
    }

    /// Runs until `shutdown` turns true (or its sender is dropped): durable
    /// mode when `--advisories-stream` is set, live mode otherwise; the API
    /// audits live in both. Errors are
    /// logged and retried; they never end the task.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        // Down until a session is set up: a login the server keeps refusing
        // shows as 0, never as a missing series.
        self.metrics.set_up(&self.account, false);
        tokio::spawn({
            let (nats, auth, account) =
                (self.nats.clone(), self.auth.clone(), self.account.clone());
            async move { crate::nats::warn_on_account_mismatch(&nats, &auth, &account).await }
        });
        if self.args.stream.is_some() {
            // The advisory stream does not capture the API audits (changing
            // its subjects would break existing deployments): they are
            // read live, on a connection of their own, with abandoned
            // batches and pins when the stream does not capture those
            // (durable mode says which once set up; until then, none).
            let since_live = Arc::new(AtomicBool::new(false));
            let audits = live::run_scope(
                self.clone(),
                shutdown.clone(),
                live::Scope::ApiAudits,
                since_live.clone(),
            );
            tokio::join!(durable::run(self, shutdown, since_live), audits);
        } else {
            live::run(self, shutdown).await
        }
    }
}

/// Registers the metrics of what is enabled and spawns the listeners: one
/// advisory listener per configured account (with `--advisories`) and the
/// system-event listener (with `--system-account`). Nothing is registered for
/// what is off. Fails only on contradictory flags, before anything starts.
/// After `shutdown` turns true, await the handles: durable listeners flush
/// their acknowledgements before they end.
pub(crate) fn spawn_listeners(
    nats: &NatsArgs,
    args: &AdvisoryArgs,
    registry: &mut Registry,
    shutdown: watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, ConnectionError> {
    let mut tasks = Vec::new();
    if args.enabled && args.stream.is_some() {
        // The default bucket name comes from the consumer name, which may
        // hold characters a bucket name may not.
        crate::flags::values::bucket_name(&args.totals_bucket()).map_err(|e| {
            ConnectionError::Config(format!(
                "--advisories-totals-bucket: {e}; the default is the consumer name followed by \"-totals\", so name the bucket"
            ))
        })?;
    }
    if !args.enabled && (args.stream.is_some() || args.dead_letter_stream.is_some()) {
        tracing::warn!(
            "--advisories-stream or --dead-letter-stream is set but --advisories is not: no advisory listener runs"
        );
    }
    if args.enabled {
        let accounts = nats.resolved_accounts()?;
        let metrics = AdvisoryMetrics::register(registry);
        for (account, auth) in accounts {
            metrics.init_account(&account, args.stream.is_some());
            let listener = AccountListener {
                nats: nats.clone(),
                account,
                auth,
                args: args.clone(),
                metrics: metrics.clone(),
            };
            tasks.push(tokio::spawn(listener.run(shutdown.clone())));
        }
    }
    if let Some(auth) = &args.system_account {
        let metrics = crate::system::events::SystemEventMetrics::register(registry);
        tasks.push(tokio::spawn(crate::system::events::run(
            nats.clone(),
            auth.clone(),
            args.max_client_names,
            metrics,
            shutdown,
        )));
    }
    Ok(tasks)
}

/// The running listeners, for `main`: start them before serving, stop them
/// after. Stopping lets durable listeners flush their acknowledgements.
#[derive(Debug)]
pub struct Listeners {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Listeners {
    /// Registers the metrics of what is enabled into `registry` and starts
    /// the listeners (see `spawn_listeners`); none when all are off.
    pub fn start(
        nats: &NatsArgs,
        args: &AdvisoryArgs,
        registry: &mut Registry,
    ) -> Result<Listeners, ConnectionError> {
        let (stop, rx) = watch::channel(false);
        let tasks = spawn_listeners(nats, args, registry, rx)?;
        Ok(Listeners { stop, tasks })
    }

    /// The stop signal, for tasks started beside the listeners (the canary).
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Takes tasks started beside the listeners: [`Self::stop`] waits for
    /// them too.
    pub fn adopt(&mut self, tasks: Vec<JoinHandle<()>>) {
        self.tasks.extend(tasks);
    }

    /// Signals every listener to stop and waits for them (at most 10 s).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(std::time::Duration::from_secs(10), all)
            .await
            .is_err()
        {
            tracing::warn!("advisory listeners did not stop within 10 s");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_coverage() {
        let md = parse::MAX_DELIVERIES_SUBJECT;
        assert!(subject_covers("$JS.EVENT.ADVISORY.CONSUMER.>", md));
        assert!(subject_covers("$JS.EVENT.ADVISORY.>", md));
        assert!(subject_covers(md, md));
        assert!(!subject_covers(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.*",
            md
        ));
        assert!(!subject_covers(
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>",
            md
        ));
        assert!(subject_covers("a.*.c", "a.b.c"));
        assert!(!subject_covers("a.b", "a.b.c"));
    }
}
