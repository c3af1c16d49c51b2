//! Serving `/metrics` with bounds a slow or stuck client cannot stretch: a
//! write that makes no progress for `--write-timeout` closes its connection,
//! and after a shutdown signal answers in flight get `--shutdown-timeout`,
//! then the server stops whatever is left.

use std::future::{Future, IntoFuture};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// How the server ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every answer in flight was finished.
    Drained,
    /// Answers were still in flight when the shutdown timeout ran out.
    TimedOut,
}

/// Serves `router` on `listener` until `signal` completes, then stops
/// accepting and gives the answers in flight at most `shutdown_timeout`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    write_timeout: Duration,
    shutdown_timeout: Duration,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<Stopped> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = WriteTimeoutListener {
        inner: listener,
        timeout: write_timeout,
    };
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = stopped.await;
    });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        result = &mut server => return result.map(|()| Stopped::Drained),
        () = signal => {}
    }
    let _ = stop.send(());
    match tokio::time::timeout(shutdown_timeout, server).await {
        Ok(result) => result.map(|()| Stopped::Drained),
        Err(_) => Ok(Stopped::TimedOut),
    }
}

/// A TCP listener whose connections fail a write that is stuck too long.
struct WriteTimeoutListener {
    inner: TcpListener,
    timeout: Duration,
}

impl axum::serve::Listener for WriteTimeoutListener {
    type Io = WriteTimeoutStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let stream = WriteTimeoutStream {
            inner: stream,
            timeout: self.timeout,
            stalled: None,
        };
        (stream, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection whose writes fail with `TimedOut` once the peer has read
/// nothing for the timeout: a scraper that stops reading cannot hold an
/// answer (and the exporter's shutdown) forever.
pub struct WriteTimeoutStream {
    inner: TcpStream,
    timeout: Duration,
    /// Started when a write first could not proceed; reset by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteTimeoutStream {
    fn track<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
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
        Pin::new(&mut self.inner).poll_read(cx, buf)
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
