//! A plain HTTP client for loopback monitoring endpoints.

use std::io::Write;
use std::net::TcpStream;

/// A plain blocking HTTP/1.0 GET against a loopback monitoring endpoint,
/// returning the body; panics on a non-200 answer.
pub fn http_get(url: &str) -> String {
    use std::io::Read;
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").expect("send request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read response");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP response");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "GET {url}: {head}"
    );
    body.to_string()
}
