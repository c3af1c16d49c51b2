//! Keeps credentials out of everything the exporter prints or serves.
//!
//! An operator may write a password into any URL (`http://user:PW@host:8222`,
//! `nats://user:PW@host:4222`). Log lines, errors, labels and pages show URLs
//! only through [`redacted`], which replaces the user and password.

use url::Url;

/// What stands in for a user name or password.
pub(crate) const MASK: &str = "xxxxx";

/// `url` with any user name and password replaced by `MASK`.
pub fn redacted(url: &Url) -> String {
    if url.username().is_empty() && url.password().is_none() {
        return url.to_string();
    }
    let mut shown = url.clone();
    // Only URLs that cannot have credentials refuse these; they had none.
    let _ = shown.set_username(MASK);
    if url.password().is_some() {
        let _ = shown.set_password(Some(MASK));
    }
    shown.to_string()
}

/// [`redacted`] for text that may or may not parse as a URL (a NATS server
/// flag such as `u:pw@host:4222` without a scheme): anything before an `@`
/// in the authority is masked.
pub(crate) fn redacted_text(text: &str) -> String {
    if let Ok(url) = Url::parse(text) {
        if url.has_host() {
            return redacted(&url);
        }
    }
    let (scheme, rest) = match text.find("://") {
        Some(i) => text.split_at(i + 3),
        None => ("", text),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}{MASK}{}", &rest[at..]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_user_and_password_only() {
        let u = Url::parse("http://admin:s3cret@h:8222/base").unwrap();
        assert_eq!(redacted(&u), "http://xxxxx:xxxxx@h:8222/base");
        let u = Url::parse("nats://tok3n@h:4222").unwrap();
        assert_eq!(redacted(&u), "nats://xxxxx@h:4222");
        let u = Url::parse("http://h:8222/").unwrap();
        assert_eq!(redacted(&u), "http://h:8222/");
        assert_eq!(redacted_text("u:pw@h:4222"), "xxxxx@h:4222");
        assert_eq!(
            redacted_text("nats://u:pw@h:4222"),
            "nats://xxxxx:xxxxx@h:4222"
        );
        assert_eq!(redacted_text("h:4222"), "h:4222");
    }
}
