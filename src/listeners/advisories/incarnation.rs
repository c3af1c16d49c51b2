//! Which incarnation of a stream an advisory speaks of.
//!
//! A stream deleted and created again under the same name restarts its
//! sequences at 1, so (stream, consumer, stream sequence) names two different
//! messages. The server gives every stream a creation time; an advisory
//! stamped at or after the current stream's creation belongs to it, one
//! stamped before belongs to an earlier stream of that name. The tag is the
//! creation time in Unix nanoseconds, negated for "an earlier stream than the
//! one created then", and 0 when the stream is gone or the advisory carries
//! no timestamp.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;

use super::api_errors::is_stream_not_found;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// How long a looked-up creation time is trusted before it is asked again.
/// A collision with an earlier event always asks again (see [`Incarnations::tag`]).
const TRUST: Duration = Duration::from_secs(30);

/// Looked-up creation times of the streams advisories name.
#[derive(Debug, Default)]
pub(super) struct Incarnations {
    known: HashMap<String, (Option<i64>, Instant)>,
}

/// Unix nanoseconds of an RFC 3339 timestamp.
pub(super) fn parse_timestamp(text: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos()).ok()
}

/// The tag of an advisory stamped `at` for a stream created `created`.
pub(super) fn tag(created: Option<i64>, at: Option<i64>) -> i64 {
    match (created, at) {
        (Some(c), Some(t)) if t < c => -c,
        (Some(c), _) => c,
        (None, _) => 0,
    }
}

impl Incarnations {
    /// The incarnation tag of an advisory about `stream` stamped `at`, or why
    /// the stream's creation time could not be learned.
    /// `fresh` asks the server even if a recent answer is known: used when
    /// the event looks like one already counted, which is exactly when a
    /// re-created stream would be mistaken for the old one.
    pub(super) async fn tag(
        &mut self,
        js: &jetstream::Context,
        stream: &str,
        at: Option<i64>,
        fresh: bool,
    ) -> Result<i64, LookupError> {
        let known = self
            .known
            .get(stream)
            .filter(|(_, when)| !fresh && when.elapsed() < TRUST)
            .map(|(created, _)| *created);
        let created = match known {
            Some(c) => c,
            None => {
                // A failed lookup is not remembered: asked again next time.
                let c = created(js, stream).await?;
                // Bounded by the series cap upstream; a flood of unknown
                // names still cannot grow this past what is kept.
                if self.known.len() > 100_000 {
                    self.known.clear();
                }
                self.known.insert(stream.to_string(), (c, Instant::now()));
                c
            }
        };
        Ok(tag(created, at))
    }
}

/// The stream's creation time; `None` when the server says there is no such
/// stream. Any other failure (a timeout, no leader during an election) is an
/// error: taken for "gone", it would give an advisory the wrong tag and count
/// it again under that tag.
async fn created(js: &jetstream::Context, stream: &str) -> Result<Option<i64>, LookupError> {
    let failed = |e: async_nats::Error| LookupError {
        stream: stream.to_string(),
        source: e,
    };
    let mut s = match js.get_stream(stream).await {
        Ok(s) => s,
        Err(e) if is_stream_not_found(&e) => return Ok(None),
        Err(e) => return Err(failed(e.into())),
    };
    let info = s.info().await.map_err(|e| failed(e.into()))?;
    Ok(i64::try_from(info.created.unix_timestamp_nanos()).ok())
}

/// Why a stream's creation time could not be learned.
#[derive(Debug, thiserror::Error)]
#[error("stream {stream}: {source}")]
pub(super) struct LookupError {
    stream: String,
    #[source]
    source: async_nats::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_tell_incarnations_apart() {
        let created = parse_timestamp("2026-11-30T10:00:00Z");
        let before = parse_timestamp("2026-11-30T09:59:59.999999999Z");
        let after = parse_timestamp("2026-11-30T10:00:00.5Z");
        assert_eq!(tag(created, after), created.unwrap());
        assert_eq!(tag(created, before), -created.unwrap());
        assert_eq!(tag(created, None), created.unwrap());
        assert_eq!(tag(None, after), 0);
        assert_eq!(parse_timestamp("yesterday"), None);
    }
}
