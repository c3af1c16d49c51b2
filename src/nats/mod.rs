//! NATS connection settings (flags and environment) and connecting with them.
//!
//! A NATS user lives in exactly one account and only sees that account's
//! advisories, so the exporter opens one connection per configured account
//! ([`NatsArgs::accounts`]); the account name given here becomes the `account`
//! label. Secrets are held in [`Secret`], whose `Debug` output is redacted, so
//! printing the parsed configuration never leaks a password or token.

use std::path::PathBuf;

use async_nats::{Client, ConnectOptions};

mod credentials;
mod failures;
pub(crate) mod retry;
mod server_urls;

pub use credentials::{AccountSpec, Auth, NoEchoParser, Secret};
pub use failures::{cause_layer, OnFailure};
pub use server_urls::parse_server;

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
    pub servers: Vec<String>,

    /// Client connection name, shown by the server in /connz.
    #[arg(
        id = "nats_client_name",
        value_name = "NAME",
        long = "nats-client-name",
        env = "NATS_DELIVERY_NATS_CLIENT_NAME",
        default_value = "nats-delivery-exporter"
    )]
    pub client_name: String,

    /// User name (with --nats-password).
    #[arg(
        id = "nats_user",
        value_name = "USER",
        long = "nats-user",
        env = "NATS_DELIVERY_NATS_USER"
    )]
    pub user: Option<String>,

    /// Password for --nats-user (prefer the environment variable: command lines are visible to other users).
    #[arg(
        id = "nats_password",
        value_name = "PASSWORD",
        long = "nats-password",
        env = "NATS_DELIVERY_NATS_PASSWORD",
        hide_env_values = true
    )]
    pub password: Option<Secret>,

    /// Authentication token (prefer the environment variable).
    #[arg(
        id = "nats_token",
        value_name = "TOKEN",
        long = "nats-token",
        env = "NATS_DELIVERY_NATS_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<Secret>,

    /// File holding an NKey user seed.
    #[arg(
        id = "nats_nkey_seed_file",
        value_name = "FILE",
        long = "nats-nkey-seed-file",
        env = "NATS_DELIVERY_NATS_NKEY_SEED_FILE",
        value_parser = crate::flags::values::nkey_seed_file
    )]
    pub nkey_seed_file: Option<PathBuf>,

    /// NATS credentials (.creds) file: user JWT and NKey seed.
    #[arg(
        id = "nats_creds_file",
        value_name = "FILE",
        long = "nats-creds-file",
        env = "NATS_DELIVERY_NATS_CREDS_FILE",
        value_parser = crate::flags::values::creds_file
    )]
    pub creds_file: Option<PathBuf>,

    /// PEM file with the CA certificate(s) that signed the server's certificate; enables TLS.
    #[arg(
        id = "nats_tls_ca",
        value_name = "FILE",
        long = "nats-tls-ca",
        env = "NATS_DELIVERY_NATS_TLS_CA",
        value_parser = crate::flags::values::pem_file
    )]
    pub tls_ca: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --nats-tls-key).
    #[arg(
        id = "nats_tls_cert",
        value_name = "FILE",
        long = "nats-tls-cert",
        env = "NATS_DELIVERY_NATS_TLS_CERT",
        requires = "nats_tls_key",
        value_parser = crate::flags::values::pem_file
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --nats-tls-cert.
    #[arg(
        id = "nats_tls_key",
        value_name = "FILE",
        long = "nats-tls-key",
        env = "NATS_DELIVERY_NATS_TLS_KEY",
        requires = "nats_tls_cert",
        value_parser = crate::flags::values::pem_file
    )]
    pub tls_key: Option<PathBuf>,

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
    pub accounts: Vec<AccountSpec>,

    /// The `account` label of the single connection used when --nats-account is not given
    /// (`$G` is the server's default account when it has no accounts configured).
    #[arg(
        id = "nats_account_name",
        value_name = "NAME",
        long = "nats-account-name",
        env = "NATS_DELIVERY_NATS_ACCOUNT_NAME",
        default_value = "$G"
    )]
    pub account_name: String,
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

/// Why a connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The flags contradict each other.
    #[error("NATS connection settings: {0}")]
    Config(String),
    /// A credentials, key or certificate file could not be read.
    #[error("cannot read {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The client refused the settings or could not connect.
    #[error("NATS connect: {0}")]
    Connect(#[from] async_nats::ConnectError),
}

/// Options for one connection: name, credentials, TLS, capacity. `purpose`
/// is appended to the client name so /connz tells the connections apart.
pub async fn connect_options(
    args: &NatsArgs,
    auth: &Auth,
    purpose: &str,
    subscription_capacity: usize,
) -> Result<ConnectOptions, ConnectionError> {
    watched_options(args, auth, purpose, subscription_capacity, None).await
}

