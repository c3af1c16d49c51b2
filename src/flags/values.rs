//! Value checks for flags, run by the flag parser at start so that a wrong
//! value stops the exporter with one line naming the flag, instead of being
//! retried forever at run time.

use std::path::PathBuf;

/// A stream or consumer name the NATS server accepts: not empty, at most 255
/// bytes, no whitespace, and none of `.`, `*`, `>`, `/`, `\`.
pub(crate) fn nats_name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("a NATS stream or consumer name cannot be empty".into());
    }
    if text.len() > 255 {
        return Err(format!("'{text}' is longer than 255 bytes"));
    }
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || ".*>/\\".contains(*c))
    {
        return Err(format!(
            "'{text}' is not a valid NATS name ({c:?} is not allowed: no spaces, '.', '*', '>', '/' or '\\')"
        ));
    }
    Ok(text.to_string())
}

/// A key-value bucket name the NATS server accepts: letters, digits, `-`
/// and `_` only.
pub(crate) fn bucket_name(text: &str) -> Result<String, String> {
    if text.is_empty()
        || !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "'{text}' is not a valid bucket name (letters, digits, '-' and '_' only)"
        ));
    }
    Ok(text.to_string())
}

/// A file that exists and can be read; its text.
fn read(text: &str) -> Result<(PathBuf, String), String> {
    let path = PathBuf::from(text);
    let content = std::fs::read(&path).map_err(|e| format!("cannot read '{text}': {e}"))?;
    Ok((path, String::from_utf8_lossy(&content).into_owned()))
}

/// A PEM file holding at least one `-----BEGIN` block.
pub(crate) fn pem_file(text: &str) -> Result<PathBuf, String> {
    let (path, content) = read(text)?;
    if !content.contains("-----BEGIN ") {
        return Err(format!("'{text}' is not a PEM file (no -----BEGIN line)"));
    }
    Ok(path)
}

/// A NATS `.creds` file: a user JWT and an NKey seed.
pub(crate) fn creds_file(text: &str) -> Result<PathBuf, String> {
    let (path, content) = read(text)?;
    if !(content.contains("BEGIN NATS USER JWT") && content.contains("BEGIN USER NKEY SEED")) {
        return Err(format!(
            "'{text}' is not a NATS .creds file (it needs a user JWT and an NKey seed)"
        ));
    }
    Ok(path)
}

/// A file holding an NKey user seed (`SU...`).
pub(crate) fn nkey_seed_file(text: &str) -> Result<PathBuf, String> {
    let (path, content) = read(text)?;
    if !content.trim().starts_with("SU") {
        return Err(format!("'{text}' does not hold an NKey user seed (SU...)"));
    }
    Ok(path)
}

/// A count of at least one (a buffer of 0 would drop everything).
pub(crate) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("'{text}' is not a whole number: {e}")),
    }
}

/// Accepts `http(s)://host[:port][/base]`, the base of the monitoring endpoints.
pub(crate) fn monitor_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text.trim()).map_err(|e| format!("'{text}' is not a URL: {e}"))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(format!(
            "'{text}': the monitoring URL must start with http:// or https://"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("'{text}': the monitoring URL has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "'{text}': give the base URL only, without ?query or #fragment"
        ));
    }
    Ok(url)
}

/// The path the metrics are served under: starts with `/`, and is none of
/// the exporter's other pages (`/`, `/healthz`).
pub(crate) fn telemetry_path(text: &str) -> Result<String, String> {
    if !text.starts_with('/') {
        return Err(format!("'{text}' must start with '/'"));
    }
    if text == "/" || text.trim_end_matches('/') == "/healthz" {
        return Err(format!(
            "'{text}' is taken by another page of the exporter ('/' or '/healthz')"
        ));
    }
    if text.contains(['{', '}', '*', '?', '#']) || text.contains("//") {
        return Err(format!(
            "'{text}' is not a plain path (no '{{', '}}', '*', '?', '#' or '//')"
        ));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_files_and_counts() {
        assert_eq!(nats_name("ADVISORIES_1-x").unwrap(), "ADVISORIES_1-x");
        for bad in ["", "bad name", "with.dots", "a*", "a>", "a/b"] {
            assert!(nats_name(bad).is_err(), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        assert!(pem_file(&file("a.pem", "-----BEGIN CERTIFICATE-----\n")).is_ok());
        assert!(pem_file(&file("b.pem", "nothing")).is_err());
        assert!(pem_file("/no/such/file").is_err());
        let creds = "-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n-----BEGIN USER NKEY SEED-----\nSUA\n";
        assert!(creds_file(&file("u.creds", creds)).is_ok());
        assert!(creds_file(&file("v.creds", "SUA")).is_err());
        assert!(nkey_seed_file(&file("seed", "SUAXYZ\n")).is_ok());
        assert!(nkey_seed_file(&file("notseed", "hello")).is_err());
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").is_err() && at_least_one("x").is_err());
        assert_eq!(telemetry_path("/metrics").unwrap(), "/metrics");
        assert_eq!(telemetry_path("/nats/metrics").unwrap(), "/nats/metrics");
        for bad in ["metrics", "/", "/healthz", "/a/{x}", "/a//b", "/m?x"] {
            assert!(telemetry_path(bad).is_err(), "{bad:?}");
        }
    }
}
