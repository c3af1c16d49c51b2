//! The exporter binary with a web configuration file, and a TLS client that
//! shows what the server presented: shared by the web configuration tests.
//! No NATS server: these tests ask `/healthz`, which polls nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nats_test_server::wait::{Later, Wait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The running exporter, killed when dropped.
pub struct Exporter {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (`HUP`, `TERM`) to it.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal}");
    }
}

/// The binary with `web.yml` (written into `dir` from `web_config`),
/// polling nothing reachable; its log goes to `dir/exporter.log`.
pub fn start(dir: &Path, web_config: &str) -> Exporter {
    let file = dir.join("web.yml");
    std::fs::write(&file, web_config).unwrap();
    let port = nats_test_server::free_port();
    let log = dir.join("exporter.log");
    let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", "http://127.0.0.1:9", "--sources", "varz"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--web.config.file", file.to_str().unwrap()])
        .env("NATS_DELIVERY_LOG", "info")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let exporter = Exporter { child, port, log };
    Wait::secs("the exporter to listen", 20).until_blocking(|| {
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|_| Later(|| exporter.log()))
    });
    exporter
}

/// Runs the binary with `web_config` until it exits: its status and log.
pub fn refused(dir: &Path, web_config: &str) -> (Option<i32>, String) {
    let file = dir.join("refused.yml");
    std::fs::write(&file, web_config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(["--monitor-url", "http://127.0.0.1:9"])
        .args([
            "--listen",
            &format!("127.0.0.1:{}", nats_test_server::free_port()),
        ])
        .args(["--web.config.file", file.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A rustls client trusting `dir/ca.pem`, speaking only `versions`,
/// offering ALPN `alpn`, with the client certificate `<name>.pem` if given.
pub fn client(
    dir: &Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&str],
    cert: Option<&str>,
) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match cert {
        Some(name) => {
            let certs = CertificateDer::pem_file_iter(dir.join(format!("{name}.pem")))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}.key"))).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What one HTTPS request saw: the server's certificate and the answer's
/// text (status line, headers, body).
pub struct Seen {
    pub server_cert: Vec<u8>,
    pub answer: String,
}

/// `GET path` over a new TLS connection, HTTP/1.1; an error when the
/// handshake or the request fails.
pub async fn get(
    connector: &tokio_rustls::TlsConnector,
    port: u16,
    path: &str,
) -> std::io::Result<Seen> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::other("handshake timed out"))??;
    let (_, session) = tls.get_ref();
    let server_cert = session.peer_certificates().unwrap()[0].to_vec();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    // A connection refused after the handshake (a client certificate the
    // server does not accept, under TLS 1.3) fails here, with nothing read.
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut answer))
        .await
        .map_err(|_| std::io::Error::other("answer timed out"))?;
    if answer.is_empty() {
        return Err(read.err().unwrap_or(std::io::Error::other("no answer")));
    }
    Ok(Seen {
        server_cert,
        answer: String::from_utf8_lossy(&answer).into_owned(),
    })
}

/// The application protocol a TLS handshake agreed on.
pub async fn alpn(connector: &tokio_rustls::TlsConnector, port: u16) -> Option<Vec<u8>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

/// The TLS part of a web configuration with the certificates of
/// `nats_test_server::tls::make_certs`.
pub const TLS: &str = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";
