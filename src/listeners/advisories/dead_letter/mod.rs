//! Dead-letter capture: copy a dead message into a stream of its own.
//!
//! On a max-deliveries advisory (and, by flag, a terminated one) the original
//! is fetched by stream sequence and published to
//! `<prefix>.<stream>.<consumer>` with headers naming where it came from and
//! `Nats-Msg-Id` = `<account>.<stream>.<consumer>.<stream_seq>`, so a repeated
//! advisory is refused by the stream's duplicate window instead of stored
//! twice. A copy counts as stored only after its PubAck. If the original is
//! already gone (limits, purge), that is counted by reason, never as stored.

use std::time::Duration;

use async_nats::jetstream::{self, stream::RawMessageErrorKind};

use super::api_errors::is_stream_not_found;
use async_nats::HeaderMap;

use super::metrics::{AccountLabels, AdvisoryMetrics, ConsumerLabels, ReasonLabels};
use super::parse::{Advisory, AdvisoryKind};
use super::subject_covers;

mod error;
mod headers;

pub(super) use error::DeadLetterError;
pub(super) use headers::*;

/// Attempts at one copy before it is given up (so that a dead-letter stream
/// that refuses everything cannot stall the counting of advisories).
pub(super) const CAPTURE_ATTEMPTS: u32 = 5;

/// How long the dead-letter stream remembers message ids when the exporter creates it.
pub(super) const DUPLICATE_WINDOW: Duration = Duration::from_secs(3600);

/// What one capture attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Capture {
    /// The copy was stored now.
    Stored,
    /// The stream already held this copy (repeated advisory).
    AlreadyStored,
    /// The original is gone; nothing stored.
    Missing,
    /// This kind of advisory is not captured.
    NotWanted,
}

/// Copies dead messages of one account.
#[derive(Debug, Clone)]
pub(super) struct DeadLetter {
    js: jetstream::Context,
    prefix: String,
    capture_terminated: bool,
    account: String,
    metrics: AdvisoryMetrics,
}

impl DeadLetter {
    /// Makes sure the dead-letter stream exists (creating it if missing) and
    /// returns a writer.
    pub(super) async fn setup(
        js: jetstream::Context,
        stream: &str,
        prefix: &str,
        capture_terminated: bool,
        account: &str,
        metrics: AdvisoryMetrics,
    ) -> Result<Self, DeadLetterError> {
        let needed = format!("{prefix}.>");
        match js.get_stream(stream).await {
            Ok(mut s) => {
                let info = s
                    .info()
                    .await
                    .map_err(DeadLetterError::request(format!("stream {stream}")))?;
                let subjects = info.config.subjects.clone();
                if !subjects.iter().any(|f| subject_covers(f, &needed)) {
                    return Err(DeadLetterError::StreamMismatch {
                        stream: stream.to_string(),
                        subjects,
                        needed,
                    });
                }
            }
            Err(e) if is_stream_not_found(&e) => {
                js.create_stream(jetstream::stream::Config {
                    name: stream.to_string(),
                    subjects: vec![needed],
                    duplicate_window: DUPLICATE_WINDOW,
                    ..Default::default()
                })
                .await
                .map_err(DeadLetterError::request(format!("create stream {stream}")))?;
                tracing::info!(stream, "created dead-letter stream");
            }
            Err(e) => return Err(DeadLetterError::request(format!("stream {stream}"))(e)),
        }
        Ok(DeadLetter {
            js,
            prefix: prefix.to_string(),
            capture_terminated,
            account: account.to_string(),
            metrics,
        })
    }

    /// Whether this advisory's message is to be copied.
    pub(super) fn wants(&self, kind: AdvisoryKind) -> bool {
        match kind {
            AdvisoryKind::MaxDeliveries => true,
            AdvisoryKind::Terminated(_) => self.capture_terminated,
            AdvisoryKind::Nak => false,
        }
    }

