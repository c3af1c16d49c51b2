//! Durable mode's unit of work: a batch of advisories read from the
//! advisory stream becomes one set of changed keys of the totals bucket.
//!
//! Nothing here acknowledges anything: the caller commits the changed keys
//! and only then acknowledges the messages listed in [`Work::ack`]. Every
//! decision is taken against the stored totals, so a batch applied again
//! after a conflict or a crash adds nothing twice (see [`super::totals`]).

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::jetstream::{self, Message};

use super::counting::OVERFLOW;
use super::dead_letter::{Capture, DeadLetter, DeadLetterError, CAPTURE_ATTEMPTS};
use super::incarnation::{parse_timestamp, Incarnations};
use super::parse::{self, Advisory, AdvisoryKind, ParseError, SUBJECTS};
use super::since_2_11::{self, Since211Counter};
use super::store::TotalsStore;
use super::subject_covers;
use super::totals::{is_stream_key, series_key, stream_key, EventId, Totals, ACCOUNT_KEY};

/// What applying a batch produced.
#[derive(Debug, Default)]
pub(super) struct Work {
    /// The new totals of every key the batch changed.
    pub(crate) changed: HashMap<String, Totals>,
    /// Indices of the messages to acknowledge once `changed` is stored;
    /// the others wait for redelivery (a dead-letter copy to retry).
    pub(crate) ack: Vec<usize>,
}

impl Work {
    /// The batch's copy of `key`'s totals, taken from the store the first
    /// time (called several times per advisory: no key is allocated then).
    fn entry<'a>(&'a mut self, store: &TotalsStore, key: &str) -> &'a mut Totals {
        if !self.changed.contains_key(key) {
            let stored = store
                .entries
                .get(key)
                .map(|s| s.totals.clone())
                .unwrap_or_default();
            self.changed.insert(key.to_string(), stored);
        }
        self.changed.get_mut(key).expect("inserted above")
    }
}

/// Applies batches of one account's advisories.
#[derive(Debug)]
pub(super) struct Applier {
    /// Account label.
    pub(crate) account: String,
    /// Creation time of the advisory stream (the sequences' incarnation).
    pub(crate) source: i64,
    /// Cap of distinct series.
    pub(crate) max_series: usize,
    /// JetStream of the account (stream creation times).
    pub(crate) js: jetstream::Context,
    /// Creation times looked up.
    pub(crate) incarnations: Incarnations,
    /// Dead-letter capture, if on.
    pub(crate) dead_letter: Option<DeadLetter>,
    /// Copy outcomes by advisory sequence, kept while a batch is applied
    /// again after a conflict, so a copy is made and counted once.
    pub(crate) captures: HashMap<u64, Result<Capture, Arc<DeadLetterError>>>,
    /// Whether the advisories of [`since_2_11`] are counted from the
    /// advisory stream (it captures them) rather than live.
    pub(crate) since_2_11: bool,
}

/// Whether any of `messages` is a delivery advisory (the rest only need an
/// acknowledgement). A wider stream on a pre-2.10 server, which ignores the
/// consumer's filter, also hands out the API audit advisories of the
/// exporter's own JetStream requests: a request made for those would make
/// the next one, for ever.
pub(super) fn counts_any(messages: &[Message]) -> bool {
    messages.iter().any(|m| {
        SUBJECTS.iter().any(|p| subject_covers(p, &m.subject)) || Since211Counter::wants(&m.subject)
    })
}

