//! The exporter binary as a child process, for tests that stop it the way
//! operators and crashes do.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nats_test_server::NatsServer;

use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;

/// A running exporter binary in durable mode for account APP.
pub struct Exporter {
    child: Child,
    /// Its /metrics port.
    pub port: u16,
}

impl Exporter {
    /// Starts it in durable mode (stream ADV) with `extra` flags and waits
    /// until its listener is up.
    pub fn start(s: &NatsServer, extra: &[&str]) -> Exporter {
        Exporter::start_on(s, nats_test_server::free_port(), extra)
    }

    /// The same on a given port (a restarted exporter keeps its address,
    /// as a Prometheus target does).
    pub fn start_on(s: &NatsServer, port: u16, extra: &[&str]) -> Exporter {
        let child = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--monitor-url", &s.monitor_url()])
            .args(["--nats-servers", &s.client_url()])
            .args(["--nats-account", "APP=user:app:app-secret"])
            .args(["--advisories", "--advisories-stream", "ADV"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the exporter binary");
        let e = Exporter { child, port };
        Wait::secs("the exporter's listener up", 30)
            .every(Duration::from_millis(100))
            .until_blocking(|| {
                let up = e.value("nats_delivery_advisory_listener_up", &[("account", "APP")]);
                (up == Some(1.0)).then_some(()).ok_or(up)
            });
        e
    }

    /// One scrape of /metrics, or None while nothing listens.
    pub fn scrape(&self) -> Option<String> {
        scrape_port(self.port)
    }

    /// One sample of one scrape.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        exact(&self.scrape()?, name, labels)
    }

    /// SIGTERM, as a service manager stops it; waits for a clean exit.
    pub fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let status = Wait::secs("the exporter to stop on SIGTERM", 20)
            .until_blocking(|| self.child.try_wait().unwrap());
        assert!(status.success(), "exporter exited with {status}");
    }

    /// SIGKILL: the process ends wherever it is.
    pub fn kill_9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One scrape of the /metrics on `port`, or None while nothing listens.
pub fn scrape_port(port: u16) -> Option<String> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let url = format!("http://127.0.0.1:{port}/metrics");
    std::panic::catch_unwind(|| nats_test_server::http_get(&url)).ok()
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
