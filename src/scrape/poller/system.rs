//! Polling through the system account: the servers come from each poll's
//! survey instead of the monitoring URLs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;

use super::{Poller, Target};
use crate::lock::LockOrRecover;
use crate::poll_error::PollError;
use crate::sources::kept::KeptBudget;
use crate::sources::{self, ServerLink, SystemLink, TargetSnapshot};
use crate::system::poll::{SurveyReport, SystemPolling};
use crate::system::survey::Answer;

/// The servers found through the system account, by name, and the
/// survey's counts so far.
#[derive(Debug)]
pub(super) struct SystemSide {
    pub(super) polling: SystemPolling,
    pub(super) targets: Mutex<BTreeMap<String, Arc<Target>>>,
    /// Broken and duplicate survey replies so far.
    pub(super) totals: Mutex<(u64, u64)>,
}

impl Poller {
    /// Surveys the servers, then polls each that answered; each server seen
    /// before that did not answer has every source down (`no_reply`).
    pub(super) async fn poll_system(
        &self,
        system: &SystemSide,
    ) -> (Vec<TargetSnapshot>, SurveyReport) {
        let started = Instant::now();
        let target_of = |name: &str| self.system_target(system, name);
        let (answers, down, mut report) = self.survey(system).await;
        let left = self.settings.timeout.saturating_sub(started.elapsed());
        let polls = answers.iter().map(|answer| {
            let target = target_of(&answer.server.name);
            {
                // The survey names the server and its version, /varz or
                // not: leaders are told by that name.
                let mut state = target.state.lock_or_recover();
                state.server_name = Some(answer.server.name.clone());
                if !answer.server.version.is_empty() {
                    state.server_version = Some(answer.server.version.clone());
                }
            }
            async move {
                let kept = KeptBudget::new(self.settings.max_kept_size);
                let link = ServerLink::System(SystemLink {
                    requests: &system.polling.requests,
                    name: &answer.server.name,
                    id: &answer.server.id,
                    varz: Some(&answer.data),
                    kept: &kept,
                });
                self.poll_target(&target, link, left).await
            }
        });
        let mut snaps = join_all(polls).await;
        for (target, why) in down {
            let failed = target.sources.iter().map(|_| {
                let error = if report.up {
                    PollError::NoReply(why.clone())
                } else {
                    PollError::Nats(why.clone())
                };
                (Err(error), (Duration::ZERO, 0))
            });
            snaps.push(self.settle(&target, failed.collect()));
        }
        snaps.sort_by(|a, b| a.server.cmp(&b.server));
        let answered = |name: &str| answers.iter().any(|a| a.server.name == name);
        report.servers = snaps
            .iter()
            .map(|s| (s.server.clone(), answered(&s.server)))
            .collect();
        (snaps, report)
    }

    /// The target of the server `name`, made the first time it answers.
    fn system_target(&self, system: &SystemSide, name: &str) -> Arc<Target> {
        let mut targets = system.targets.lock_or_recover();
        targets
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Target {
                    url: None,
                    identity: name.to_string(),
                    sources: sources::per_target(&self.settings.sources),
                    state: Mutex::default(),
                })
            })
            .clone()
    }

    /// One survey: the servers that answered, those known that did not
    /// (with why), and the survey's report so far.
    async fn survey(
        &self,
        system: &SystemSide,
    ) -> (Vec<Answer>, Vec<(Arc<Target>, String)>, SurveyReport) {
        // A server still answering a read of ours beside the scrapes
        // answers the survey after it.
        let busy: Vec<String> = system
            .targets
            .lock_or_recover()
            .iter()
            .filter(|(_, t)| t.sources.iter().any(|s| s.reading_beside()))
            .map(|(name, _)| name.clone())
            .collect();
        match system.polling.survey(self.settings.timeout, &busy).await {
            Ok(outcome) => {
                let mut totals = system.totals.lock_or_recover();
                totals.0 += outcome.broken;
                totals.1 += outcome.duplicates;
                let report = SurveyReport {
                    up: true,
                    expected: outcome.expected as u64,
                    answered: outcome.answers.len() as u64,
                    late_total: outcome.late_total,
                    broken_total: totals.0,
                    duplicates_total: totals.1,
                    servers: Vec::new(),
                };
                // A server the roster forgot (silent past its bound) loses
                // its target too, so that a failed survey does not bring it back.
                system.targets.lock_or_recover().retain(|name, _| {
                    outcome.answers.iter().any(|a| &a.server.name == name)
                        || outcome.missing.iter().any(|s| &s.name == name)
                });
                let why = "the server did not answer the survey";
                let down: Vec<_> = outcome
                    .missing
                    .iter()
                    .map(|s| (self.system_target(system, &s.name), why.to_string()))
                    .collect();
                (outcome.answers, down, report)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the system-account survey failed");
                let (broken, duplicates) = *system.totals.lock_or_recover();
                let report = SurveyReport {
                    broken_total: broken,
                    duplicates_total: duplicates,
                    ..SurveyReport::default()
                };
                let known: Vec<_> = system
                    .targets
                    .lock_or_recover()
                    .values()
                    .map(|t| (t.clone(), e.to_string()))
                    .collect();
                (Vec::new(), known, report)
            }
        }
    }
}
