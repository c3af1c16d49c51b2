use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use nats_delivery_exporter::{
    bind_listener, cause_layer, connect_client_reports, connect_message_timestamps,
    connect_system_polling, init_logging, redacted, router_at, run_client_reports, serve,
    start_canary, with_web_config, BuildInfo, ClientReports, Config, ConnectionLimits, Exporter,
    ExporterBuilder, Listeners, ProcessCollector, ReportLimits, Stopped, StreamLostReader,
    WebConfig,
};

/// Why the exporter stopped with an error: at start (a setting that cannot
/// work, exit status 2) or while serving (status 1).
enum Failure {
    Start(anyhow::Error),
    Serve(anyhow::Error),
}

fn main() -> ExitCode {
    reuse_scrape_buffers();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run());
    // Tasks still running (a poll of a hanging server) must not delay the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // One line per failure, its causes joined: logs are read line by line.
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Start(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
        Err(Failure::Serve(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Everything before serving: the listening socket, the exporter and the
/// NATS listeners.
async fn start(
    config: &Config,
    nats_servers_given: bool,
) -> Result<(Vec<tokio::net::TcpListener>, Exporter, Listeners), Failure> {
    nats_delivery_exporter::name_metadata_labels(&config.jsz_metadata_labels)
        .map_err(|e| Failure::Start(anyhow::anyhow!("--jsz-metadata-labels: {e}")))?;
    // Bound first: a taken address stops the exporter before anything connects.
    let mut listeners = Vec::new();
    for &listen in &config.listen {
        let listener = bind_listener(listen)
            .with_context(|| format!("--web.listen-address: cannot listen on {listen}"))
            .map_err(Failure::Start)?;
        listeners.push(listener);
    }
    let mut exporter =
        ExporterBuilder::new(config.scrape_settings()).map_err(|e| Failure::Start(e.into()))?;
    let registry = exporter.registry_mut();
    registry.register_collector(Box::new(BuildInfo));
    if !config.disable_exporter_metrics {
        registry.register_collector(Box::new(ProcessCollector));
    }
    let mut nats_listeners =
        Listeners::start(&config.nats, &config.advisories, exporter.registry_mut())
            .context("cannot start the NATS listeners")
            .map_err(Failure::Start)?;
    let canary = start_canary(
        &config.nats,
        &config.canary,
        exporter.registry_mut(),
        nats_listeners.stop_signal(),
    )
    .context("cannot start the canary")
    .map_err(Failure::Start)?;
    nats_listeners.adopt(canary);
    // Timestamp reads need a NATS server to ask: without --nats-servers the
    // default address is a guess, and nothing is read; with both kinds of
    // read at 0 no connection is opened at all.
    if nats_servers_given && config.reads_message_data() {
        let timestamps = connect_message_timestamps(&config.nats)
            .await
            .context("cannot connect for message timestamp reads")
            .map_err(Failure::Start)?;
        exporter
            .registry_mut()
            .register_collector(Box::new(timestamps.clone()));
        if config.stream_lost_reads > 0 {
            let reader =
                StreamLostReader::new(timestamps.client(), config.stream_lost_reads as usize);
            exporter.read_stream_lost(reader);
        }
        exporter.read_timestamps(timestamps);
    }
    if config.system_account_polling {
        let polling = connect_system_polling(config.system_poll_settings())
            .await
            .map_err(|e| Failure::Start(e.into()))?;
        exporter.poll_through_system_account(polling);
    }
    if config.client_reports {
        start_client_reports(config, &mut exporter)
            .await
            .map_err(Failure::Start)?;
    }
    Ok((listeners, exporter.build(), nats_listeners))
}

/// A signal to stop, from the moment the process starts; shared by the
/// servers of every listening address.
type StopSignal =
    futures::future::Shared<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>;

async fn run() -> Result<(), Failure> {
    let (config, nats_servers_given) = parse_flags();
    init_logging(&config.log, cause_layer());
    // Registered before anything else: a SIGTERM while the exporter starts
    // (connecting to NATS can take long) stops it cleanly instead of ending
    // it by the signal's default action, and a SIGHUP does not end it.
    let signal = shutdown_signal()
        .context("cannot listen for SIGTERM")
        .map_err(Failure::Start)?;
    let stop: StopSignal = futures::FutureExt::shared(Box::pin(signal) as std::pin::Pin<Box<_>>);
    reload_on_sighup(config.web_config.clone()).map_err(Failure::Start)?;
    let started = tokio::select! {
        () = stop.clone() => return Ok(()),
        started = start(&config, nats_servers_given) => started?,
    };
    let (sockets, exporter, listeners) = started;
    let exporter = Arc::new(exporter);
    let mut local = Vec::new();
    for socket in &sockets {
        local.push(
            socket
                .local_addr()
                .context("the listening socket")
                .map_err(Failure::Serve)?,
        );
    }
    if config.system_account_polling {
        tracing::info!(listen = ?local, "serving /metrics, polling the servers through the system account");
    } else {
        tracing::info!(listen = ?local, servers = ?config.monitor_urls.iter().map(redacted).collect::<Vec<_>>(), "serving /metrics");
    }
    let web = config.web_config.clone();
    let router = with_web_config(router_at(exporter, &config.telemetry_path), web.clone());
    let connections = &config.connections;
    let limits = ConnectionLimits::new(
        config.write_timeout,
        connections.header_read_timeout,
        connections.idle_timeout,
        connections.max_connections as usize,
    );
    let servers = sockets.into_iter().map(|socket| {
        serve(
            socket,
            web.clone(),
            router.clone(),
            limits.clone(),
            config.shutdown_timeout,
            stop.clone(),
        )
    });
    // One address failing ends the exporter, as a single one did.
    let stopped = futures::future::try_join_all(servers)
        .await
        .context("serving /metrics")
        .map_err(Failure::Serve)?;
    if stopped.contains(&Stopped::TimedOut) {
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

/// Each scrape of a large server allocates megabytes (the parsed /jsz
/// replies, the exposition text) and frees them. With one glibc arena per
/// thread, each worker keeps its own freed megabytes, so resident memory grows
/// to several scrapes' worth. One arena reuses the same memory every scrape
/// without the page-fault cost of returning it to the system each time
/// (CHANGELOG has the figures).
///
/// Blocks of a MiB or more (whole lists of streams and consumers) are still
/// mapped and returned on their own: glibc otherwise raises that threshold
/// after the first such block is freed, and later ones land in the arena
/// between small blocks that outlive them, so the peak varied from scrape to
/// scrape by more than the margin of `--max-kept-size`.
fn reuse_scrape_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; it runs before the runtime starts any thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Subscribes to the applications' reports and registers their re-export.
async fn start_client_reports(
    config: &Config,
    exporter: &mut ExporterBuilder,
) -> anyhow::Result<()> {
    let limits = ReportLimits {
        max_instances: config.client_reports_max_instances as usize,
        max_instances_per_client: config.client_reports_max_instances_per_client as usize,
        max_series: config.client_reports_max_series as usize,
        max_entries: config.client_reports_max_entries as usize,
        max_report_bytes: config.client_reports_max_bytes as usize,
        ..ReportLimits::default()
    };
    let reports = Arc::new(ClientReports::with_limits(
        config.client_reports_expiry,
        limits,
    ));
    exporter
        .registry_mut()
        .register_collector(Box::new(reports.clone()));
    let auth = config.nats.top_level_auth()?;
    let client = connect_client_reports(&config.nats, &auth, reports.clone())
        .await
        .context("cannot connect for application reports")?;
    tokio::spawn(run_client_reports(
        client,
        config.client_reports_subject.clone(),
        reports,
    ));
    Ok(())
}

/// Parses the flags, and says whether `--nats-servers` was given (on the
/// command line or in the environment, not its default); a wrong flag exits
/// with status 2 and one line saying why.
fn parse_flags() -> (Config, bool) {
    use clap::error::ErrorKind;
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let parsed = Config::command().try_get_matches().and_then(|m| {
        let given = |id| {
            matches!(
                m.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        };
        let (servers, urls) = (given("nats_servers"), given("monitor_urls"));
        Config::from_arg_matches(&m).map(|c| (c, servers, urls))
    });
    match parsed {
        Ok((config, given, urls_given)) => match config.validate(urls_given) {
            Ok(()) if config.stream_lost_reads > 0 && !given => {
                eprintln!("error: --stream-lost-reads: needs --nats-servers, the connection the streams are read through (see --help)");
                std::process::exit(2);
            }
            Ok(()) => (config, given),
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
            // clap spreads some errors over several lines (the missing
            // argument's name on the second): keep every line but usage.
            let text = e.to_string();
            let line = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:"))
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect::<Vec<_>>()
                .join(" ");
            eprintln!("{line} (see --help)");
            std::process::exit(2);
        }
    }
}

/// SIGHUP reads the web configuration file again (as Prometheus and
/// node_exporter reload on it) instead of ending the process.
fn reload_on_sighup(web: Option<WebConfig>) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match web.clone() {
                    Some(web) => {
                        let _ = tokio::task::spawn_blocking(move || web.reload()).await;
                    }
                    None => tracing::info!("SIGHUP: no --web.config.file to reload"),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = web;
    Ok(())
}

/// Registers for SIGTERM and SIGINT (Ctrl-C) now and returns the wait for
/// the first of them.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {},
                _ = interrupt.recv() => {},
            }
            tracing::info!("shutting down");
        })
    }
    #[cfg(not(unix))]
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    })
}
