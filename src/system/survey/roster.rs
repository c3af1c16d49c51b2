//! Which servers a survey expects, and what became of each.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{Answer, ServerInfo};

/// How long a server seen before may stay silent before the roster forgets
/// it: until then it is missing (its sources down, `NatsDeliverySurveyServerMissing`),
/// after it is taken for scaled away and its series end. An hour rides out
/// any restart or partition an operator would not have noticed by then.
pub(crate) const FORGET_MISSING_AFTER: Duration = Duration::from_secs(3600);

/// The servers seen so far, by name, with when each last answered (or was
/// last heard of), and how many are expected at least.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    at_least: usize,
    seen: BTreeMap<String, (ServerInfo, Instant)>,
}

/// One survey, accounted for.
#[derive(Debug, Clone, Default)]
pub struct SurveyOutcome {
    /// One answer per server, in the order they came.
    pub answers: Vec<Answer>,
    /// Servers seen before (or given as expected) that did not answer.
    pub missing: Vec<ServerInfo>,
    /// Servers expected: the count given, or the servers seen, if more.
    pub expected: usize,
    /// Replies that were not a server reply, this survey.
    pub broken: u64,
    /// Second replies from a server name already answered, this survey.
    pub duplicates: u64,
    /// Replies that came after their survey ended, so far.
    pub late_total: u64,
}

impl Roster {
    /// A roster expecting at least `at_least` servers.
    pub(crate) fn new(at_least: usize) -> Roster {
        Roster {
            at_least,
            seen: BTreeMap::new(),
        }
    }

    /// Servers expected in the next survey.
    pub(crate) fn expected(&self) -> usize {
        self.at_least.max(self.seen.len())
    }

    /// Remembers `servers`, heard of at `now` (the newest identity of each
    /// name wins).
    pub(crate) fn learn(&mut self, servers: impl IntoIterator<Item = ServerInfo>, now: Instant) {
        for server in servers {
            self.seen.insert(server.name.clone(), (server, now));
        }
    }

    /// Takes one survey's `answers`, ended at `now`, in: the first answer of
    /// each server counts; every server seen that did not answer is
    /// missing, until it has been silent for [`FORGET_MISSING_AFTER`].
    pub(crate) fn account(
        &mut self,
        answers: Vec<Answer>,
        broken: u64,
        late_total: u64,
        now: Instant,
    ) -> SurveyOutcome {
        let mut kept: Vec<Answer> = Vec::with_capacity(answers.len());
        let mut duplicates = 0;
        for answer in answers {
            if kept.iter().any(|a| a.server.name == answer.server.name) {
                duplicates += 1;
            } else {
                kept.push(answer);
            }
        }
        self.learn(kept.iter().map(|a| a.server.clone()), now);
        self.seen
            .retain(|_, (_, heard)| now.saturating_duration_since(*heard) < FORGET_MISSING_AFTER);
        let missing = self
            .seen
            .values()
            .filter(|(s, _)| !kept.iter().any(|a| a.server.name == s.name))
            .map(|(s, _)| s.clone())
            .collect();
        SurveyOutcome {
            answers: kept,
            missing,
            expected: self.expected(),
            broken,
            duplicates,
            late_total,
        }
    }
}
