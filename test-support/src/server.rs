//! One nats-server process: its settings, start, restarts and log.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wait::{Text, Wait};
use crate::{binary, free_port};

/// Settings for a server to start; see [`NatsServer::builder`].
#[derive(Debug, Clone, Default)]
pub struct Builder {
    version: Option<String>,
    jetstream: bool,
    domain: Option<String>,
    name: Option<String>,
    max_pending: Option<u64>,
    write_deadline: Option<String>,
    https: Option<(std::path::PathBuf, std::path::PathBuf)>,
    host: Option<String>,
    netns: Option<String>,
    extra: String,
}

impl Builder {
    /// Use this server version (a `.tools/` name such as "2.11.11", or "debian").
    pub fn version(mut self, v: &str) -> Self {
        self.version = Some(v.to_string());
        self
    }
    /// Enable JetStream with a store in the server's temporary directory.
    pub fn jetstream(mut self) -> Self {
        self.jetstream = true;
        self
    }
    /// Enable JetStream in its own domain `domain` (as [`Builder::jetstream`]
    /// does otherwise): another domain's streams are reached through
    /// `$JS.<domain>.API` across leaf node connections.
    pub fn jetstream_domain(mut self, domain: &str) -> Self {
        self.jetstream = true;
        self.domain = Some(domain.to_string());
        self
    }
    /// Set `server_name` (default: a name derived from the process).
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }
    /// Set `max_pending` in bytes: the point at which the server cuts a slow connection.
    pub fn max_pending(mut self, bytes: u64) -> Self {
        self.max_pending = Some(bytes);
        self
    }
    /// Set `write_deadline`, e.g. "2s".
    pub fn write_deadline(mut self, d: &str) -> Self {
        self.write_deadline = Some(d.to_string());
        self
    }
    /// Serve monitoring over HTTPS (instead of HTTP) with this certificate and key.
    pub fn https(mut self, cert: &Path, key: &Path) -> Self {
        self.https = Some((cert.to_path_buf(), key.to_path_buf()));
        self
    }
    /// Listen (client, monitoring, and what `config` names) on this address
    /// instead of 127.0.0.1.
    pub fn host(mut self, addr: &str) -> Self {
        self.host = Some(addr.to_string());
        self
    }
    /// Run the server inside this network namespace (`ip netns exec`).
    pub fn netns(mut self, name: &str) -> Self {
        self.netns = Some(name.to_string());
        self
    }
    /// Append raw configuration text (accounts, authorization, ...).
    pub fn config(mut self, text: &str) -> Self {
        self.extra.push_str(text);
        self.extra.push('\n');
        self
    }
    /// Start the server and wait until both its client and monitoring ports answer.
    pub fn start(self) -> NatsServer {
        NatsServer::start(self)
    }
}

/// A running nats-server; killed and cleaned up on drop.
#[derive(Debug)]
pub struct NatsServer {
    child: Child,
    dir: tempfile::TempDir,
    /// Client port on 127.0.0.1.
    pub client_port: u16,
    /// HTTP monitoring port on 127.0.0.1.
    pub monitor_port: u16,
    /// `server_name`.
    pub name: String,
    /// `http` or `https`.
    scheme: &'static str,
    /// The version asked for (None: the default binary).
    version: Option<String>,
    /// The address the server listens on.
    host: String,
    /// The network namespace the server runs in (None: the test's own).
    netns: Option<String>,
}

impl NatsServer {
    /// A builder for a server with default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// `nats://127.0.0.1:<client_port>` (another address with [`Builder::host`]).
    pub fn client_url(&self) -> String {
        format!("nats://{}:{}", self.host, self.client_port)
    }

