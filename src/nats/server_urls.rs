//! `--nats-servers` values: checked at start, and stripped of credentials
//! before the client library sees them, since it prints server addresses
//! (user and password included) in its own log lines.

use url::Url;

use super::{Auth, ConnectionError, Secret};
use crate::redact::redacted_text;

/// Schemes the NATS client connects with.
const SCHEMES: [&str; 4] = ["nats", "tls", "ws", "wss"];

/// Accepts `[scheme://][user[:password]@]host[:port]`, the forms the NATS
/// client understands; anything else is refused at start.
pub(crate) fn parse_server(text: &str) -> Result<String, String> {
    let text = text.trim();
    let url =
        as_url(text).map_err(|e| format!("'{}' is not a NATS URL: {e}", redacted_text(text)))?;
    if !SCHEMES.contains(&url.scheme()) {
        return Err(format!(
            "'{}': the scheme must be nats, tls, ws or wss",
            redacted_text(text)
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("'{}' has no host", redacted_text(text)));
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "'{}': give scheme, host and port only",
            redacted_text(text)
        ));
    }
    Ok(text.to_string())
}

fn as_url(text: &str) -> Result<Url, url::ParseError> {
    if text.contains("://") {
        Url::parse(text)
    } else {
        Url::parse(&format!("nats://{text}"))
    }
}

/// The servers without credentials, and the credentials they carried as
/// [`Auth`] (`user:password@` or a lone `token@`). Servers that carry
/// different credentials are refused: one connection logs in one way.
pub(super) fn without_credentials(
    servers: &[String],
) -> Result<(Vec<String>, Auth), ConnectionError> {
    let mut plain = Vec::with_capacity(servers.len());
    let mut found: Option<Auth> = None;
    for text in servers {
        let Ok(mut url) = as_url(text) else {
            plain.push(text.clone());
            continue;
        };
        let auth = match (url.username(), url.password()) {
            ("", None) => None,
            (user, Some(pw)) => Some(Auth::UserPassword {
                user: decode(user),
                password: Secret::new(decode(pw)),
            }),
            (token, None) => Some(Auth::Token(Secret::new(decode(token)))),
        };
        if let Some(auth) = auth {
            if found.as_ref().is_some_and(|f| *f != auth) {
                return Err(ConnectionError::Config(
                    "--nats-servers carry different credentials; give them once with the credential flags".into(),
                ));
            }
            found = Some(auth);
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        plain.push(url.to_string());
    }
    Ok((plain, found.unwrap_or_default()))
}

fn decode(text: &str) -> String {
    // Form decoding would turn a literal `+` into a space.
    url::form_urlencoded::parse(format!("x={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_and_strips_servers() {
        assert!(parse_server("not a url").is_err());
        assert!(parse_server("http://h:4222").is_err());
        assert!(parse_server("nats://h:4222/path").is_err());
        assert_eq!(parse_server("h:4222").unwrap(), "h:4222");
        assert_eq!(
            parse_server("tls://u:p@h:4222").unwrap(),
            "tls://u:p@h:4222"
        );
        let err = parse_server("nats://u:s3cret@h:4222/x").unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");

        let (plain, auth) =
            without_credentials(&["nats://u:p%40w@a:4222".into(), "b:4223".into()]).unwrap();
        assert_eq!(plain, ["nats://a:4222", "nats://b:4223"]);
        assert_eq!(
            auth,
            Auth::UserPassword {
                user: "u".into(),
                password: Secret::new("p@w")
            }
        );
        let (_, auth) = without_credentials(&["nats://tok@a:4222".into()]).unwrap();
        assert_eq!(auth, Auth::Token(Secret::new("tok")));
        assert!(without_credentials(&["nats://u:a@h:1".into(), "nats://u:b@h:2".into()]).is_err());
    }
}
