//! The flags named as exporter-toolkit names them: several listening
//! addresses, another telemetry path, the log level and the log formats,
//! read from the running binary.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const BINARY: &str = env!("CARGO_BIN_EXE_nats-delivery-exporter");

/// The running binary and the lines it has logged so far.
struct Exporter {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// Set once its log is read to the end (the process has ended).
    read_to_end: Arc<AtomicBool>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Exporter {
        let mut command = Command::new(BINARY);
        command
            .args(args)
            .env_remove("NATS_DELIVERY_LOG")
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stderr.take().unwrap());
        let kept = log.clone();
        let read_to_end = Arc::new(AtomicBool::new(false));
        let at_end = read_to_end.clone();
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
            at_end.store(true, Ordering::SeqCst);
        });
        Exporter {
            child,
            log,
            read_to_end,
        }
    }

    /// Ends the process and returns every line it logged: its log read to
    /// the end.
    async fn end(&mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        Wait::secs("the log read to its end", 20)
            .until(|| self.read_to_end.load(Ordering::SeqCst))
            .await;
        self.lines()
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until a line containing `text` was logged; all lines so far.
    async fn wait_for_line(&self, text: &str) -> Vec<String> {
        Wait::secs(text, 20)
            .every(std::time::Duration::from_millis(200))
            .until_async(|| async {
                let lines = self.lines();
                lines.iter().any(|l| l.contains(text)).then_some(lines)
            })
            .await
    }
}

async fn get(url: &str) -> (u16, String) {
    Wait::secs(url, 20)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async {
            let answer = reqwest::get(url).await.ok()?;
            let status = answer.status().as_u16();
            Some((status, answer.text().await.ok()?))
        })
        .await
}

#[tokio::test]
async fn every_listening_address_serves_the_telemetry_path() {
    let server = NatsServer::builder().start();
    let (a, b) = (nats_test_server::free_port(), nats_test_server::free_port());
    let (a, b) = (format!("127.0.0.1:{a}"), format!("127.0.0.1:{b}"));
    let _exporter = Exporter::start(
        &[
            "--monitor-url",
            &server.monitor_url(),
            "--web.listen-address",
            &a,
            "--web.listen-address",
            &b,
            "--web.telemetry-path",
            "/nats/metrics",
        ],
        &[],
    );
    for addr in [&a, &b] {
        let (status, text) = get(&format!("http://{addr}/nats/metrics")).await;
        assert_eq!(status, 200, "{addr}");
        assert!(
            text.contains("nats_delivery_exporter_build_info{"),
            "{addr}"
        );
        assert!(text.contains("nats_delivery_up{"), "{addr}");
        let (status, _) = get(&format!("http://{addr}/metrics")).await;
        assert_eq!(status, 404, "{addr}: /metrics is not served");
        let (status, page) = get(&format!("http://{addr}/")).await;
        assert_eq!(status, 200);
        assert!(page.contains("href=\"nats/metrics\""), "{page}");
    }
}

#[tokio::test]
async fn logs_are_logfmt_by_default_and_json_when_asked() {
    let server = NatsServer::builder().start();
    let url = server.monitor_url();
    for format in ["logfmt", "json"] {
        let listen = format!("127.0.0.1:{}", nats_test_server::free_port());
        let exporter = Exporter::start(
            &["--monitor-url", &url, "--listen", &listen],
            &[("NATS_DELIVERY_LOG_FORMAT", format)],
        );
        let lines = exporter.wait_for_line("serving /metrics").await;
        for line in &lines {
            if format == "json" {
                let event: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
                assert!(event["timestamp"].is_string(), "{line}");
                assert!(event["level"].is_string(), "{line}");
                assert!(event["message"].is_string(), "{line}");
            } else {
                assert!(line.starts_with("time="), "{line}");
                assert!(line.contains(" level=") && line.contains(" msg="), "{line}");
            }
        }
        let serving = lines.iter().find(|l| l.contains("serving /metrics"));
        let serving = serving.unwrap();
        if format == "logfmt" {
            let expected = format!(" msg=\"serving /metrics\" listen=[{listen}] ");
            assert!(serving.contains(" level=info "), "{serving}");
            assert!(serving.contains(&expected), "{serving}");
        } else {
            let event: serde_json::Value = serde_json::from_str(serving).unwrap();
            assert_eq!(event["level"], "INFO", "{serving}");
            assert_eq!(event["listen"], format!("[{listen}]"), "{serving}");
        }
    }
}

/// `--log.level warn` leaves out info lines and keeps warnings; the full
/// filter of `NATS_DELIVERY_LOG` takes the level's place.
#[tokio::test]
async fn the_log_level_leaves_out_what_is_less_severe() {
    // Nothing listens there: each scrape logs a warning per source.
    let dead = format!("http://127.0.0.1:{}", nats_test_server::free_port());
    let cases = [
        (vec!["--log.level", "warn"], vec![], true),
        (
            vec!["--log.level", "debug"],
            vec![("NATS_DELIVERY_LOG", "error")],
            false,
        ),
    ];
    for (flags, env, warns) in cases {
        let port = nats_test_server::free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec!["--monitor-url", &dead, "--listen", &listen];
        args.extend(flags.iter().copied());
        let mut exporter = Exporter::start(&args, &env);
        let (status, _) = get(&format!("http://{listen}/metrics")).await;
        assert_eq!(status, 200);
        if warns {
            let lines = exporter.wait_for_line("poll failed").await;
            assert!(
                lines.iter().all(|l| !l.contains(" level=info ")),
                "{lines:#?}"
            );
            assert!(
                lines.iter().all(|l| l.contains(" level=warn ")),
                "{lines:#?}"
            );
        } else {
            // A second scrape ends after the first one's warnings would
            // have been written; the log, read to its end, has none.
            let (status, _) = get(&format!("http://{listen}/metrics")).await;
            assert_eq!(status, 200);
            assert_eq!(exporter.end().await, Vec::<String>::new());
        }
    }
}
