//! The retrylab server: reads its settings, binds, serves until SIGINT or SIGTERM.

use std::io::IsTerminal;

use clap::FromArgMatches;
use retrylab::config::{Command, Config, LogFormat};
use tracing_subscriber::EnvFilter;

/// Every request allocates a little (headers, the body, its event); mimalloc serves those small
/// short-lived allocations from per-thread pages, where glibc's allocator took about a tenth of
/// the endpoint's time under load (BENCHMARKS.md, "Downstream throughput").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    no_huge_pages();
    // One plain line and exit status 1 on any failure, never Rust's debug form of the error.
    if let Err(e) = run().await {
        eprintln!("retrylab: {e}");
        std::process::exit(1);
    }
}

/// Transparent huge pages back the allocator's arenas in 2 MiB pieces, so a page that holds a
/// few live bytes keeps 2 MiB resident: 100 busy watched labs held 203 MiB after ten minutes with
/// them and 174 to 176 MiB without (two runs) (BENCHMARKS.md, "Session 19"). mimalloc is built not to ask for them
/// (its `no_thp` feature); this also turns them off where the kernel gives them unasked
/// (`/sys/kernel/mm/transparent_hugepage/enabled` set to `always`).
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes one integer and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

async fn run() -> std::io::Result<()> {
    // Parsed through `cli::command()`, which writes the code's own lists into the help.
    let mut command = retrylab::cli::command();
    let mut matches = command.clone().get_matches();
    let mut config =
        Config::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| e.format(&mut command).exit());
    if let Some(Command::Check(args)) = &config.command {
        init_logs(config.log_format, "warn");
        std::process::exit(retrylab::cli::check::run(args.clone()).await);
    }
    if let Some(Command::Grade(args)) = &config.command {
        init_logs(config.log_format, "warn");
        raise_open_file_limit();
        std::process::exit(retrylab::cli::grade::run(args.clone()).await);
    }
    if let Some(Command::Export(args)) = &config.command {
        std::process::exit(retrylab::cli::export::run(args));
    }
    if let Some(Command::Compare(args)) = config.command.take() {
        // Its own server's lines would bury the progress: warnings only, unless asked.
        init_logs(config.log_format, "warn");
        raise_open_file_limit();
        // Bad input is a usage error, as clap's own are: exit status 2; a failed run, 1.
        return retrylab::cli::compare::run(args).await.map_err(|failure| {
            eprintln!("retrylab compare: {failure}");
            std::process::exit(failure.exit_status())
        });
    }
    // Settings that contradict each other are a usage error, as clap's own are: exit status 2.
    if let Err(refused) = config.refuse_contradictions() {
        eprintln!("retrylab: {refused}");
        std::process::exit(2);
    }
    init_logs(config.log_format, "info");
    if let Err(refused) = config.refuse_unsafe() {
        eprintln!("retrylab: {refused}");
        std::process::exit(1);
    }
    raise_open_file_limit();
    let address = config.listen_addr();
    let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e} (choose another with --addr)"))
    })?;
    let shown = listener.local_addr()?;
    // The store first: one that cannot be used ends the server before it says it serves.
    let opened = retrylab::server::open_store(&config).await.unwrap_or_else(|e| {
        eprintln!("retrylab: {e}");
        std::process::exit(1)
    });
    let format = config.log_format;
    say(format, &format!("retrylab is serving on http://{shown}/  (Ctrl-C to stop)"));
    retrylab::server::serve_opened(listener, config, opened, shutdown_signal()).await?;
    say(format, "retrylab stopped");
    Ok(())
}

/// Log lines go to stderr: for people as text, coloured only on a terminal; for log
/// collectors as JSON lines, each carrying its span's request id and lab id.
fn init_logs(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().with_current_span(true).with_span_list(false).init(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

/// Tells the person at the terminal, on stdout; in JSON mode, as a JSON log line like the
/// rest. A closed stdout is no reason to fail.
fn say(format: LogFormat, line: &str) {
    if format == LogFormat::Json {
        tracing::info!("{line}");
        return;
    }
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Each delivery in flight holds two sockets (the client's and the endpoint's), and the
/// default soft limit of 1,024 open files runs out long before the lab's limits do: raise the
/// soft limit as far as the hard one allows.
fn raise_open_file_limit() {
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!(error = %e, "could not raise the open-file limit; large bursts may run out of sockets");
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {},
        _ = terminate => {},
    }
}
