//! The listener: subscribes to the reports and records each into
//! [`ClientReports`], with the subject it came on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::{ClientReports, ReportError};
use crate::nats::retry::ErrorKind;
use crate::nats::{self, Auth, ConnectionError, NatsArgs};

/// Connects the report listener's client: connection failures in the
/// background (a refused login, say) are counted into `reports` by kind.
pub async fn connect(
    nats: &NatsArgs,
    auth: &Auth,
    reports: Arc<ClientReports>,
) -> Result<async_nats::Client, ConnectionError> {
    let on_failure: nats::OnFailure = Box::new(move |kind| reports.count_listener_error(kind));
    nats::connect_watched(nats, auth, "client-reports", 65_536, Some(on_failure)).await
}

/// Logs a rejected report at most once per interval, with how many were
/// rejected since the last line: a flood of garbage is counted in full but
/// does not become a flood of log lines.
#[derive(Debug)]
struct RateLimitedLog {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    fn warn(&mut self, subject: &str, error: &ReportError) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|l| now.duration_since(l) < self.interval)
        {
            self.suppressed += 1;
            return;
        }
        let suppressed = std::mem::take(&mut self.suppressed);
        self.last = Some(now);
        tracing::warn!(%subject, error = %error, not_logged_since_last_line = suppressed,
            "ignored an application report");
    }
}

fn connected(client: &async_nats::Client) -> bool {
    client.connection_state() == async_nats::connection::State::Connected
}

/// How often expired instances are removed and the connection is checked.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Pause before subscribing again after the subscription failed or ended.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(5);

/// The reports of every client, `<prefix>.*`, and those sent on the bare
/// prefix (by reporters older than the per-client subjects), which are
/// rejected and counted (`reason="subject"`) rather than never heard.
async fn subscribe(
    client: &async_nats::Client,
    prefix: &str,
) -> Result<impl futures::Stream<Item = async_nats::Message> + Unpin, async_nats::SubscribeError> {
    let per_client = client.subscribe(format!("{prefix}.*")).await?;
    let bare = client.subscribe(prefix.to_string()).await?;
    Ok(futures::stream::select(per_client, bare))
}

/// Subscribes to `<subject>.*` on `client` and records every report into
/// `reports`, forever: when subscribing fails or the subscription ends,
/// `nats_delivery_app_reports_listener_up` goes to 0 and it subscribes again
/// after 5 seconds; while the connection is down it is 0 as well (checked on
/// every expiry sweep). Expired instances are removed every second.
/// Rejected reports are counted, and logged at most once per 10 seconds.
/// Failed or ended subscriptions are counted by kind in
/// `nats_delivery_app_reports_listener_errors_total`.
pub async fn run_client_reports(
    client: async_nats::Client,
    subject: String,
    reports: Arc<ClientReports>,
) {
    let mut log = RateLimitedLog {
        interval: Duration::from_secs(10),
        last: None,
        suppressed: 0,
    };
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        match subscribe(&client, &subject).await {
            Ok(mut subscriber) => {
                // A connection still being established (retry on initial
                // connect) answers the flush once it is up.
                let _ = client.flush().await;
                reports.set_listener_up(connected(&client));
                loop {
                    tokio::select! {
                        message = subscriber.next() => match message {
                            Some(m) => {
                                let sent_as = m.subject.strip_prefix(subject.as_str())
                                    .and_then(|t| t.strip_prefix('.'));
                                if let Err(e) = reports.record(sent_as, &m.payload) {
                                    log.warn(&subject, &e);
                                }
                            }
                            None => break,
                        },
                        _ = sweep.tick() => {
                            reports.expire();
                            // Subscribed but disconnected hears nothing either.
                            reports.set_listener_up(connected(&client));
                        }
                    }
                }
                reports.set_listener_up(false);
                reports.count_listener_error(ErrorKind::Other);
                tracing::warn!(%subject, "application report subscription ended");
            }
            Err(e) => {
                reports.set_listener_up(false);
                reports.count_listener_error(ErrorKind::of_request(&e));
                tracing::error!(%subject, error = %e, "cannot subscribe to application reports");
            }
        }
        let pause = tokio::time::sleep(RESUBSCRIBE_AFTER);
        tokio::pin!(pause);
        loop {
            tokio::select! {
                _ = &mut pause => break,
                _ = sweep.tick() => reports.expire(),
            }
        }
    }
}
