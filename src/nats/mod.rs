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
mod settings;

pub use credentials::Auth;
pub(crate) use credentials::NoEchoParser;
pub use credentials::Secret;
pub use failures::cause_layer;
pub(crate) use failures::OnFailure;
pub use settings::NatsArgs;

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
pub(crate) async fn connect(
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
pub(crate) async fn connect_watched(
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
pub(crate) fn is_connected(client: &Client) -> bool {
    matches!(
        client.connection_state(),
        async_nats::connection::State::Connected
    )
}

/// A client that never connects (nothing listens on a port just given
/// back: it keeps trying in the background), whose requests never time out
/// by themselves: for tests of what is not asked while a connection is down.
#[cfg(test)]
pub(crate) async fn never_connected() -> Client {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .request_timeout(None)
        .connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap()
}

/// Waits until the server has taken everything `client` sent before: a
/// message to a new inbox of the client's own comes back only after the
/// server processed the earlier SUBs (it reads one connection's commands in
/// order), which async-nats' `flush`, a socket write, does not tell.
/// `Ok(false)` when nothing came back within `within`, as for a user who may
/// not publish to `_INBOX.>`.
pub(crate) async fn round_trip(
    client: &Client,
    within: std::time::Duration,
) -> Result<bool, async_nats::Error> {
    use futures::StreamExt;
    let inbox = client.new_inbox();
    let mut echo = client.subscribe(inbox.clone()).await?;
    client.publish(inbox, bytes::Bytes::new()).await?;
    client.flush().await?;
    let back = matches!(tokio::time::timeout(within, echo.next()).await, Ok(Some(_)));
    let _ = echo.unsubscribe().await;
    Ok(back)
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
