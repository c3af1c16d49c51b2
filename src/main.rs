use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use nats_delivery_exporter::config::Config;
use nats_delivery_exporter::exporter::Exporter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NATS_DELIVERY_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = parse_flags();
    let listen = config.listen;
    let exporter = Arc::new(Exporter::new(config.clone())?);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(listen = %listener.local_addr()?, servers = ?config.monitor_urls.iter().map(|u| u.as_str()).collect::<Vec<_>>(), "serving /metrics");
    axum::serve(listener, nats_delivery_exporter::http::router(exporter))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

/// Parses the flags; a wrong one exits with status 2 and one line saying why.
fn parse_flags() -> Config {
    use clap::error::ErrorKind;
    match Config::try_parse() {
        Ok(config) => config,
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