    /// Copies the advisory's message. `first_time` is false for a repeated
    /// advisory: the copy is retried (the stream refuses a second one) but a
    /// missing original is not counted again.
    pub(super) async fn capture(
        &self,
        a: &Advisory,
        first_time: bool,
    ) -> Result<Capture, DeadLetterError> {
        if !self.wants(a.kind) {
            return Ok(Capture::NotWanted);
        }
        // The same message id as durable mode: the stream's incarnation is
        // part of it (a stream created again restarts its sequences).
        let created = match self.js.get_stream(&a.stream).await {
            Ok(mut st) => st
                .info()
                .await
                .ok()
                .and_then(|i| i64::try_from(i.created.unix_timestamp_nanos()).ok()),
            Err(_) => None,
        };
        let at = a
            .timestamp
            .as_deref()
            .and_then(super::incarnation::parse_timestamp);
        let incarnation = super::incarnation::tag(created, at);
        let result = if incarnation > 0 {
            self.try_capture(a, Some(incarnation), first_time).await
        } else {
            self.missing(a, first_time);
            Ok(Capture::Missing)
        };
        if result.is_err() {
            self.metrics
                .dead_letter_errors
                .get_or_create(&AccountLabels {
                    account: self.account.clone(),
                })
                .inc();
        }
        result
    }

    /// Durable mode: copies the message of the stream incarnation
    /// `incarnation` (see [`super::incarnation`]) without counting anything;
    /// the caller stores the outcome with the advisory's totals. A message of
    /// an earlier incarnation, or of a stream that is gone, is [`Capture::Missing`].
    pub(super) async fn capture_in(
        &self,
        a: &Advisory,
        incarnation: i64,
    ) -> Result<Capture, DeadLetterError> {
        if !self.wants(a.kind) {
            return Ok(Capture::NotWanted);
        }
        if incarnation <= 0 {
            return Ok(Capture::Missing);
        }
        self.try_capture(a, Some(incarnation), false).await
    }

    /// Logs that the copy of `a` is given up after repeated failures (durable
    /// mode counts it with the totals).
    pub(super) fn log_give_up(&self, a: &Advisory) {
        tracing::error!(
            account = %self.account,
            stream = %a.stream,
            seq = a.stream_seq,
            "dead-letter copy given up after repeated failures"
        );
    }

    /// Counts (when `count`) that the original of `a` is gone.
    fn missing(&self, a: &Advisory, count: bool) {
        if count {
            self.metrics
                .dead_letter_missing
                .get_or_create(&ReasonLabels {
                    account: self.account.clone(),
                    stream: a.stream.clone(),
                    consumer: a.consumer.clone(),
                    reason: a.kind.reason_label().to_string(),
                })
                .inc();
        }
    }

    /// Records that the copy of `a` is given up after repeated failures.
    pub(super) fn give_up(&self, a: &Advisory) {
        tracing::error!(
            account = %self.account,
            stream = %a.stream,
            seq = a.stream_seq,
            "dead-letter copy given up after repeated failures"
        );
        self.metrics
            .dead_letter_failed
            .get_or_create(&ConsumerLabels {
                account: self.account.clone(),
                stream: a.stream.clone(),
                consumer: a.consumer.clone(),
            })
            .inc();
    }

