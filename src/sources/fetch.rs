//! One GET of a monitoring endpoint, bounded in time and in size.
//!
//! Nothing the endpoint sends is trusted: `Content-Length` only helps size
//! the buffer (never beyond the limit), the body is counted as it arrives and
//! abandoned past `--max-reply-size`, redirects are refused rather than
//! followed, and errors never carry the URL (it may hold credentials).

use std::io::{BufRead, Read};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use url::Url;

use super::kept::{self, ChargedReader, KeptBudget};
use super::parse_error::{self, ParseError};
use crate::poll_error::PollError;

/// Chunks read but not yet parsed, per streamed reply: enough to keep the
/// parser busy while the next chunk arrives, few enough that the reply is
/// never held whole. A chunk is what hyper read at once (the heap test of
/// `tests/jsz_streamed_parse.rs` compares counts).
const CHUNKS_IN_FLIGHT: usize = 4;

/// The HTTP client and the limits every monitoring request obeys.
#[derive(Debug, Clone)]
pub struct Fetcher {
    http: reqwest::Client,
    timeout: Duration,
    max_reply_size: usize,
}

impl Fetcher {
    /// A fetcher using `builder` (TLS roots already added) with redirects
    /// off, `timeout` per request and replies of at most `max_reply_size` bytes.
    pub fn new(
        builder: reqwest::ClientBuilder,
        timeout: Duration,
        max_reply_size: usize,
    ) -> Result<Fetcher, reqwest::Error> {
        let http = builder
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!(
                "nats-delivery-exporter/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()?;
        Ok(Fetcher {
            http,
            timeout,
            max_reply_size,
        })
    }

    /// The same client with `timeout` per request instead: for reads
    /// beside the scrapes, which have a deadline of their own.
    pub(crate) fn with_timeout(&self, timeout: Duration) -> Fetcher {
        Fetcher {
            timeout,
            ..self.clone()
        }
    }

    /// GETs `url` and parses its JSON body as `T` as it arrives (see
    /// [`Fetcher::get_streamed`]), all within the timeout: the body is
    /// never held whole, and what the parse can keep is charged to `kept`
    /// (`ChargedReader`), so that a reply padded with whitespace, or with
    /// values without end, costs memory only for what is kept, and only up
    /// to the budget.
    pub(crate) async fn get_json<T: DeserializeOwned + Send + 'static>(
        &self,
        url: Url,
        kept: &Arc<KeptBudget>,
    ) -> Result<T, PollError> {
        self.get_json_accepting(url, kept, &[]).await
    }

