//! In-process monitoring endpoints that misbehave on purpose, counting the
//! requests they get.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the endpoint answers to a request for `path`.
#[derive(Clone, Debug)]
pub enum Reply {
    /// `status` with `body` and an honest Content-Length.
    Fixed(&'static str, String),
    /// A small body under a Content-Length header of `announced` bytes.
    LyingLength(u64),
    /// A JSON body of `n` bytes (spaces after `{}`), honestly announced.
    Sized(u64),
    /// A chunked body that never ends.
    Endless,
    /// A chunked body starting with `prefix`, then spaces, never ending.
    EndlessAfter(&'static str),
    /// `json` with `n` spaces after its first `at` bytes, honestly
    /// announced: a large reply whose parsed form is small.
    SpacedJson(String, usize, u64),
    /// A chunked body starting with the first text, then the second
    /// again and again, never ending.
    Repeat(String, &'static str),
    /// A chunked body trickling one byte every 100 ms, forever.
    Trickle,
    /// A 302 to `location`.
    Redirect(String),
    /// Reads the request and never answers.
    Hang,
    /// `200 OK` with the body the future gives, once it gives it: a reply
    /// held back until something else happened.
    After(Later),
}

/// A body that comes later ([`Reply::After`]), served once.
#[derive(Clone)]
pub struct Later(Arc<std::sync::Mutex<Option<LaterBody>>>);

type LaterBody = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

impl Later {
    /// The body `body` gives.
    pub fn new(body: impl std::future::Future<Output = String> + Send + 'static) -> Later {
        Later(Arc::new(std::sync::Mutex::new(Some(Box::pin(body)))))
    }

    async fn body(self) -> String {
        let body = self.0.lock().unwrap().take();
        body.expect("a body held back is served once").await
    }
}

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Later")
    }
}

/// A running fake endpoint.
pub struct FakeEndpoint {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// `127.0.0.1:PORT`
    pub authority: String,
    requests: Arc<AtomicUsize>,
}

impl FakeEndpoint {
    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Serves `reply(path)` to every request.
pub async fn start(reply: impl Fn(&str) -> Reply + Send + Sync + 'static) -> FakeEndpoint {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let reply = Arc::new(reply);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let reply = reply.clone();
            let counted = counted.clone();
            tokio::spawn(async move {
                let _ = serve(s, &*reply, &counted).await;
            });
        }
    });
    FakeEndpoint {
        url: format!("http://{addr}"),
        authority: addr.to_string(),
        requests,
    }
}

async fn serve(
    mut s: TcpStream,
    reply: &(dyn Fn(&str) -> Reply + Send + Sync),
    counted: &AtomicUsize,
) -> std::io::Result<()> {
    let Some(path) = request_path(&mut s).await? else {
        return Ok(());
    };
    counted.fetch_add(1, Ordering::SeqCst);
    match reply(&path) {
        Reply::Fixed(status, body) => fixed(&mut s, status, &body).await?,
        Reply::After(later) => fixed(&mut s, "200 OK", &later.body().await).await?,
        Reply::LyingLength(announced) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {announced}\r\n\r\n{{}}"
            );
            s.write_all(head.as_bytes()).await?;
            std::future::pending::<()>().await;
        }
        Reply::Sized(n) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n\r\n{{}}"
            );
            s.write_all(head.as_bytes()).await?;
            spaces(&mut s, n.saturating_sub(2)).await?;
        }
        Reply::Endless => chunks_forever(&mut s, "", " ").await?,
        Reply::EndlessAfter(prefix) => chunks_forever(&mut s, prefix, " ").await?,
        Reply::Repeat(prefix, unit) => chunks_forever(&mut s, &prefix, unit).await?,
        Reply::SpacedJson(json, at, n) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                json.len() as u64 + n
            );
            s.write_all(head.as_bytes()).await?;
            s.write_all(&json.as_bytes()[..at]).await?;
            spaces(&mut s, n).await?;
            s.write_all(&json.as_bytes()[at..]).await?;
        }
        Reply::Trickle => {
            s.write_all(CHUNKED_HEAD).await?;
            s.write_all(b"1\r\n{\r\n").await?;
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                s.write_all(b"1\r\n \r\n").await?;
            }
        }
        Reply::Redirect(location) => {
            let head = format!(
                "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            s.write_all(head.as_bytes()).await?;
        }
        Reply::Hang => std::future::pending::<()>().await,
    }
    s.shutdown().await
}

/// `status` with `body` and an honest Content-Length.
async fn fixed(s: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await
}

/// Reads a request's head; its path, or None when the client left first.
async fn request_path(s: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    Ok(Some(
        text.split_whitespace().nth(1).unwrap_or("/").to_string(),
    ))
}

const CHUNKED_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

/// `n` spaces, 64 KiB at a time.
async fn spaces(s: &mut TcpStream, n: u64) -> std::io::Result<()> {
    let block = vec![b' '; 1 << 16];
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        s.write_all(&block[..k]).await?;
        left -= k as u64;
    }
    Ok(())
}

/// A chunked body that never ends: `prefix` (when not empty, as an empty
/// chunk would end the body), then `unit` repeated, 64 KiB a chunk, until
/// the client goes.
async fn chunks_forever(s: &mut TcpStream, prefix: &str, unit: &str) -> std::io::Result<()> {
    s.write_all(CHUNKED_HEAD).await?;
    if !prefix.is_empty() {
        s.write_all(format!("{:x}\r\n{prefix}\r\n", prefix.len()).as_bytes())
            .await?;
    }
    let units = unit.repeat((1 << 16) / unit.len().max(1) + 1);
    let chunk = format!("{:x}\r\n{units}\r\n", units.len());
    loop {
        s.write_all(chunk.as_bytes()).await?;
    }
}

/// A loopback address that refuses every connection for as long as this is
/// held: its socket is bound but never listens. A port merely released
/// (bound, then dropped) can be handed to the next `bind` on port 0 by any
/// test running beside, which then answers in its place.
pub struct ClosedPort {
    _reserved: tokio::net::TcpSocket,
    /// The address that refuses.
    pub addr: std::net::SocketAddr,
}

impl ClosedPort {
    /// Reserves a loopback port that refuses connections.
    pub fn new() -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        ClosedPort {
            _reserved: socket,
            addr,
        }
    }

    /// `http://` and the address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