    /// One copy attempt. `count` is false in durable mode, whose totals
    /// count the outcome; `incarnation` is known there too.
    async fn try_capture(
        &self,
        a: &Advisory,
        incarnation: Option<i64>,
        count: bool,
    ) -> Result<Capture, DeadLetterError> {
        let source = self
            .js
            .get_stream_no_info(&a.stream)
            .await
            .map_err(DeadLetterError::request(format!("stream {}", a.stream)))?;
        let original = match source.get_raw_message(a.stream_seq).await {
            Ok(m) => m,
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {
                self.missing(a, count);
                return Ok(Capture::Missing);
            }
            Err(e) => {
                return Err(DeadLetterError::request(format!(
                    "get {} seq {}",
                    a.stream, a.stream_seq
                ))(e))
            }
        };
        let headers = self.copy_headers(a, &original, incarnation);
        let wanted = headers.clone();
        let subject = format!("{}.{}.{}", self.prefix, a.stream, a.consumer);
        let ack = self
            .js
            .publish_with_headers(subject, headers, original.payload)
            .await
            .map_err(DeadLetterError::request("publish"))?
            .await
            .map_err(DeadLetterError::request("publish ack"))?;
        if ack.duplicate {
            // A refusal is only as good as what it refers to: check that the
            // copy stored under that id is this message's.
            self.check_copy(&ack.stream, ack.sequence, &wanted).await?;
            return Ok(Capture::AlreadyStored);
        }
        if !count {
            return Ok(Capture::Stored);
        }
        self.metrics
            .dead_letter_stored
            .get_or_create(&ConsumerLabels {
                account: self.account.clone(),
                stream: a.stream.clone(),
                consumer: a.consumer.clone(),
            })
            .inc();
        Ok(Capture::Stored)
    }

    /// The headers of the copy of `original`: its own headers (`Nats-` ones
    /// renamed so the server does not act on them), where it came from and
    /// why, and a message id that makes a second copy a duplicate.
    fn copy_headers(
        &self,
        a: &Advisory,
        original: &jetstream::message::StreamMessage,
        incarnation: Option<i64>,
    ) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, values) in original.headers.iter() {
            let name: &str = name.as_ref();
            let copied = if let Some(rest) = name.strip_prefix("Nats-") {
                format!("{ORIGINAL_HEADER_PREFIX}{rest}")
            } else {
                name.to_string()
            };
            for v in values {
                headers.append(copied.as_str(), v.as_str());
            }
        }
        headers.insert(HEADER_STREAM, a.stream.as_str());
        headers.insert(HEADER_SEQUENCE, a.stream_seq.to_string().as_str());
        headers.insert(HEADER_SUBJECT, original.subject.as_str());
        headers.insert(HEADER_CONSUMER, a.consumer.as_str());
        if let Some(d) = a.deliveries {
            headers.insert(HEADER_DELIVERIES, d.to_string().as_str());
        }
        headers.insert(HEADER_REASON, a.kind.reason_label());
        if let Some(t) = &a.timestamp {
            headers.insert(HEADER_TIME, t.as_str());
        }
        headers.insert(HEADER_ACCOUNT, self.account.as_str());
        let mut id = format!(
            "{}.{}.{}.{}",
            self.account, a.stream, a.consumer, a.stream_seq
        );
        if let Some(created) = incarnation {
            headers.insert(HEADER_STREAM_CREATED, created.to_string().as_str());
            id.push_str(&format!(".{created}"));
        }
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        headers
    }
}

impl DeadLetter {
    /// Reads the copy the dead-letter stream holds at `seq` and compares its
    /// identifying headers with the copy that was refused as a duplicate.
    async fn check_copy(
        &self,
        stream: &str,
        seq: u64,
        wanted: &HeaderMap,
    ) -> Result<(), DeadLetterError> {
        let dl = self
            .js
            .get_stream_no_info(stream)
            .await
            .map_err(DeadLetterError::request(format!("stream {stream}")))?;
        let stored = dl
            .get_raw_message(seq)
            .await
            .map_err(DeadLetterError::request(format!(
                "read the stored copy {stream} seq {seq}"
            )))?;
        for h in [
            HEADER_ACCOUNT,
            HEADER_STREAM,
            HEADER_SEQUENCE,
            HEADER_CONSUMER,
            HEADER_STREAM_CREATED,
        ] {
            let want = wanted.get(h).map(|v| v.as_str());
            let have = stored.headers.get(h).map(|v| v.as_str());
            if want != have {
                return Err(DeadLetterError::OtherCopy {
                    stream: stream.to_string(),
                    seq,
                    header: h,
                    have: have.map(str::to_string),
                    want: want.map(str::to_string),
                });
            }
        }
        Ok(())
    }
}