    /// `http://127.0.0.1:<monitor_port>` (`https://` with [`Builder::https`]).
    pub fn monitor_url(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.monitor_port)
    }

    /// The command that runs the binary, inside the server's namespace if it has one.
    fn command(version: Option<&str>, netns: Option<&str>) -> Command {
        let bin = binary(version);
        match netns {
            None => Command::new(bin),
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(bin);
                cmd
            }
        }
    }

    /// The port the server listens on for leaf node connections, read from
    /// its log (None without a `leafnodes { listen: ... }` block).
    pub fn leafnode_port(&self) -> Option<u16> {
        port_after(&self.log(), "Listening for leafnode connections on ")
    }

    /// The server process's id: its CPU time is in `/proc/<pid>/stat`, and a
    /// test may signal it (SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the server's process `sig` (`-STOP`, `-CONT`, `-KILL`) with
    /// `kill`; panics if it cannot be sent.
    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {sig} {}", self.pid());
    }

    /// The server's temporary directory (config, log, JetStream store).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Replaces `from` with `to` in the server's configuration and makes the
    /// running server reload it (SIGHUP), as an operator changing
    /// permissions does.
    pub fn reload_with(&self, from: &str, to: &str) {
        let conf_path = self.dir.path().join("server.conf");
        let conf = std::fs::read_to_string(&conf_path).expect("server config");
        assert!(conf.contains(from), "{from:?} not in the configuration");
        std::fs::write(&conf_path, conf.replacen(from, to, 1)).expect("write server config");
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("send SIGHUP");
        assert!(status.success(), "SIGHUP to nats-server failed");
    }

    /// Kills the server with SIGKILL and starts it again on the same ports,
    /// with its JetStream store kept or, with `empty_store`, deleted first
    /// (what a rescheduled pod with ephemeral storage does).
    pub fn kill_and_restart(&mut self, empty_store: bool) {
        self.kill_and_restart_after(|dir| {
            if empty_store {
                let _ = std::fs::remove_dir_all(dir.join("js"));
            }
        });
    }

    /// Kills the server with SIGKILL, lets `change` alter its directory
    /// (the JetStream store is under `js/`), and starts it again on the
    /// same ports.
    pub fn kill_and_restart_after(&mut self, change: impl FnOnce(&Path)) {
        let _ = self.child.kill();
        self.restart_after(change);
    }

    /// Stops the server with SIGTERM (it writes its store's index files as
    /// it exits), lets `change` alter its directory, and starts it again on
    /// the same ports.
    pub fn stop_and_restart_after(&mut self, change: impl FnOnce(&Path)) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.restart_after(change);
    }

    fn restart_after(&mut self, change: impl FnOnce(&Path)) {
        let _ = self.child.wait();
        let dir = self.dir.path().to_path_buf();
        change(&dir);
        let conf_path = dir.join("server.conf");
        let log_path = dir.join("server.log");
        let _ = std::fs::rename(&log_path, dir.join("server.log.before-restart"));
        // The old ports may still be held for a moment: start it again until it stays up.
        let (version, netns) = (self.version.clone(), self.netns.clone());
        self.child = Wait::new(
            "nats-server to start again on its ports",
            Duration::from_secs(20),
        )
        .every(Duration::ZERO)
        .until_blocking(|| {
            let mut child = Self::command(version.as_deref(), netns.as_deref())
                .arg("-c")
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("stderr.log")).expect("stderr log"))
                .spawn()
                .expect("restart nats-server");
            // Until it says it is ready, or exits (its ports still held).
            let started = Wait::new("nats-server to be ready or exit", Duration::from_secs(20))
                .every(Duration::from_millis(20))
                .try_until_blocking(|| match child.try_wait() {
                    Ok(Some(status)) => Some(Err(Text(format!(
                        "exited with {status}:\n{}",
                        std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
                    )))),
                    _ => std::fs::read_to_string(&log_path)
                        .is_ok_and(|log| log.contains("Server is ready"))
                        .then_some(Ok(())),
                });
            match started {
                Ok(Ok(())) => Ok(child),
                Ok(Err(exited)) => Err(exited),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    Err(Text("neither ready nor exited after 20 s".into()))
                }
            }
        });
        let (c, h) = (self.client_port, self.monitor_port);
        self.wait_ready(&log_path);
        assert_eq!((self.client_port, self.monitor_port), (c, h));
    }

    fn start(b: Builder) -> NatsServer {
        let bin = binary(b.version.as_deref());
        let dir = tempfile::Builder::new()
            .prefix("nats-test-")
            .tempdir()
            .expect("temp dir");
        let name = b.name.clone().unwrap_or_else(|| {
            format!("test-{}", dir.path().file_name().unwrap().to_string_lossy())
        });
        let log_path = dir.path().join("server.log");
        let host = b.host.clone().unwrap_or_else(|| "127.0.0.1".to_string());
        // Ports claimed below the ephemeral range, not `-1`: a server
        // restarted on its ports must find them free, and a port the OS
        // chose can meanwhile become the local port of any outgoing
        // connection on the machine.
        let (port, monitor) = (free_port(), free_port());
        let mut conf = format!(
            "server_name: \"{name}\"\nhost: {host}\nport: {port}\nlog_file: \"{}\"\n",
            log_path.display()
        );
        let scheme = match &b.https {
            None => {
                conf.push_str(&format!("http: \"{host}:{monitor}\"\n"));
                "http"
            }
            Some((cert, key)) => {
                conf.push_str(&format!(
                    "https: \"{host}:{monitor}\"\ntls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
                    cert.display(),
                    key.display()
                ));
                "https"
            }
        };
        if b.jetstream {
            let domain = b
                .domain
                .as_ref()
                .map_or(String::new(), |d| format!(", domain: {d}"));
            conf.push_str(&format!(
                "jetstream {{ store_dir: \"{}\"{domain} }}\n",
                dir.path().join("js").display()
            ));
        }
        if let Some(mp) = b.max_pending {
            conf.push_str(&format!("max_pending: {mp}\n"));
        }
        if let Some(wd) = &b.write_deadline {
            conf.push_str(&format!("write_deadline: \"{wd}\"\n"));
        }
        conf.push_str(&b.extra);
        let conf_path = dir.path().join("server.conf");
        std::fs::File::create(&conf_path)
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .expect("write server config");
        let child = Self::command(b.version.as_deref(), b.netns.as_deref())
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr.log")).expect("stderr log"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut server = NatsServer {
            child,
            dir,
            client_port: 0,
            monitor_port: 0,
            name,
            scheme,
            version: b.version.clone(),
            host,
            netns: b.netns.clone(),
        };
        server.wait_ready(&log_path);
        server
    }

    fn wait_ready(&mut self, log_path: &Path) {
        let wait = Wait::new("nats-server to be ready", Duration::from_secs(20))
            .every(Duration::from_millis(20));
        let (client, monitor) = wait.until_blocking(|| {
            if let Ok(Some(status)) = self.child.try_wait() {
                let stderr = log_path.with_file_name("stderr.log");
                panic!(
                    "nats-server exited with {status} before it was ready:\n{}{}",
                    std::fs::read_to_string(log_path).unwrap_or_default(),
                    std::fs::read_to_string(stderr).unwrap_or_default()
                );
            }
            let log = std::fs::read_to_string(log_path).unwrap_or_default();
            let client = port_after(&log, "Listening for client connections on ");
            let http = port_after(&log, &format!("Starting {} monitor on ", self.scheme));
            match (client, http) {
                (Some(c), Some(h))
                    if log.contains("Server is ready")
                        && TcpStream::connect((self.host.as_str(), c)).is_ok()
                        && TcpStream::connect((self.host.as_str(), h)).is_ok() =>
                {
                    Ok((c, h))
                }
                _ => Err(Text(format!("the log:\n{log}"))),
            }
        });
        self.client_port = client;
        self.monitor_port = monitor;
    }
}

/// Reads the port from a log line such as "... on 127.0.0.1:41234".
fn port_after(log: &str, marker: &str) -> Option<u16> {
    let line = log.lines().find(|l| l.contains(marker))?;
    let addr = line.split(marker).nth(1)?.trim();
    addr.rsplit(':').next()?.trim_end_matches('/').parse().ok()
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::port_after;

    #[test]
    fn reads_ports_from_log_lines() {
        let log = "[1] [INF] Listening for client connections on 127.0.0.1:40123\n[1] [INF] Starting http monitor on 127.0.0.1:40124";
        assert_eq!(
            port_after(log, "Listening for client connections on "),
            Some(40123)
        );
        assert_eq!(port_after(log, "Starting http monitor on "), Some(40124));
    }
}
