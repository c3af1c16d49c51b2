//! README's quick start, run as written against a real server: the exporter
//! command of its first shell block (with the server's monitoring URL in
//! place of `http://nats-1:8222`, and a free port through
//! `--web.listen-address`, as the text says to pick one), then its
//! `curl | grep` check, which must print exactly the lines README shows.
use std::path::Path;
use std::process::{Child, Command};

use nats_test_server::NatsServer;

use nats_test_server::wait::Wait;

/// The README lines of its quick start section, which must begin on the
/// first screen.
fn quick_start() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("\n## Quick start")
        .expect("README has a Quick start section");
    let line = readme[..start].lines().count() + 1;
    assert!(
        line <= 30,
        "README's quick start begins at line {line}, below its first screen"
    );
    let rest = &readme[start + 1..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

/// The fenced code blocks of `text` in language `lang`.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(tag)) => current = (tag == lang).then(String::new),
            (None, None) => {}
            (Some(block), Some(_)) => {
                out.push(std::mem::take(block));
                current = None;
            }
            (Some(block), None) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    out
}

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_quick_start_prints_what_readme_shows() {
    let section = quick_start();
    let commands = blocks(&section, "sh");
    let run = commands[0]
        .lines()
        .find_map(|l| l.strip_prefix("target/release/nats-delivery-exporter "))
        .expect("the quick start runs the exporter");
    let (curl, grep) = commands[1]
        .trim()
        .split_once(" | grep ")
        .expect("a curl | grep check");
    let url = curl.strip_prefix("curl -s ").expect("curl -s <url>");
    let prefix = grep
        .trim_matches('\'')
        .strip_prefix('^')
        .expect("a pattern anchored at the line's start");
    let shown = blocks(&section, "text").remove(0);

    let server = NatsServer::builder().name("nats-1").jetstream().start();
    let port = nats_test_server::free_port();
    let args: Vec<String> = run
        .split_whitespace()
        .map(|a| a.replace("http://nats-1:8222", &server.monitor_url()))
        .collect();
    assert!(args.contains(&server.monitor_url()), "{run}");
    let _exporter = Exporter(
        Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
            .args(&args)
            .args(["--web.listen-address", &format!("127.0.0.1:{port}")])
            .spawn()
            .unwrap(),
    );
    let url = url.replace(":7778/", &format!(":{port}/"));
    let body = Wait::secs("the exporter's /metrics", 20)
        .every(std::time::Duration::from_millis(200))
        .until_async(|| async { reqwest::get(url.as_str()).await.ok()?.text().await.ok() })
        .await;
    let printed: String = body
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(printed, shown, "README's quick start shows other lines");
}
