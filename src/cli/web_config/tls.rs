//! `tls_server_config` as a rustls server configuration: the certificate
//! and key (files or inline), client certificates, TLS versions, TLS 1.2
//! cipher suites, key exchange groups, and HTTP/2 through ALPN.
//!
//! rustls offers TLS 1.2 and 1.3 only, AEAD suites with ECDHE only, and the
//! groups X25519, P-256 and P-384: a setting that needs anything else is
//! refused rather than quietly served with something weaker or stronger.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::crypto::ring::{cipher_suite as suites, kx_group};
use tokio_rustls::rustls::crypto::SupportedKxGroup;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::SupportedCipherSuite;

use super::client_sans::AllowedSans;
use super::file::{tls_version, TlsFile, TlsVersion};

/// The TLS 1.2 suites rustls offers, by Go's names.
const TLS12_SUITES: [(&str, SupportedCipherSuite); 6] = [
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        suites::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        suites::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        suites::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// TLS 1.3 suites: Go accepts their names and always enables all three, as
/// rustls does here.
const TLS13_SUITE_NAMES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Suites Go offers that rustls does not (CBC modes, RSA key exchange).
const GO_ONLY_SUITES: [&str; 10] = [
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// Builds the server configuration; relative paths are read from `dir`.
pub(super) fn server_config(
    t: &TlsFile,
    dir: &Path,
    http2: bool,
) -> Result<rustls::ServerConfig, String> {
    let (certs, key) = cert_and_key(t, dir)?;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = cipher_suites(&t.cipher_suites)?;
    if !t.curve_preferences.is_empty() {
        provider.kx_groups = kx_groups(&t.curve_preferences)?;
    }
    let provider = Arc::new(provider);
    let versions = versions(t)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let builder = match client_verifier(t, dir, provider)? {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls_server_config: certificate and key: {e}"))?;
    // Go's default is the server's order too.
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(config)
}

/// The paths of the files the TLS settings name, to notice their changes.
pub(super) fn named_files(t: &TlsFile, dir: &Path) -> Vec<PathBuf> {
    [&t.cert_file, &t.key_file, &t.client_ca_file]
        .into_iter()
        .flatten()
        .map(|p| dir.join(p))
        .collect()
}

/// A PEM text from a `<name>_file` key or from the inline `<name>` key.
fn pem(
    name: &str,
    inline: &Option<String>,
    file: &Option<PathBuf>,
    dir: &Path,
) -> Result<Option<Vec<u8>>, String> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(format!(
            "tls_server_config: give {name} or {name}_file, not both"
        )),
        (Some(text), None) => Ok(Some(text.clone().into_bytes())),
        (None, Some(path)) => std::fs::read(dir.join(path))
            .map(Some)
            .map_err(|e| format!("tls_server_config.{name}_file {}: {e}", path.display())),
        (None, None) => Ok(None),
    }
}

fn cert_and_key(
    t: &TlsFile,
    dir: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let cert = pem("cert", &t.cert, &t.cert_file, dir)?
        .ok_or("tls_server_config: missing one of cert or cert_file")?;
    let key = pem("key", &t.key, &t.key_file, dir)?
        .ok_or("tls_server_config: missing one of key or key_file")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls_server_config: certificate: {e}"))?;
    if certs.is_empty() {
        return Err("tls_server_config: the certificate holds no PEM certificate".to_string());
    }
    let key =
        PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("tls_server_config: key: {e}"))?;
    Ok((certs, key))
}

/// The suites to offer: every TLS 1.3 suite, and the listed TLS 1.2 ones in
/// their order (all of rustls' when none is listed).
fn cipher_suites(names: &[String]) -> Result<Vec<SupportedCipherSuite>, String> {
    let mut chosen: Vec<SupportedCipherSuite> = rustls::crypto::ring::ALL_CIPHER_SUITES
        .iter()
        .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)))
        .copied()
        .collect();
    if names.is_empty() {
        return Ok(rustls::crypto::ring::ALL_CIPHER_SUITES.to_vec());
    }
    let offered = || {
        let names: Vec<&str> = TLS12_SUITES.iter().map(|(n, _)| *n).collect();
        names.join(", ")
    };
    for name in names {
        if let Some((_, suite)) = TLS12_SUITES.iter().find(|(n, _)| n == name) {
            chosen.push(*suite);
        } else if TLS13_SUITE_NAMES.contains(&name.as_str()) {
            continue;
        } else if GO_ONLY_SUITES.contains(&name.as_str()) {
            return Err(format!(
                "tls_server_config.cipher_suites: {name} is not offered by this exporter's TLS library (rustls offers {})",
                offered()
            ));
        } else {
            return Err(format!(
                "tls_server_config.cipher_suites: unknown cipher suite '{name}' (rustls offers {})",
                offered()
            ));
        }
    }
    Ok(chosen)
}

