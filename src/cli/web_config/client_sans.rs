//! `client_allowed_sans`: a client certificate is accepted only when one of
//! its subject alternative names (DNS, IP, e-mail or URI) equals one of the
//! listed strings exactly, as exporter-toolkit compares them; checked after
//! the certificate chain was verified.

use std::net::IpAddr;
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// A verifier of client certificates that also requires an allowed SAN.
#[derive(Debug)]
pub(super) struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl AllowedSans {
    pub(super) fn new(inner: Arc<dyn ClientCertVerifier>, allowed: Vec<String>) -> AllowedSans {
        AllowedSans { inner, allowed }
    }
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let names = subject_alt_names(end_entity).unwrap_or_default();
        if names.iter().any(|n| self.allowed.contains(n)) {
            Ok(verified)
        } else {
            tracing::debug!(sans = ?names, "client certificate refused: no allowed SAN");
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// One DER element: its tag and contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The elements of a constructed element's contents.
fn children(mut der: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (tag, content, rest) = element(der)?;
        der = rest;
        Some((tag, content))
    })
}

/// The subjectAltName OID, 2.5.29.17, as DER contents.
const SAN_OID: [u8; 3] = [0x55, 0x1d, 0x11];

/// The DNS names, e-mail addresses, IP addresses and URIs of a certificate's
/// subjectAltName extension, written as Go writes them.
fn subject_alt_names(cert: &[u8]) -> Option<Vec<String>> {
    let (_, certificate, _) = element(cert)?;
    let (_, tbs, _) = element(certificate)?;
    // The extensions are the tbsCertificate's [3] element.
    let (_, extensions) = children(tbs).find(|(tag, _)| *tag == 0xa3)?;
    let (_, list, _) = element(extensions)?;
    for (_, extension) in children(list) {
        let mut parts = children(extension);
        let (_, oid) = parts.next()?;
        if oid != SAN_OID {
            continue;
        }
        // An optional `critical` BOOLEAN, then the OCTET STRING.
        let (_, value) = parts.find(|(tag, _)| *tag == 0x04)?;
        let (_, names, _) = element(value)?;
        return Some(children(names).filter_map(general_name).collect());
    }
    Some(Vec::new())
}

fn general_name((tag, content): (u8, &[u8])) -> Option<String> {
    let text = || String::from_utf8(content.to_vec()).ok();
    match tag {
        // rfc822Name, dNSName, uniformResourceIdentifier (IA5String).
        0x81 | 0x82 | 0x86 => text(),
        // iPAddress: 4 or 16 bytes.
        0x87 => match content.len() {
            4 => Some(IpAddr::from(<[u8; 4]>::try_from(content).ok()?).to_string()),
            16 => Some(IpAddr::from(<[u8; 16]>::try_from(content).ok()?).to_string()),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_san_extension_built_by_hand() {
        // extensions [3] { SEQUENCE { SEQUENCE { OID 2.5.29.17, OCTET STRING {
        // SEQUENCE { [2] "a.example", [7] 10.0.0.1 } } } } }
        let names = [&[0x82, 9][..], b"a.example", &[0x87, 4, 10, 0, 0, 1]].concat();
        let general = [&[0x30, names.len() as u8][..], &names].concat();
        let octets = [&[0x04, general.len() as u8][..], &general].concat();
        let ext = [
            &[0x30, (5 + octets.len()) as u8, 0x06, 3][..],
            &SAN_OID,
            &octets,
        ]
        .concat();
        let list = [&[0x30, ext.len() as u8][..], &ext].concat();
        let exts = [&[0xa3, list.len() as u8][..], &list].concat();
        let tbs = [&[0x30, (3 + exts.len()) as u8, 0x02, 1, 1][..], &exts].concat();
        let cert = [&[0x30, tbs.len() as u8][..], &tbs].concat();
        assert_eq!(
            subject_alt_names(&cert).unwrap(),
            vec!["a.example".to_string(), "10.0.0.1".to_string()]
        );
    }
}
