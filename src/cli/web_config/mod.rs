//! `--web.config.file`: TLS, basic authentication, response headers and a
//! rate limit for the exporter's own HTTP server, in the web configuration
//! format of exporter-toolkit (node_exporter's), so that an operator's
//! existing file means the same here:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.pem
//!   key_file: server.key
//!   client_ca_file: ca.pem             # optional
//!   client_auth_type: RequireAndVerifyClientCert
//!   min_version: TLS13
//! http_server_config:
//!   headers:
//!     X-Frame-Options: deny
//! basic_auth_users:
//!   prometheus: $2y$10$...             # bcrypt hash
//! ```
//!
//! Every key of the format is honoured or refused at start, unknown keys
//! too. The file and the files it names are looked at again on each new
//! connection and request (their modification times, sizes and inodes) and
//! re-read when one changed, or on SIGHUP: a rotated certificate is served
//! without a restart, and a broken new file keeps the last good
//! configuration, with one warning. Relative paths are read from the file's
//! own directory.

mod basic_auth;
mod client_sans;
mod file;
mod rate_limit;
mod tls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::lock::LockOrRecover;
use tokio_rustls::rustls;

pub(crate) use basic_auth::{AuthCache, Users, Verdict};
pub(crate) use rate_limit::RateLimiter;

/// One reading of the file.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// TLS for the server, when `tls_server_config` is given.
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    /// The users of basic authentication; none means no authentication.
    pub(crate) users: Users,
    /// Headers added to every response, as (name, value).
    pub(crate) headers: Vec<(String, String)>,
    /// `rate_limit`, when set with an interval above 0.
    pub(crate) rate_limit: Option<RateLimiter>,
}

/// The web configuration: the file's last good reading, re-read when the
/// file or a file it names changes. Clones share it.
#[derive(Clone)]
pub struct WebConfig {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    state: Mutex<State>,
    /// bcrypt results, kept across readings.
    cache: AuthCache,
}

struct State {
    loaded: Arc<Loaded>,
    /// The files looked at: the configuration and the files it names.
    watched: Vec<PathBuf>,
    /// What they looked like when last read (successfully or not).
    seen: Vec<Option<Stamp>>,
}

/// Modification time, size and inode: what changes when a file is
/// rewritten or replaced (also through a symlink swap, as Kubernetes does).
type Stamp = (SystemTime, u64, u64);

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

/// Reads and checks the file named by `--web.config.file`; for the flag parser.
pub(crate) fn parse_web_config(text: &str) -> Result<WebConfig, String> {
    WebConfig::load(Path::new(text)).map_err(|e| format!("'{text}': {e}"))
}

impl WebConfig {
    /// Reads and checks a web configuration file: every key known, every
    /// value one this exporter can honour, certificates and keys loaded,
    /// every password a bcrypt hash.
    pub(crate) fn load(path: &Path) -> Result<WebConfig, String> {
        let (loaded, watched, seen) = read(path, None);
        Ok(WebConfig {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                state: Mutex::new(State {
                    loaded: Arc::new(loaded?),
                    watched,
                    seen,
                }),
                cache: AuthCache::default(),
            }),
        })
    }

    /// The configuration to use now: read again first if the file or a file
    /// it names changed since the last look. A few `stat` calls when nothing
    /// changed.
    pub(crate) fn current(&self) -> Arc<Loaded> {
        let mut state = self.shared.state.lock_or_recover();
        let now = stamps(&state.watched);
        if now != state.seen {
            self.reread(&mut state, "changed");
        }
        state.loaded.clone()
    }

    /// Reads the file again whether or not it changed (SIGHUP).
    pub fn reload(&self) {
        let mut state = self.shared.state.lock_or_recover();
        self.reread(&mut state, "SIGHUP");
    }

    /// The bcrypt results of this file's users.
    pub(crate) fn auth_cache(&self) -> &AuthCache {
        &self.shared.cache
    }

    fn reread(&self, state: &mut State, why: &str) {
        let path = &self.shared.path;
        let (loaded, watched, seen) = read(path, Some(&state.loaded));
        state.watched = watched;
        state.seen = seen;
        match loaded {
            Ok(loaded) => {
                state.loaded = Arc::new(loaded);
                tracing::info!(file = %path.display(), trigger = why, "web configuration reloaded");
            }
            Err(e) => tracing::warn!(
                file = %path.display(),
                trigger = why,
                "web configuration not reloaded, the last good one stays in use: {e}"
            ),
        }
    }
}

/// One reading of the file; the files to watch after it (the file and, once
/// its YAML was read, the files it names) and their stamps, each taken
/// before the file was read, so that a change while reading is seen later.
fn read(
    path: &Path,
    previous: Option<&Loaded>,
) -> (Result<Loaded, String>, Vec<PathBuf>, Vec<Option<Stamp>>) {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut watched = vec![path.to_path_buf()];
    let mut seen = stamps(&watched);
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return (Err(format!("cannot read: {e}")), watched, seen),
    };
    let parsed = match file::parse(&text) {
        Ok(f) => f,
        Err(e) => return (Err(e), watched, seen),
    };
    if let Some(t) = &parsed.tls_server_config {
        let named = tls::named_files(t, dir);
        seen.extend(stamps(&named));
        watched.extend(named);
    }
    let loaded = settings(parsed, dir).and_then(|loaded| match previous {
        Some(p) if p.tls.is_some() != loaded.tls.is_some() => {
            Err("turning TLS on or off needs a restart".to_string())
        }
        _ => Ok(loaded),
    });
    (loaded, watched, seen)
}

fn settings(parsed: file::File, dir: &Path) -> Result<Loaded, String> {
    let http2 = parsed.http_server_config.http2.unwrap_or(true);
    let tls = match &parsed.tls_server_config {
        Some(t) => Some(Arc::new(tls::server_config(t, dir, http2)?)),
        None => None,
    };
    let rate_limit = match &parsed.rate_limit {
        Some(r) => file::rate_interval(&r.interval)?.map(|i| RateLimiter::new(i, r.burst)),
        None => None,
    };
    Ok(Loaded {
        tls,
        users: Users::new(parsed.basic_auth_users)?,
        headers: file::headers(&parsed.http_server_config.headers)?,
        rate_limit,
    })
}

fn stamps(paths: &[PathBuf]) -> Vec<Option<Stamp>> {
    paths
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let inode = 0;
            Some((m.modified().ok()?, m.len(), inode))
        })
        .collect()
}