    /// [`Fetcher::get_json`] that also reads the body of a reply with one of
    /// the `accepted` error statuses (`/healthz` answers 503 with its
    /// reasons).
    pub(crate) async fn get_json_accepting<T: DeserializeOwned + Send + 'static>(
        &self,
        url: Url,
        kept: &Arc<KeptBudget>,
        accepted: &'static [u16],
    ) -> Result<T, PollError> {
        let budget = kept.clone();
        self.get_streamed_accepting(url, kept, accepted, move |body| {
            let reader = ChargedReader::new(body, budget);
            serde_json::from_reader(reader).map_err(ParseError::json)
        })
        .await
    }

    /// GETs `url` and hands its body to `parse` as it arrives, on a
    /// blocking thread fed chunk by chunk, so that at most a few chunks of a
    /// large reply are held at any time, never the whole. `parse` runs in
    /// `kept`'s `kept::scope` and charges it with what it holds. Same
    /// limits and errors as `Fetcher::get_json`; an error of `parse` is a
    /// `PollError::Parse`, or `PollError::TooMuchKept` when a charge was
    /// refused, and a reply that is not JSON fails as soon as `parse` sees it.
    pub async fn get_streamed<T, P>(
        &self,
        url: Url,
        kept: &Arc<KeptBudget>,
        parse: P,
    ) -> Result<T, PollError>
    where
        T: Send + 'static,
        P: FnOnce(&mut dyn BufRead) -> Result<T, ParseError> + Send + 'static,
    {
        self.get_streamed_accepting(url, kept, &[], parse).await
    }

    async fn get_streamed_accepting<T, P>(
        &self,
        url: Url,
        kept: &Arc<KeptBudget>,
        accepted: &'static [u16],
        parse: P,
    ) -> Result<T, PollError>
    where
        T: Send + 'static,
        P: FnOnce(&mut dyn BufRead) -> Result<T, ParseError> + Send + 'static,
    {
        self.within_timeout(async {
            let mut response = self.get_checked(url, accepted).await?;
            let (chunks, from_network) = mpsc::channel(CHUNKS_IN_FLIGHT);
            let budget = kept.clone();
            let parser = tokio::task::spawn_blocking(move || {
                kept::scope(&budget, || parse(&mut ChunkReader::new(from_network)))
            });
            let mut counted = 0;
            while let Some(chunk) = self.next_chunk(&mut response, &mut counted).await? {
                if chunks.send(chunk).await.is_err() {
                    // The parser stopped before the end: it has the reason.
                    break;
                }
            }
            // The end of the body, for the parser: it fails on a reply cut
            // short. (A broken connection returned above, dropping the parser.)
            drop(chunks);
            parse_error::parsed(parser.await)
        })
        .await
    }

    async fn within_timeout<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, PollError>>,
    ) -> Result<T, PollError> {
        // reqwest's own timeout covers the body too; this outer one is a
        // backstop so that no poll can ever hold a scrape longer than the
        // timeout, parsing included.
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result,
            Err(_) => Err(PollError::Timeout(self.timeout)),
        }
    }

    /// Sends the request; a redirect, an error status or an announced size
    /// past the limit ends it before the body.
    async fn get_checked(
        &self,
        url: Url,
        accepted: &[u16],
    ) -> Result<reqwest::Response, PollError> {
        let response = self
            .http
            .get(url)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| PollError::from_reqwest(e, self.timeout))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(PollError::Redirect(status.as_u16()));
        }
        if !status.is_success() && !accepted.contains(&status.as_u16()) {
            return Err(PollError::Status(status.as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > self.max_reply_size as u64)
        {
            return Err(PollError::TooLarge(self.max_reply_size));
        }
        Ok(response)
    }

    /// The next chunk of the body, `counted` bytes having come before it;
    /// past the limit the reply is abandoned, whatever its header said.
    async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
        counted: &mut usize,
    ) -> Result<Option<Bytes>, PollError> {
        let chunk = response
            .chunk()
            .await
            .map_err(|e| PollError::from_reqwest(e, self.timeout))?;
        if let Some(chunk) = &chunk {
            super::server_cost::count_reply_bytes(chunk.len());
            *counted += chunk.len();
            if *counted > self.max_reply_size {
                return Err(PollError::TooLarge(self.max_reply_size));
            }
        }
        Ok(chunk)
    }
}

/// The body of a streamed reply as a [`BufRead`], for a parser on a
/// blocking thread: chunks come over a bounded channel from the task reading
/// the network; the channel closing is the end of the body. Each chunk is
/// the reader's buffer as it is, so no byte is copied on the way.
struct ChunkReader {
    chunks: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChunkReader {
    fn new(chunks: mpsc::Receiver<Bytes>) -> ChunkReader {
        ChunkReader {
            chunks,
            current: Bytes::new(),
        }
    }
}

impl BufRead for ChunkReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => break,
            }
        }
        Ok(&self.current)
    }

    fn consume(&mut self, n: usize) {
        self.current.advance(n);
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = buf.len().min(available.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader_of(chunks: &[&[u8]]) -> ChunkReader {
        let (tx, rx) = mpsc::channel(chunks.len().max(1));
        for c in chunks {
            tx.try_send(Bytes::copy_from_slice(c)).unwrap();
        }
        ChunkReader::new(rx)
    }

    #[test]
    fn chunks_read_as_one_body() {
        let mut body = String::new();
        reader_of(&[b"{\"a\":", b"", b"[1,2", b",3]}"])
            .read_to_string(&mut body)
            .unwrap();
        assert_eq!(body, "{\"a\":[1,2,3]}");
    }

    #[test]
    fn a_body_cut_short_is_a_parse_error() {
        let parsed: Result<serde_json::Value, _> =
            serde_json::from_reader(reader_of(&[b"{\"a\":[1,2"]));
        assert!(parsed.unwrap_err().is_eof());
    }
}
