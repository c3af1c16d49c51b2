//! One connection of the HTTP server: hyper's HTTP/1 and HTTP/2 (with
//! hyper's header read timeout, which needs its timer), the client's address
//! handed to the routes, closed when it moves no byte for the idle timeout
//! or when the server stops.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::either::Either;
use tower::ServiceExt;

use super::stream::{Activity, Conn, WriteTimeoutStream};
use super::ClientAddr;

/// The bounds of every connection; clones share the connection cap, so
/// every listening address counts against one.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// A write that makes no progress for this long fails.
    pub write_timeout: Duration,
    /// Time a client has to send a request's headers, counted from when the
    /// connection waits for a request (hyper's clock: over HTTP/1 it also
    /// bounds the time between two requests of a connection).
    pub header_read_timeout: Duration,
    /// A connection that reads and writes nothing for this long is closed
    /// (an answer in progress is finished first).
    pub idle_timeout: Duration,
    pub(super) open: Arc<Semaphore>,
}

impl ConnectionLimits {
    /// Limits with at most `max_connections` open at once.
    pub fn new(
        write_timeout: Duration,
        header_read_timeout: Duration,
        idle_timeout: Duration,
        max_connections: usize,
    ) -> ConnectionLimits {
        ConnectionLimits {
            write_timeout,
            header_read_timeout,
            idle_timeout,
            open: Arc::new(Semaphore::new(max_connections.max(1))),
        }
    }
}

/// Held by a connection for its life: one place under the cap.
pub(super) type Permit = OwnedSemaphorePermit;

/// Serves one connection until it ends, is idle for the idle timeout, or
/// the server stops (then the answer in progress is finished first).
pub(super) async fn serve_connection(
    conn: Conn,
    addr: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    mut stopping: watch::Receiver<bool>,
    _permit: Permit,
) {
    // As Go's net/http: HTTP/2 only when TLS negotiated it (ALPN), HTTP/1
    // otherwise. Told now rather than sniffed from the first bytes, so that
    // hyper's header clock runs from the start: a client that sends
    // nothing is cut off like one that trickles.
    let http2 =
        matches!(&conn, Either::Right(tls) if tls.get_ref().1.alpn_protocol() == Some(b"h2"));
    let activity = Activity::new();
    let io = TokioIo::new(WriteTimeoutStream::new(
        conn,
        limits.write_timeout,
        activity.clone(),
    ));
    let service = router.map_request(move |request: hyper::Request<Incoming>| {
        let mut request = request.map(Body::new);
        request
            .extensions_mut()
            .insert(ConnectInfo(ClientAddr(addr)));
        request
    });
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = if http2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    let mut served = pin!(builder.serve_connection(io, TowerToHyperService::new(service)));
    // A TLS handshake may end after the server began to stop.
    let mut closing = *stopping.borrow_and_update();
    if closing {
        served.as_mut().graceful_shutdown();
    }
    loop {
        let idle_at = tokio::time::Instant::from_std(activity.last() + limits.idle_timeout);
        tokio::select! {
            result = served.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%addr, error = %e, "connection ended");
                }
                return;
            }
            changed = stopping.changed(), if !closing => {
                if changed.is_err() || *stopping.borrow() {
                    closing = true;
                    served.as_mut().graceful_shutdown();
                }
            }
            () = tokio::time::sleep_until(idle_at), if !closing => {
                if activity.last() + limits.idle_timeout <= std::time::Instant::now() {
                    tracing::debug!(%addr, "closing an idle connection");
                    closing = true;
                    served.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