fn kx_groups(names: &[String]) -> Result<Vec<&'static dyn SupportedKxGroup>, String> {
    names
        .iter()
        .map(|name| match name.as_str() {
            "X25519" => Ok(kx_group::X25519),
            "CurveP256" => Ok(kx_group::SECP256R1),
            "CurveP384" => Ok(kx_group::SECP384R1),
            "CurveP521" => Err(
                "tls_server_config.curve_preferences: CurveP521 is not offered by this exporter's TLS library (rustls offers X25519, CurveP256, CurveP384)"
                    .to_string(),
            ),
            other => Err(format!(
                "tls_server_config.curve_preferences: unknown curve '{other}' (X25519, CurveP256, CurveP384)"
            )),
        })
        .collect()
}

/// The versions between `min_version` (TLS12 by default) and `max_version`
/// (TLS13). rustls has no TLS 1.0 or 1.1: as a minimum they mean "the
/// oldest available", TLS 1.2; as a maximum they cannot be served.
fn versions(t: &TlsFile) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let min = match &t.min_version {
        Some(v) => tls_version("min_version", v)?,
        None => TlsVersion::Tls12,
    };
    let max = match &t.max_version {
        Some(v) => tls_version("max_version", v)?,
        None => TlsVersion::Tls13,
    };
    if max < TlsVersion::Tls12 {
        return Err(format!(
            "tls_server_config.max_version: {} is older than any version this exporter serves (TLS12 and TLS13)",
            t.max_version.as_deref().unwrap_or_default()
        ));
    }
    if min > max {
        return Err("tls_server_config: min_version is above max_version".to_string());
    }
    let mut out = Vec::new();
    if min <= TlsVersion::Tls12 {
        out.push(&rustls::version::TLS12);
    }
    if max == TlsVersion::Tls13 {
        out.push(&rustls::version::TLS13);
    }
    Ok(out)
}

/// The verifier of client certificates that `client_auth_type`,
/// `client_ca_file`/`client_ca` and `client_allowed_sans` ask for.
fn client_verifier(
    t: &TlsFile,
    dir: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>, String> {
    let kind = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let roots = match pem("client_ca", &t.client_ca, &t.client_ca_file, dir)? {
        Some(text) => Some(roots(&text)?),
        None => None,
    };
    let optional = match (kind, &roots) {
        ("NoClientCert" | "", None) => None,
        ("NoClientCert" | "", Some(_)) => {
            return Err("tls_server_config: client CAs are configured without a client_auth_type that asks for certificates".to_string())
        }
        ("RequestClientCert", None) => None,
        ("RequestClientCert" | "VerifyClientCertIfGiven", Some(_)) => Some(true),
        // Certificates are always verified against the client CAs: a
        // certificate nobody checks proves nothing.
        ("RequireAnyClientCert" | "RequireClientCert" | "RequireAndVerifyClientCert", Some(_)) => {
            Some(false)
        }
        (
            "VerifyClientCertIfGiven"
            | "RequireAnyClientCert"
            | "RequireClientCert"
            | "RequireAndVerifyClientCert",
            None,
        ) => {
            return Err(format!(
                "tls_server_config.client_auth_type: {kind} needs client_ca_file or client_ca"
            ))
        }
        (other, _) => {
            return Err(format!(
                "tls_server_config.client_auth_type: unknown '{other}' (NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)"
            ))
        }
    };
    let sans = t.client_allowed_sans.clone().filter(|s| !s.is_empty());
    let (Some(optional), Some(roots)) = (optional, roots) else {
        if sans.is_some() {
            return Err("tls_server_config.client_allowed_sans: needs client certificates (client_auth_type and client_ca_file or client_ca)".to_string());
        }
        return Ok(None);
    };
    let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider);
    let builder = if optional {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    let verifier = builder
        .build()
        .map_err(|e| format!("tls_server_config: client CAs: {e}"))?;
    Ok(Some(match sans {
        Some(sans) => Arc::new(AllowedSans::new(verifier, sans)),
        None => verifier,
    }))
}

fn roots(pem: &[u8]) -> Result<Arc<rustls::RootCertStore>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("tls_server_config: client CAs: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("tls_server_config: client CAs: {e}"))?;
    }
    if roots.is_empty() {
        return Err("tls_server_config: client CAs: no PEM certificate".to_string());
    }
    Ok(Arc::new(roots))
}
