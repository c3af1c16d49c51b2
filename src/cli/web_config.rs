//! `--web.config.file`: TLS and basic authentication for the exporter's own
//! HTTP server, in the web configuration format Prometheus exporters share
//! (node_exporter's), so that an operator's existing file works unchanged:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.pem
//!   key_file: server.key
//!   client_ca_file: ca.pem             # optional
//!   client_auth_type: RequireAndVerifyClientCert
//! basic_auth_users:
//!   prometheus: $2y$10$...             # bcrypt hash
//! ```
//!
//! Relative paths are read from the file's own directory. Other settings
//! of the format (cipher suites, HTTP headers) are accepted and ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The loaded web configuration.
#[derive(Clone, Debug, Default)]
pub struct WebConfig {
    /// TLS for the server, when `tls_server_config` is given.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// User name to bcrypt hash; empty means no authentication.
    pub users: Arc<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    client_auth_type: Option<String>,
}

/// Reads and checks the file named by `--web.config.file`; for the flag parser.
pub fn parse_web_config(text: &str) -> Result<WebConfig, String> {
    load(Path::new(text)).map_err(|e| format!("'{text}': {e}"))
}

/// Reads and checks a web configuration file: certificates and keys must
/// load and every password must be a bcrypt hash.
pub fn load(path: &Path) -> Result<WebConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let file: File =
        serde_norway::from_str(&text).map_err(|e| format!("not a web configuration: {e}"))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for (user, hash) in &file.basic_auth_users {
        if !(hash.starts_with("$2") && hash.len() == 60) {
            return Err(format!(
                "the password of user '{user}' is not a bcrypt hash"
            ));
        }
    }
    let tls = match file.tls_server_config {
        Some(t) => Some(Arc::new(server_config(&t, dir)?)),
        None => None,
    };
    Ok(WebConfig {
        tls,
        users: Arc::new(file.basic_auth_users),
    })
}

fn server_config(t: &TlsFile, dir: &Path) -> Result<rustls::ServerConfig, String> {
    let at = |p: &Path| dir.join(p);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(at(&t.cert_file))
        .and_then(|i| i.collect())
        .map_err(|e| format!("cert_file {}: {e}", t.cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "cert_file {}: no certificate",
            t.cert_file.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(at(&t.key_file))
        .map_err(|e| format!("key_file {}: {e}", t.key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let kind = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let roots = match &t.client_ca_file {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(at(ca))
                .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?
            {
                let cert = cert.map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    let verifier = |roots: Arc<rustls::RootCertStore>, optional: bool| {
        let b =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
        let b = if optional {
            b.allow_unauthenticated()
        } else {
            b
        };
        b.build().map_err(|e| format!("client_ca_file: {e}"))
    };
    let builder = match (kind, roots) {
        ("NoClientCert" | "", _) | ("RequestClientCert", None) => builder.with_no_client_auth(),
        ("RequestClientCert" | "VerifyClientCertIfGiven", Some(roots)) => {
            builder.with_client_cert_verifier(verifier(roots, true)?)
        }
        // Certificates are always verified against client_ca_file: a
        // certificate nobody checks proves nothing.
        ("RequireAnyClientCert" | "RequireAndVerifyClientCert", Some(roots)) => {
            builder.with_client_cert_verifier(verifier(roots, false)?)
        }
        (
            "VerifyClientCertIfGiven" | "RequireAnyClientCert" | "RequireAndVerifyClientCert",
            None,
        ) => return Err(format!("client_auth_type {kind} needs client_ca_file")),
        (other, _) => return Err(format!("unknown client_auth_type '{other}'")),
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file and key_file: {e}"))
}

/// Whether an `Authorization` header value carries a configured user and
/// the password matching its hash. Slow on purpose (bcrypt): call it off
/// the async workers.
pub fn authorized(users: &BTreeMap<String, String>, header: Option<&str>) -> bool {
    use base64::Engine;
    let Some(encoded) = header.and_then(|h| h.strip_prefix("Basic ")) else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let Ok(text) = String::from_utf8(decoded) else {
        return false;
    };
    let Some((user, password)) = text.split_once(':') else {
        return false;
    };
    users
        .get(user)
        .is_some_and(|hash| bcrypt::verify(password, hash).unwrap_or(false))
}
