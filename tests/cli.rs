//! The binary's command line: a wrong flag or value exits with status 2 and
//! one line saying what is wrong; --help and --version succeed.
use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .args(args)
        .env_remove("NATS_DELIVERY_MONITOR_URL")
        .output()
        .expect("run the exporter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn wrong_flags_exit_2_with_one_line() {
    for (args, says) in [
        (
            vec!["--monitor-url", "nats://127.0.0.1:4222"],
            "http:// or https://",
        ),
        (vec!["--timeout", "soon"], "not a duration"),
        (vec!["--timeout", "0s"], "greater than zero"),
        (vec!["--sources", "routez"], "routez"),
        (vec!["--listen", "localhost"], "--listen"),
        (vec!["--connz-top", "0"], "--connz-top"),
        (vec!["--no-such-flag"], "--no-such-flag"),
    ] {
        let (code, _, stderr) = run(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn help_and_version_succeed() {
    let (code, stdout, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--monitor-url",
        "--listen",
        "--timeout",
        "--sources",
        "NATS_DELIVERY_MONITOR_URL",
    ] {
        assert!(stdout.contains(flag), "--help lacks {flag}");
    }
    let (code, stdout, _) = run(&["--version"]);
    assert_eq!(
        (code, stdout.trim()),
        (
            0,
            concat!("nats-delivery-exporter ", env!("CARGO_PKG_VERSION"))
        )
    );
}

#[test]
fn a_busy_listen_address_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, _, stderr) = run(&["--listen", &addr]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}
