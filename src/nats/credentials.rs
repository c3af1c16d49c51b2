//! Credentials: how one connection logs in, parsed from flags without ever
//! printing a secret.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A password or token: printed as `<redacted>`, never as its value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret's value, to hand to the NATS client and nowhere else.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl FromStr for Secret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

/// How one connection authenticates.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Auth {
    /// No credentials (or only those in the server URL).
    #[default]
    None,
    /// User and password.
    UserPassword {
        /// User name.
        user: String,
        /// The password, never written to a log.
        password: Secret,
    },
    /// An authentication token.
    Token(Secret),
    /// A file holding an NKey seed (`SU...`).
    NkeySeedFile(PathBuf),
    /// A `.creds` file (JWT and NKey seed).
    CredsFile(PathBuf),
}

impl FromStr for Auth {
    type Err = String;
    /// Parses `creds:FILE`, `nkey:FILE`, `user:USER:PASSWORD` or `token:TOKEN`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, rest) = s.split_once(':').ok_or_else(|| {
            "expected creds:FILE, nkey:FILE, user:USER:PASSWORD or token:TOKEN".to_string()
        })?;
        match kind {
            // Files are checked now, so that a missing one stops the start
            // instead of failing every connection attempt.
            "creds" if !rest.is_empty() => crate::flags::values::creds_file(rest).map(Auth::CredsFile),
            "nkey" if !rest.is_empty() => {
                crate::flags::values::nkey_seed_file(rest).map(Auth::NkeySeedFile)
            }
            "token" if !rest.is_empty() => Ok(Auth::Token(Secret(rest.to_string()))),
            "user" => match rest.split_once(':') {
                Some((user, password)) if !user.is_empty() => Ok(Auth::UserPassword {
                    user: user.to_string(),
                    password: Secret(password.to_string()),
                }),
                _ => Err("expected user:USER:PASSWORD".to_string()),
            },
            // Never echo `rest`: it may be a secret.
            other => Err(format!(
                "unknown or empty credential kind {other:?}; expected creds:FILE, nkey:FILE, user:USER:PASSWORD or token:TOKEN"
            )),
        }
    }
}

/// One account to listen in: the name used as the `account` label, and how to
/// log in to it (`None` means: with the top-level credential flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccountSpec {
    /// Account name, used as the `account` label value.
    pub(crate) name: String,
    /// Credentials for this account, or `None` for the top-level ones.
    pub(crate) auth: Option<Auth>,
}

impl FromStr for AccountSpec {
    type Err = String;
    /// Parses `NAME` or `NAME=creds:FILE|nkey:FILE|user:USER:PASSWORD|token:TOKEN`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, auth) = match s.split_once('=') {
            Some((name, auth)) => (name, Some(auth.parse::<Auth>()?)),
            None => (s, None),
        };
        let name = name.trim();
        if name.is_empty() {
            return Err("account name is empty".to_string());
        }
        Ok(AccountSpec {
            name: name.to_string(),
            auth,
        })
    }
}

/// A clap value parser whose errors never repeat the value: credential specs
/// carry secrets, and clap's own errors quote the rejected value.
#[derive(Clone, Debug)]
pub(crate) struct NoEchoParser<T>(std::marker::PhantomData<fn() -> T>);

impl<T> NoEchoParser<T> {
    /// A parser for `T`.
    pub(crate) fn new() -> Self {
        NoEchoParser(std::marker::PhantomData)
    }
}

impl<T> Default for NoEchoParser<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> clap::builder::TypedValueParser for NoEchoParser<T>
where
    T: FromStr<Err = String> + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg.map(|a| a.to_string()).unwrap_or_default();
        let fail = |why: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for {flag}: {why}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| fail("not UTF-8".into()))?;
        text.parse().map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nats::NatsArgs;

    #[test]
    fn parses_account_specs_without_leaking_secrets() {
        let a: AccountSpec = "ORDERS=user:app:s3cret".parse().unwrap();
        assert_eq!(a.name, "ORDERS");
        let shown = format!("{a:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        let b: AccountSpec = "BILLING".parse().unwrap();
        assert_eq!(b.auth, None);
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("x.creds");
        std::fs::write(
            &creds,
            "-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n-----BEGIN USER NKEY SEED-----\nSUA\n",
        )
        .unwrap();
        let c: AccountSpec = format!("X=creds:{}", creds.display()).parse().unwrap();
        assert_eq!(c.auth, Some(Auth::CredsFile(creds.clone())));
        let err = "X=creds:/no/such.creds".parse::<AccountSpec>().unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
        let err = "X=secretkind:hunter2".parse::<AccountSpec>().unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        let err = NatsArgs::from_flags(["--nats-account", "X=usr:me:hunter2"]).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("--nats-account"), "{err}");
        assert!("=token:abc".parse::<AccountSpec>().is_err());
    }
}
