//! Serving `/metrics` with bounds a slow, stuck or hostile client cannot
//! stretch: at most `--web.max-connections` connections are open at once
//! (past it the next waits in the kernel's backlog until one closes); a
//! request's headers must arrive within `--web.header-read-timeout`; a
//! connection that moves no byte for `--web.idle-timeout` is closed; a
//! write that makes no progress for `--write-timeout` closes its
//! connection. After a shutdown signal answers in flight get
//! `--shutdown-timeout`, then the server stops whatever is left. With TLS,
//! each handshake runs as its own task (bounded too), so a client that
//! stalls in it delays nobody.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::either::Either;
use tokio_util::task::TaskTracker;

use super::connection::{serve_connection, ConnectionLimits};
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
/// the file changed) within `limits` until `signal` completes, then stops
/// accepting and gives the answers in flight at most `shutdown_timeout`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<WebConfig>,
    router: Router,
    limits: ConnectionLimits,
    shutdown_timeout: Duration,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<Stopped> {
    listener.local_addr()?;
    let (stop, stopping) = watch::channel(false);
    let connections = TaskTracker::new();
    // TLS or not is decided at start: a reload cannot switch it.
    let web = tls.filter(|web| web.current().tls.is_some());
    let accepting = accept_loop(listener, web, router, limits, stopping, connections.clone());
    tokio::select! {
        result = accepting => result?,
        () = signal => {}
    }
    let _ = stop.send(true);
    connections.close();
    match tokio::time::timeout(shutdown_timeout, connections.wait()).await {
        Ok(()) => Ok(Stopped::Drained),
        Err(_) => Ok(Stopped::TimedOut),
    }
}

/// Accepts connections forever, one permit of the cap each; returns only
/// on an error that ends serving.
async fn accept_loop(
    listener: TcpListener,
    web: Option<WebConfig>,
    router: Router,
    limits: ConnectionLimits,
    stopping: watch::Receiver<bool>,
    connections: TaskTracker,
) -> io::Result<()> {
    loop {
        let permit = limits
            .open
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (tcp, addr) = accept(&listener).await;
        let (router, limits, stopping) = (router.clone(), limits.clone(), stopping.clone());
        match web.clone() {
            None => {
                let conn = Either::Left(tcp);
                connections.spawn(serve_connection(
                    conn, addr, router, limits, stopping, permit,
                ));
            }
            Some(web) => {
                connections.spawn(async move {
                    if let Some(conn) = handshake(web, tcp, addr).await {
                        serve_connection(conn, addr, router, limits, stopping, permit).await;
                    }
                });
            }
        }
    }
}

/// The next connection; errors of one connection (aborted before it was
/// taken, or out of file descriptors) are logged and waited out.
async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((tcp, addr)) => {
                let _ = tcp.set_nodelay(true);
                return (tcp, addr);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection");
                // As axum's serve: out of descriptors, let some close first.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn handshake(
    web: WebConfig,
    tcp: TcpStream,
    addr: SocketAddr,
) -> Option<super::stream::Conn> {
    // A few stat calls, a read of the files when they changed.
    let config = tokio::task::spawn_blocking(move || web.current().tls.clone())
        .await
        .ok()??;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Some(Either::Right(Box::new(tls))),
        Ok(Err(e)) => {
            tracing::debug!(%addr, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%addr, "TLS handshake timed out");
            None
        }
    }
}