async fn watched_options(
    args: &NatsArgs,
    auth: &Auth,
    purpose: &str,
    subscription_capacity: usize,
    on_failure: Option<OnFailure>,
) -> Result<ConnectOptions, ConnectionError> {
    // Two TLS crypto backends end up linked in (the NATS client's and the
    // HTTP client's); rustls then refuses to guess and panics on the first
    // handshake. Pick one for the process; an earlier choice stays.
    let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
    let servers: Vec<String> = args
        .servers
        .iter()
        .map(|s| crate::redact::redacted_text(s))
        .collect();
    let log = std::sync::Arc::new(
        failures::FailureLog::new(&failures::account_label(args, auth), purpose, &servers)
            .with_on_failure(on_failure)
            .with_client_certificate(args.tls_cert.is_some()),
    );
    let mut opts = ConnectOptions::new()
        .name(format!("{} {purpose}", args.client_name))
        .subscription_capacity(subscription_capacity)
        // The listeners come up before the servers do in many deployments:
        // keep trying instead of exiting, and report up=0 meanwhile.
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let log = log.clone();
            async move { failures::log_event(&log, event) }
        });
    opts = match auth {
        Auth::None => opts,
        Auth::UserPassword { user, password } => {
            opts.user_and_password(user.clone(), password.expose().to_string())
        }
        Auth::Token(t) => opts.token(t.expose().to_string()),
        Auth::NkeySeedFile(path) => {
            let seed = std::fs::read_to_string(path).map_err(|source| ConnectionError::File {
                path: path.clone(),
                source,
            })?;
            opts.nkey(seed.trim().to_string())
        }
        Auth::CredsFile(path) => {
            opts.credentials_file(path)
                .await
                .map_err(|source| ConnectionError::File {
                    path: path.clone(),
                    source,
                })?
        }
    };
    if let Some(ca) = &args.tls_ca {
        opts = opts.require_tls(true).add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        opts = opts
            .require_tls(true)
            .add_client_certificate(cert.clone(), key.clone());
    }
    Ok(opts)
}

/// Connects one client. Returns once the options are accepted; the client
/// keeps (re)connecting in the background, see [`is_connected`].
pub async fn connect(
    args: &NatsArgs,
    auth: &Auth,
    purpose: &str,
    subscription_capacity: usize,
) -> Result<Client, ConnectionError> {
    connect_watched(args, auth, purpose, subscription_capacity, None).await
}

/// [`connect`], telling `on_failure` of the connection's failures as they
/// happen in the background: `crate::nats::retry::ErrorKind::Connect` once
/// per outage (the first failed attempt after start or after a connection;
/// a refused password, say), `crate::nats::retry::ErrorKind::Permission` for
/// each subject the server refuses.
pub async fn connect_watched(
    args: &NatsArgs,
    auth: &Auth,
    purpose: &str,
    subscription_capacity: usize,
    on_failure: Option<OnFailure>,
) -> Result<Client, ConnectionError> {
    // Credentials written into a server URL are handed over as options, so
    // that the client library's log lines show the address only.
    let (servers, url_auth) = server_urls::without_credentials(&args.servers)?;
    let auth = match auth {
        Auth::None => &url_auth,
        given => given,
    };
    let opts = watched_options(args, auth, purpose, subscription_capacity, on_failure).await?;
    Ok(opts.connect(servers).await?)
}

/// The account the server put this connection in, from `$SYS.REQ.USER.INFO`
/// (nats-server 2.10+); `None` when the server does not answer in time.
pub async fn server_account_name(client: &Client) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Reply {
        data: Data,
    }
    #[derive(serde::Deserialize)]
    struct Data {
        account: String,
    }
    let reply = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        client.request("$SYS.REQ.USER.INFO", bytes::Bytes::new()),
    )
    .await
    .ok()?
    .ok()?;
    serde_json::from_slice::<Reply>(&reply.payload)
        .ok()
        .map(|r| r.data.account)
}

/// Warns when the configured account label is not the server's name for the
/// account: the label would not match the exporter's /jsz metrics. Uses a
/// short-lived connection, so that the reply does not enter any listener's
/// message arithmetic. Best effort: on servers before 2.10, which cannot
/// answer, one INFO line says the label is not checked.
pub async fn warn_on_account_mismatch(args: &NatsArgs, auth: &Auth, label: &str) {
    let Ok(client) = connect(args, auth, "account-check", 16).await else {
        return;
    };
    match server_account_name(&client).await {
        Some(actual) if actual != label => tracing::warn!(
            label,
            server_account = %actual,
            "the account label differs from the server's account name; metrics will not join with /jsz metrics"
        ),
        Some(_) => {}
        // Servers before 2.10 have no such request: say once that the label
        // is taken on trust, so a silent log is never read as "checked".
        None => tracing::info!(
            label,
            server_version = %client.server_info().version,
            "the server did not name the account of this connection ($SYS.REQ.USER.INFO needs nats-server 2.10 or later): the account label is not checked"
        ),
    }
    // Dropping the last handle closes the connection (drain could wait for a
    // server that never answered).
    drop(client);
}

/// Whether the client currently has a live connection to a server.
pub fn is_connected(client: &Client) -> bool {
    matches!(
        client.connection_state(),
        async_nats::connection::State::Connected
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_two_credential_methods() {
        let args = NatsArgs::from_flags([
            "--nats-user",
            "a",
            "--nats-password",
            "b",
            "--nats-token",
            "t",
        ])
        .unwrap();
        assert!(args.top_level_auth().is_err());
        let one = NatsArgs::from_flags(["--nats-token", "t"]).unwrap();
        assert_eq!(
            one.resolved_accounts().unwrap(),
            vec![("$G".to_string(), Auth::Token(Secret::new("t")))]
        );
        assert!(!format!("{one:?}").contains("\"t\""));
    }
}
