//! The system-event listener in a test: started on a server's system
//! account with a registry of its own, read back and stopped.

use std::time::Duration;

use nats_delivery_exporter::{run_system_events, SystemEventMetrics};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use super::{encode, nats_args};

/// A running system-event listener: its registry, metrics and stop switch.
pub struct SystemListener {
    /// Registry holding only the system-event metrics.
    pub registry: Registry,
    /// The metrics.
    pub metrics: SystemEventMetrics,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl SystemListener {
    /// Starts the listener with `credentials` (`user:USER:PASSWORD`, ...)
    /// and at most `max_clients` distinct client names, without waiting.
    pub fn spawn(s: &NatsServer, credentials: &str, max_clients: usize) -> SystemListener {
        let mut registry = Registry::default();
        let metrics = SystemEventMetrics::register(&mut registry);
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(run_system_events(
            nats_args(s),
            credentials.parse().expect("credentials"),
            max_clients,
            metrics.clone(),
            rx,
        ));
        SystemListener {
            registry,
            metrics,
            stop,
            task,
        }
    }

    /// Starts the listener as the [`super::ACCOUNTS`] system user and waits
    /// until it is up.
    pub async fn start(s: &NatsServer, max_clients: usize) -> SystemListener {
        let listener = SystemListener::spawn(s, "user:sys:sys-secret", max_clients);
        Wait::secs("the system listener up", 10)
            .until(|| {
                let up = listener.metrics.listener_up.get();
                (up == 1).then_some(()).ok_or(up)
            })
            .await;
        listener
    }

    /// Text exposition of the registry.
    pub fn text(&self) -> String {
        encode(&self.registry)
    }

    /// Stops the listener and waits for it (at most 10 s).
    pub async fn stop(self) {
        self.stop.send(true).expect("listener alive");
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the system listener stops within 10 s")
            .expect("the system listener did not panic");
    }
}
