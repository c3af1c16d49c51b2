//! The account label check against a real server of each version: what it
//! logs when the label differs, and that it says so when the server cannot
//! name the account (before 2.10).
//!
//! Alone in its test binary: it reads the log through a subscriber set on
//! its own thread, and tracing caches whether a log line is wanted when the
//! line is first reached, so another test logging the same lines first on
//! another thread could hide them.
#[path = "listeners/advisories_support/mod.rs"]
mod advisories_support;

use advisories_support::*;

/// What the exporter logs while running `f`, on this thread.
async fn logged<F: std::future::Future<Output = ()>>(f: F) -> String {
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    f.await;
    drop(guard);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    text
}

// A current-thread runtime: the log subscriber set here sees every line.
#[tokio::test]
async fn the_account_label_check_says_what_it_found_on_every_version() {
    use nats_delivery_exporter::{warn_on_account_mismatch, NatsArgs};
    let s = server();
    let version = nats_test_server::version_numbers(&client(&s, "app").await.server_info().version);
    let args = NatsArgs::from_flags(["--nats-servers", &s.client_url()]).unwrap();
    let auth = "user:app:app-secret".parse().unwrap();
    let wrong = logged(warn_on_account_mismatch(&args, &auth, "BILLING")).await;
    let right = logged(warn_on_account_mismatch(&args, &auth, "APP")).await;
    let differs = "the account label differs from the server's account name";
    let unchecked = "the account label is not checked";
    if version >= vec![2, 10, 0] {
        assert!(wrong.contains(differs), "{wrong}");
        assert!(wrong.contains("server_account=APP"), "{wrong}");
        assert!(
            !right.contains(differs) && !right.contains(unchecked),
            "{right}"
        );
    } else {
        // Before 2.10 the server cannot name the account: one line says so,
        // whatever the label.
        for log in [&wrong, &right] {
            assert!(log.contains(unchecked), "{log}");
            assert!(!log.contains(differs), "{log}");
        }
    }
}
