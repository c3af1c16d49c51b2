//! The YAML of the web configuration file, key by key as exporter-toolkit
//! defines it. Unknown keys are refused (a typo would otherwise turn a
//! setting off without a word), and so is every value this exporter cannot
//! give the meaning it has in node_exporter.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The whole file.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub(crate) tls_server_config: Option<TlsFile>,
    #[serde(default)]
    pub(crate) http_server_config: HttpFile,
    #[serde(default)]
    pub(crate) basic_auth_users: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) rate_limit: Option<RateLimitFile>,
}

/// `tls_server_config`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsFile {
    pub(crate) cert: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) client_ca: Option<String>,
    pub(crate) cert_file: Option<PathBuf>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) client_auth_type: Option<String>,
    pub(crate) client_ca_file: Option<PathBuf>,
    pub(crate) client_allowed_sans: Option<Vec<String>>,
    pub(crate) min_version: Option<String>,
    pub(crate) max_version: Option<String>,
    #[serde(default)]
    pub(crate) cipher_suites: Vec<String>,
    #[serde(default)]
    pub(crate) curve_preferences: Vec<String>,
    pub(crate) prefer_server_cipher_suites: Option<bool>,
}

/// `http_server_config`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpFile {
    pub(crate) http2: Option<bool>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
}

/// `rate_limit`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RateLimitFile {
    pub(crate) interval: serde_norway::Value,
    pub(crate) burst: u32,
}

/// Parses the file's text.
pub(super) fn parse(text: &str) -> Result<File, String> {
    // An empty file is a valid configuration that turns nothing on.
    if text.trim().is_empty() {
        return Ok(File::default());
    }
    serde_norway::from_str(text).map_err(|e| e.to_string())
}

/// A TLS version of the format, in the order of their age.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

/// Reads `min_version` or `max_version` (`key`) with exporter-toolkit's names.
pub(super) fn tls_version(key: &str, text: &str) -> Result<TlsVersion, String> {
    match text {
        "TLS10" => Ok(TlsVersion::Tls10),
        "TLS11" => Ok(TlsVersion::Tls11),
        "TLS12" => Ok(TlsVersion::Tls12),
        "TLS13" => Ok(TlsVersion::Tls13),
        other => Err(format!(
            "tls_server_config.{key}: unknown TLS version '{other}' (TLS10, TLS11, TLS12 or TLS13)"
        )),
    }
}

/// The headers exporter-toolkit lets a file add, with the only values it
/// accepts where the header's values are an enumeration.
const EXTRA_HEADERS: [(&str, &[&str]); 5] = [
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// The response headers to add: the allowed ones with a non-blank value.
pub(super) fn headers(headers: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (name, value) in headers {
        let Some((_, allowed)) = EXTRA_HEADERS.iter().find(|(n, _)| n == name) else {
            let names: Vec<&str> = EXTRA_HEADERS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "http_server_config.headers: header '{name}' cannot be set (allowed: {})",
                names.join(", ")
            ));
        };
        if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
            return Err(format!(
                "http_server_config.headers: {name} must be one of {}, not '{value}'",
                allowed.join(", ")
            ));
        }
        if value.contains(['\r', '\n']) || !value.is_ascii() {
            return Err(format!(
                "http_server_config.headers: the value of {name} must be one line of ASCII"
            ));
        }
        // "Unset if blank", as the format says.
        if !value.trim().is_empty() {
            out.push((name.clone(), value.clone()));
        }
    }
    Ok(out)
}

/// `rate_limit.interval` as Go writes durations (`500ms`, `1s`, `2m`) or
/// 0; `None` when 0, which turns the limit off.
pub(super) fn rate_interval(value: &serde_norway::Value) -> Result<Option<Duration>, String> {
    let text = match value {
        serde_norway::Value::Number(n) if n.as_u64() == Some(0) => return Ok(None),
        serde_norway::Value::String(s) => s.trim(),
        _ => return Err("rate_limit.interval: write a duration such as 100ms or 1s".to_string()),
    };
    if text.trim_end_matches(|c: char| c.is_ascii_alphabetic()) == "0" {
        return Ok(None);
    }
    crate::flags::duration::parse_duration(text)
        .map(Some)
        .map_err(|e| format!("rate_limit.interval: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named() {
        let e = parse("tls_server_config:\n  cert_fle: a.pem\n")
            .err()
            .unwrap();
        assert!(e.contains("cert_fle"), "{e}");
        let e = parse("basic_auth_user:\n  a: b\n").err().unwrap();
        assert!(e.contains("basic_auth_user"), "{e}");
        let e = parse("http_server_config:\n  header:\n    X-Frame-Options: deny\n")
            .err()
            .unwrap();
        assert!(e.contains("header"), "{e}");
    }

    #[test]
    fn headers_follow_exporter_toolkit() {
        let ok = BTreeMap::from([
            ("X-Frame-Options".to_string(), "deny".to_string()),
            ("Content-Security-Policy".to_string(), "".to_string()),
        ]);
        assert_eq!(
            headers(&ok).unwrap(),
            vec![("X-Frame-Options".to_string(), "deny".to_string())]
        );
        let bad = BTreeMap::from([("X-Frame-Options".to_string(), "allow".to_string())]);
        assert!(headers(&bad).unwrap_err().contains("X-Frame-Options"));
        let reserved = BTreeMap::from([("Server".to_string(), "x".to_string())]);
        assert!(headers(&reserved).unwrap_err().contains("'Server'"));
    }

    #[test]
    fn rate_intervals() {
        let s = |t: &str| serde_norway::Value::String(t.to_string());
        assert_eq!(rate_interval(&s("0s")).unwrap(), None);
        assert_eq!(
            rate_interval(&s("250ms")).unwrap(),
            Some(Duration::from_millis(250))
        );
        assert!(rate_interval(&s("soon")).is_err());
    }
}
