//! The connection under the HTTP server: writes that make no progress for
//! the write timeout fail, and every byte read or written is stamped, so
//! that an idle connection can be told apart.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;
use tokio_util::either::Either;

/// A plain or TLS connection (`Either` passes every read and write through,
/// vectored writes included).
pub(super) type Conn = Either<TcpStream, Box<tokio_rustls::server::TlsStream<TcpStream>>>;

/// When a connection last moved a byte, in milliseconds since it was
/// accepted; shared between its stream and its idle watch.
#[derive(Debug, Clone)]
pub(super) struct Activity {
    since: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            since: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn stamp(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// When the connection last read or wrote a byte.
    pub(super) fn last(&self) -> Instant {
        self.since + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A connection whose writes fail with `TimedOut` once the peer has read
/// nothing for the timeout: a scraper that stops reading cannot hold an
/// answer (and the exporter's shutdown) forever.
pub(crate) struct WriteTimeoutStream {
    inner: Conn,
    timeout: Duration,
    activity: Activity,
    /// Started when a write first could not proceed; reset by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteTimeoutStream {
    pub(super) fn new(inner: Conn, timeout: Duration, activity: Activity) -> WriteTimeoutStream {
        WriteTimeoutStream {
            inner,
            timeout,
            activity,
            stalled: None,
        }
    }

    fn track<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            self.activity.stamp();
            return poll;
        }
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteTimeoutStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.stamp();
        }
        poll
    }
}

impl AsyncWrite for WriteTimeoutStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.track(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.track(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.track(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.track(cx, poll)
    }
}
