//! Serving `/metrics` with bounds a slow or stuck client cannot stretch: a
//! write that makes no progress for `--write-timeout` closes its connection,
//! after a shutdown signal answers in flight get `--shutdown-timeout`, then
//! the server stops whatever is left. With TLS, each handshake runs as its
//! own task (bounded too), so a client that stalls in it delays nobody.

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Sleep;
use tokio_util::either::Either;

use crate::cli::web_config::WebConfig;

/// How the server ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every answer in flight was finished.
    Drained,
    /// Answers were still in flight when the shutdown timeout ran out.
    TimedOut,
}

/// Serves `router` on `listener` (over TLS when `tls`'s configuration has
/// it; each new connection takes its current TLS settings, read again when
/// the file changed) until `signal` completes, then stops accepting and
/// gives the answers in flight at most `shutdown_timeout`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<WebConfig>,
    router: Router,
    write_timeout: Duration,
    shutdown_timeout: Duration,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<Stopped> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = Connections::start(listener, tls, write_timeout)?;
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

/// Longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepted (and, with TLS, handshaken) connections, from a task that stops
/// accepting as soon as the server drops this.
struct Connections {
    ready: mpsc::Receiver<(WriteTimeoutStream, SocketAddr)>,
    local: SocketAddr,
}

impl Connections {
    fn start(
        listener: TcpListener,
        tls: Option<WebConfig>,
        timeout: Duration,
    ) -> io::Result<Connections> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        // TLS or not is decided at start: a reload cannot switch it.
        let web = tls.filter(|web| web.current().tls.is_some());
        let mut listener = listener;
        tokio::spawn(async move {
            loop {
                let (tcp, addr) = tokio::select! {
                    () = tx.closed() => return,
                    accepted = axum::serve::Listener::accept(&mut listener) => accepted,
                };
                let wrap = move |conn| WriteTimeoutStream {
                    inner: conn,
                    timeout,
                    stalled: None,
                };
                let tx = tx.clone();
                match web.clone() {
                    None => {
                        let _ = tx.send((wrap(Either::Left(tcp)), addr)).await;
                    }
                    Some(web) => {
                        tokio::spawn(async move {
                            // A few stat calls, a read of the files when they changed.
                            let Ok(Some(config)) =
                                tokio::task::spawn_blocking(move || web.current().tls.clone())
                                    .await
                            else {
                                return;
                            };
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                                .await
                            {
                                Ok(Ok(tls)) => {
                                    let _ =
                                        tx.send((wrap(Either::Right(Box::new(tls))), addr)).await;
                                }
                                Ok(Err(e)) => {
                                    tracing::debug!(%addr, error = %e, "TLS handshake failed")
                                }
                                Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                            }
                        });
                    }
                }
            }
        });
        Ok(Connections { ready, local })
    }
}

impl axum::serve::Listener for Connections {
    type Io = WriteTimeoutStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task only ends once this is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// A plain or TLS connection (`Either` passes every read and write through,
/// vectored writes included).
type Conn = Either<TcpStream, Box<tokio_rustls::server::TlsStream<TcpStream>>>;

/// A connection whose writes fail with `TimedOut` once the peer has read
/// nothing for the timeout: a scraper that stops reading cannot hold an
/// answer (and the exporter's shutdown) forever.
pub(crate) struct WriteTimeoutStream {
    inner: Conn,
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
