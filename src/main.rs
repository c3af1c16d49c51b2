use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use nats_delivery_exporter::advisories::Listeners;
use nats_delivery_exporter::client_reports::{run_client_reports, ClientReports};
use nats_delivery_exporter::config::Config;
use nats_delivery_exporter::exporter::Exporter;
use nats_delivery_exporter::nats_connection;
use nats_delivery_exporter::redact::redacted;
use nats_delivery_exporter::serve::{serve, Stopped};

fn main() -> anyhow::Result<()> {
    reuse_scrape_buffers();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(run());
    // Tasks still running (a poll of a hanging server) must not delay the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NATS_DELIVERY_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = parse_flags();
    let listen = config.listen;
    let mut exporter = Exporter::new(config.clone())?;
    let listeners = Listeners::start(&config.nats, &config.advisories, exporter.registry_mut())
        .context("cannot start the NATS listeners")?;
    if config.client_reports {
        start_client_reports(&config, &mut exporter).await?;
    }
    let exporter = Arc::new(exporter);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(listen = %listener.local_addr()?, servers = ?config.monitor_urls.iter().map(redacted).collect::<Vec<_>>(), "serving /metrics");
    let stopped = serve(
        listener,
        nats_delivery_exporter::http::router(exporter),
        config.write_timeout,
        config.shutdown_timeout,
        shutdown_signal(),
    )
    .await?;
    if stopped == Stopped::TimedOut {
        tracing::warn!(timeout = ?config.shutdown_timeout, "answers still in flight at the shutdown timeout were cut off");
    }
    // Durable listeners acknowledge what they counted before they end.
    if tokio::time::timeout(config.shutdown_timeout, listeners.stop())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?config.shutdown_timeout, "the NATS listeners did not stop within the shutdown timeout");
    }
    Ok(())
}

/// Each scrape of a large server allocates a few buffers of megabytes (the
/// /jsz reply, the exposition text) and frees them. With one glibc arena per
/// thread, each worker keeps its own freed megabytes, so resident memory grows
/// to several scrapes' worth (measured at 100 x 100 consumers: 59 MB peak).
/// One arena reuses the same memory every scrape (27 MB peak) without the
/// page-fault cost of returning it to the system each time.
fn reuse_scrape_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; it runs before the runtime starts any thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Subscribes to the applications' reports and registers their re-export.
async fn start_client_reports(config: &Config, exporter: &mut Exporter) -> anyhow::Result<()> {
    let reports = Arc::new(ClientReports::new(config.client_reports_expiry));
    exporter
        .registry_mut()
        .register_collector(Box::new(reports.clone()));
    let auth = config.nats.top_level_auth()?;
    let client = nats_connection::connect(&config.nats, &auth, "client-reports", 65_536)
        .await
        .context("cannot connect for application reports")?;
    tokio::spawn(run_client_reports(
        client,
        config.client_reports_subject.clone(),
        reports,
    ));
    Ok(())
}

/// Parses the flags; a wrong one exits with status 2 and one line saying why.
fn parse_flags() -> Config {
    use clap::error::ErrorKind;
    match Config::try_parse() {
        Ok(config) => match config.validate() {
            Ok(()) => config,
            Err((flag, why)) => {
                eprintln!("error: {flag}: {why} (see --help)");
                std::process::exit(2);
            }
        },
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            let text = e.to_string();
            eprintln!(
                "{} (see --help)",
                text.lines().next().unwrap_or("invalid arguments").trim()
            );
            std::process::exit(2);
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