impl Applier {
    /// Works out what `messages` change, against `store`.
    pub(super) async fn apply(&mut self, store: &TotalsStore, messages: &[Message]) -> Work {
        let mut work = Work::default();
        let keys = |stream: bool| {
            store
                .entries
                .keys()
                .filter(|k| *k != ACCOUNT_KEY && is_stream_key(k) == stream)
                .count()
        };
        let (mut series, mut streams) = (keys(false), keys(true));
        for (i, msg) in messages.iter().enumerate() {
            let (aseq, delivered) = match msg.info() {
                Ok(info) => (info.stream_sequence, info.delivered),
                Err(_) => {
                    work.ack.push(i);
                    continue;
                }
            };
            if self.since_2_11 && Since211Counter::wants(&msg.subject) {
                self.count_since(store, &mut work, msg, aseq, &mut streams);
                work.ack.push(i);
                continue;
            }
            // A wider stream holds other advisories too; the consumer filters
            // them out on 2.10+, older servers ignore the filter.
            if !SUBJECTS.iter().any(|p| subject_covers(p, &msg.subject)) {
                work.ack.push(i);
                continue;
            }
            let account_new = !work.entry(store, ACCOUNT_KEY).applied(self.source, aseq);
            let advisory = match parse::parse_on(&msg.subject, &msg.payload) {
                Ok(a) => a,
                Err(e) => {
                    if account_new {
                        let acc = work.entry(store, ACCOUNT_KEY);
                        acc.received += 1;
                        match e {
                            ParseError::Malformed(why) => {
                                acc.malformed += 1;
                                tracing::warn!(account = %self.account, subject = %msg.subject, "{why}");
                            }
                            ParseError::UnknownType(_) => acc.unknown += 1,
                        }
                        acc.mark_applied(self.source, aseq);
                    }
                    work.ack.push(i);
                    continue;
                }
            };
            let mut key = series_key(&advisory.stream, &advisory.consumer);
            let folded = !store.entries.contains_key(&key)
                && !work.changed.contains_key(&key)
                && series >= self.max_series;
            let mut advisory = advisory;
            if folded {
                advisory.stream = OVERFLOW.to_string();
                advisory.consumer = OVERFLOW.to_string();
                key = series_key(OVERFLOW, OVERFLOW);
            }
            if !store.entries.contains_key(&key) && !work.changed.contains_key(&key) {
                series += 1;
            }
            let counted = self
                .count(store, &mut work, &key, &advisory, folded, aseq, delivered)
                .await;
            let Some(counted) = counted else { continue };
            if account_new {
                let acc = work.entry(store, ACCOUNT_KEY);
                acc.received += 1;
                acc.folded += u64::from(folded && counted == Counted::New);
                acc.duplicates += u64::from(counted == Counted::Duplicate);
                acc.mark_applied(self.source, aseq);
            }
            work.ack.push(i);
        }
        work
    }

    /// Adds one advisory of [`since_2_11`] to its stream's key: each
    /// advisory stream sequence once, each `id` once among the key's recent
    /// events; garbage to the account's malformed count. `streams`: the
    /// stream keys so far, at most `max_series` (then `__overflow__`).
    fn count_since(
        &self,
        store: &TotalsStore,
        work: &mut Work,
        msg: &Message,
        aseq: u64,
        streams: &mut usize,
    ) {
        let event = match since_2_11::parse(&msg.subject, &msg.payload) {
            Ok(e) => e,
            Err(why) => {
                let acc = work.entry(store, ACCOUNT_KEY);
                if !acc.applied(self.source, aseq) {
                    acc.malformed += 1;
                    acc.mark_applied(self.source, aseq);
                    tracing::warn!(account = %self.account, subject = %msg.subject, "malformed advisory: {why}");
                }
                return;
            }
        };
        let mut stream = event.stream.as_str();
        let mut key = stream_key(stream);
        if !store.entries.contains_key(&key) && !work.changed.contains_key(&key) {
            if *streams >= self.max_series {
                stream = since_2_11::OVERFLOW;
                key = stream_key(stream);
            }
            if !store.entries.contains_key(&key) && !work.changed.contains_key(&key) {
                *streams += 1;
            }
        }
        let id = EventId {
            kind: 3,
            seq: event.id_hash(),
            deliveries: 0,
            incarnation: 0,
        };
        let t = work.entry(store, &key);
        if t.applied(self.source, aseq) {
            return;
        }
        if !t.recent.contains(&id) {
            if t.stream.is_empty() {
                t.stream = stream.to_string();
            }
            event.add_to(t);
            t.remember(id);
        }
        t.mark_applied(self.source, aseq);
    }

