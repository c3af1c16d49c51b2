//! A minimal `/metrics` endpoint for applications without an HTTP server
//! (feature `http-server`). One request per connection, HTTP/1.0 style.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest pause after failed accepts (it doubles from 10 ms).
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `registry` as OpenMetrics text on `GET /metrics` at `addr` until
/// the returned future is dropped. Returns only if binding fails.
///
/// A client that has not sent its request head within [`READ_TIMEOUT`] is
/// disconnected. When accepting fails (for example when the process is out
/// of file descriptors) it pauses before the next attempt, 10 ms doubling up
/// to 1 s, instead of spinning on the error.
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let mut registry = prometheus_client::registry::Registry::default();
/// let metrics = nats_delivery_metrics::ClientMetrics::new("billing", &mut registry);
/// # let _ = metrics;
/// let registry = std::sync::Arc::new(registry);
/// tokio::spawn(nats_delivery_metrics::serve(registry, "127.0.0.1:9899".parse().unwrap()));
/// # Ok(()) }
/// ```
pub async fn serve(registry: Arc<Registry>, addr: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let mut backoff = Duration::ZERO;
    loop {
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                stream
            }
            Err(_) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(10), MAX_ACCEPT_BACKOFF);
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let mut request = vec![0u8; 4096];
            let mut read = 0;
            // Read until the end of the request head (or the buffer is full),
            // for at most READ_TIMEOUT: a silent client does not hold a task.
            let head = async {
                while read < request.len() {
                    match stream.read(&mut request[read..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => read += n,
                    }
                    if request[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            };
            if tokio::time::timeout(READ_TIMEOUT, head).await.is_err() {
                return;
            }
            let head = String::from_utf8_lossy(&request[..read]);
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let response = if head.starts_with("GET ") && path == "/metrics" {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, &registry) {
                    Ok(()) => format!(
                        "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    ),
                    Err(_) => "HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_string(),
                }
            } else {
                "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string()
            };
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
