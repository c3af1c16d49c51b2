//! The NATS connection flags: servers, credentials, TLS, the accounts to
//! listen in.

use std::path::PathBuf;

use super::credentials::{AccountSpec, Auth, NoEchoParser, Secret};
use super::server_urls::parse_server;
use super::ConnectionError;

/// NATS connection flags shared by the advisory and system-event listeners.
#[derive(clap::Args, Clone, Debug)]
pub struct NatsArgs {
    /// NATS server URLs to connect to (comma-separated); the client also learns
    /// the rest of a cluster from the server.
    #[arg(
        id = "nats_servers",
        value_name = "URL",
        long = "nats-servers",
        env = "NATS_DELIVERY_NATS_SERVERS",
        value_delimiter = ',',
        default_value = "nats://127.0.0.1:4222",
        value_parser = parse_server
    )]
    pub(crate) servers: Vec<String>,

    /// Client connection name, shown by the server in /connz.
    #[arg(
        id = "nats_client_name",
        value_name = "NAME",
        long = "nats-client-name",
        env = "NATS_DELIVERY_NATS_CLIENT_NAME",
        default_value = "nats-delivery-exporter"
    )]
    pub(crate) client_name: String,

    /// User name (with --nats-password).
    #[arg(
        id = "nats_user",
        value_name = "USER",
        long = "nats-user",
        env = "NATS_DELIVERY_NATS_USER"
    )]
    pub(crate) user: Option<String>,

    /// Password for --nats-user (prefer the environment variable: command lines are visible to other users).
    #[arg(
        id = "nats_password",
        value_name = "PASSWORD",
        long = "nats-password",
        env = "NATS_DELIVERY_NATS_PASSWORD",
        hide_env_values = true
    )]
    pub(crate) password: Option<Secret>,

    /// Authentication token (prefer the environment variable).
    #[arg(
        id = "nats_token",
        value_name = "TOKEN",
        long = "nats-token",
        env = "NATS_DELIVERY_NATS_TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<Secret>,

    /// File holding an NKey user seed.
    #[arg(
        id = "nats_nkey_seed_file",
        value_name = "FILE",
        long = "nats-nkey-seed-file",
        env = "NATS_DELIVERY_NATS_NKEY_SEED_FILE",
        value_parser = crate::flags::values::nkey_seed_file
    )]
    pub(crate) nkey_seed_file: Option<PathBuf>,

    /// NATS credentials (.creds) file: user JWT and NKey seed.
    #[arg(
        id = "nats_creds_file",
        value_name = "FILE",
        long = "nats-creds-file",
        env = "NATS_DELIVERY_NATS_CREDS_FILE",
        value_parser = crate::flags::values::creds_file
    )]
    pub(crate) creds_file: Option<PathBuf>,

    /// PEM file with the CA certificate(s) that signed the server's certificate; enables TLS.
    #[arg(
        id = "nats_tls_ca",
        value_name = "FILE",
        long = "nats-tls-ca",
        env = "NATS_DELIVERY_NATS_TLS_CA",
        value_parser = crate::flags::values::pem_file
    )]
    pub(crate) tls_ca: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --nats-tls-key).
    #[arg(
        id = "nats_tls_cert",
        value_name = "FILE",
        long = "nats-tls-cert",
        env = "NATS_DELIVERY_NATS_TLS_CERT",
        requires = "nats_tls_key",
        value_parser = crate::flags::values::pem_file
    )]
    pub(crate) tls_cert: Option<PathBuf>,

    /// PEM private key of --nats-tls-cert.
    #[arg(
        id = "nats_tls_key",
        value_name = "FILE",
        long = "nats-tls-key",
        env = "NATS_DELIVERY_NATS_TLS_KEY",
        requires = "nats_tls_cert",
        value_parser = crate::flags::values::pem_file
    )]
    pub(crate) tls_key: Option<PathBuf>,

    /// Accounts to listen in, one connection each: NAME (uses the credential flags above) or
    /// NAME=creds:FILE | NAME=nkey:FILE | NAME=user:USER:PASSWORD | NAME=token:TOKEN.
    /// Repeat the flag or separate with commas. Empty: one connection with the credential
    /// flags above, labelled with --nats-account-name.
    #[arg(
        id = "nats_accounts",
        value_name = "ACCOUNT[=CREDENTIALS]",
        long = "nats-account",
        env = "NATS_DELIVERY_NATS_ACCOUNTS",
        value_delimiter = ',',
        value_parser = NoEchoParser::<AccountSpec>::new(),
        hide_env_values = true
    )]
    pub(crate) accounts: Vec<AccountSpec>,

    /// The `account` label of the single connection used when --nats-account is not given
    /// (`$G` is the server's default account when it has no accounts configured).
    #[arg(
        id = "nats_account_name",
        value_name = "NAME",
        long = "nats-account-name",
        env = "NATS_DELIVERY_NATS_ACCOUNT_NAME",
        default_value = "$G"
    )]
    pub(crate) account_name: String,
}

impl NatsArgs {
    /// Builds the connection settings from flag-style arguments (program name
    /// not included); for tests and embedding. Environment variables apply.
    pub fn from_flags<I, T>(flags: I) -> Result<NatsArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        crate::flags::args::parse_args(flags)
    }

    /// The credentials given by the top-level flags; an error when more than
    /// one method is given, since the server would accept only one.
    pub fn top_level_auth(&self) -> Result<Auth, ConnectionError> {
        let mut found = Vec::new();
        if let Some(user) = &self.user {
            found.push(Auth::UserPassword {
                user: user.clone(),
                password: self.password.clone().unwrap_or(Secret::new(String::new())),
            });
        } else if self.password.is_some() {
            return Err(ConnectionError::Config(
                "--nats-password needs --nats-user".into(),
            ));
        }
        if let Some(t) = &self.token {
            found.push(Auth::Token(t.clone()));
        }
        if let Some(p) = &self.nkey_seed_file {
            found.push(Auth::NkeySeedFile(p.clone()));
        }
        if let Some(p) = &self.creds_file {
            found.push(Auth::CredsFile(p.clone()));
        }
        match found.len() {
            0 => Ok(Auth::None),
            1 => Ok(found.remove(0)),
            _ => Err(ConnectionError::Config(
                "give only one of --nats-user/--nats-password, --nats-token, --nats-nkey-seed-file, --nats-creds-file".into(),
            )),
        }
    }

    /// Every account to listen in, with the credentials to use for it.
    pub fn resolved_accounts(&self) -> Result<Vec<(String, Auth)>, ConnectionError> {
        let top = self.top_level_auth()?;
        if self.accounts.is_empty() {
            return Ok(vec![(self.account_name.clone(), top)]);
        }
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for a in &self.accounts {
            if !seen.insert(a.name.clone()) {
                return Err(ConnectionError::Config(format!(
                    "account {:?} is listed twice",
                    a.name
                )));
            }
            out.push((
                a.name.clone(),
                a.auth.clone().unwrap_or_else(|| top.clone()),
            ));
        }
        Ok(out)
    }
}