    /// Adds one advisory to its series. `None`: leave it unacknowledged.
    #[allow(clippy::too_many_arguments)]
    async fn count(
        &mut self,
        store: &TotalsStore,
        work: &mut Work,
        key: &str,
        a: &Advisory,
        folded: bool,
        aseq: u64,
        delivered: i64,
    ) -> Option<Counted> {
        let s = work.entry(store, key);
        if s.stream.is_empty() {
            s.stream = a.stream.clone();
            s.consumer = a.consumer.clone();
        }
        if s.applied(self.source, aseq) {
            return Some(Counted::Before);
        }
        let (mut event, comparable) = event_of(a, folded);
        let at = a.timestamp.as_deref().and_then(parse_timestamp);
        if !folded {
            event.incarnation = self.incarnation(a, at, false).await?;
        }
        if comparable && work.entry(store, key).seen(&event) {
            // Looks counted already: make sure the stream was not created
            // again since (its sequences start at 1 again).
            event.incarnation = self.incarnation(a, at, true).await?;
            if work.entry(store, key).seen(&event) {
                work.entry(store, key).mark_applied(self.source, aseq);
                return Some(Counted::Duplicate);
            }
        }
        let mut copied = None;
        if let Some(dl) = self
            .dead_letter
            .as_ref()
            .filter(|dl| dl.wants(a.kind) && !folded)
        {
            let outcome = match self.captures.get(&aseq) {
                Some(o) => o.clone(),
                None => {
                    let o = dl.capture_in(a, event.incarnation).await.map_err(Arc::new);
                    self.captures.insert(aseq, o.clone());
                    o
                }
            };
            match outcome {
                Ok(c) => copied = Some(c),
                Err(e) => {
                    work.entry(store, ACCOUNT_KEY).dead_letter_errors += 1;
                    if delivered < i64::from(CAPTURE_ATTEMPTS) {
                        // Not acknowledged: redelivered after ack_wait, and
                        // counted then, with its copy.
                        tracing::warn!(account = %self.account, stream = %a.stream, seq = a.stream_seq, delivered, "dead-letter capture failed, will retry: {e}");
                        return None;
                    }
                    dl.log_give_up(a);
                    work.entry(store, key).dead_letter_failed += 1;
                }
            }
        }
        let s = work.entry(store, key);
        add_to_series(s, a, copied);
        s.remember(event);
        s.mark_applied(self.source, aseq);
        Some(Counted::New)
    }
}

/// The event `a` reports (its incarnation still 0), and whether it can be
/// compared with the events counted before.
fn event_of(a: &Advisory, folded: bool) -> (EventId, bool) {
    let (kind, deliveries) = match a.kind {
        AdvisoryKind::MaxDeliveries => (0, 0),
        AdvisoryKind::Terminated(_) => (1, 0),
        AdvisoryKind::Nak => (2, a.deliveries.unwrap_or(0)),
    };
    // Without the delivery count two NAKs of one message look alike:
    // count them all rather than drop a real one. Folded series keep no
    // names to look streams up by.
    let comparable = !(folded || kind == 2 && a.deliveries.is_none());
    let event = EventId {
        kind,
        seq: a.stream_seq,
        deliveries,
        incarnation: 0,
    };
    (event, comparable)
}

/// Adds `a` and the outcome of its dead-letter copy to the series' totals.
fn add_to_series(s: &mut Totals, a: &Advisory, copied: Option<Capture>) {
    match a.kind {
        AdvisoryKind::MaxDeliveries => s.max_deliveries += 1,
        AdvisoryKind::Nak => s.naks += 1,
        AdvisoryKind::Terminated(r) => *s.terminated.entry(r.as_label().into()).or_default() += 1,
    }
    match copied {
        // A new event whose copy the stream already holds: stored by an
        // exporter that stopped before saving its count.
        Some(Capture::Stored | Capture::AlreadyStored) => s.dead_letter_stored += 1,
        Some(Capture::Missing) => {
            *s.dead_letter_missing
                .entry(a.kind.reason_label().into())
                .or_default() += 1
        }
        _ => {}
    }
}

impl Applier {
    /// The incarnation tag of `a`'s stream; `None` (leave the advisory
    /// unacknowledged, to be redelivered after `ack_wait`) while the
    /// stream's creation time cannot be learned, as during an election.
    async fn incarnation(&mut self, a: &Advisory, at: Option<i64>, fresh: bool) -> Option<i64> {
        match self.incarnations.tag(&self.js, &a.stream, at, fresh).await {
            Ok(tag) => Some(tag),
            Err(e) => {
                tracing::warn!(account = %self.account, stream = %a.stream, seq = a.stream_seq, "advisory left for later: cannot tell which stream it is about: {e}");
                None
            }
        }
    }
}

/// How one advisory was taken into its series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counted {
    /// Counted now.
    New,
    /// The same event was counted before (a re-sent advisory).
    Duplicate,
    /// This very advisory was stored before (redelivered after a crash).
    Before,
}
