//! The retrylab server: reads its settings, binds, serves until SIGINT or SIGTERM.

use clap::Parser;
use retrylab::config::Config;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // JSON lines for log collectors; each line carries its span's request id and lab id.
    match std::env::var("RETRYLAB_LOG_FORMAT").as_deref() {
        Ok("json") => logs.json().with_current_span(true).with_span_list(false).init(),
        _ => logs.init(),
    }
    let config = Config::parse();
    raise_open_file_limit();
    let address = config.listen_addr();
    let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e} (choose another with --addr)"))
    })?;
    let shown = listener.local_addr()?;
    say(&format!("retrylab is serving on http://{shown}/  (Ctrl-C to stop)"));
    retrylab::serve(listener, config, shutdown_signal()).await?;
    say("retrylab stopped");
    Ok(())
}

/// Prints a line for the person at the terminal; a closed stdout is no reason to fail.
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Each delivery in flight holds two sockets (the client's and the endpoint's), and the
/// default soft limit of 1,024 open files runs out long before the lab's limits do: raise the
/// soft limit to the hard one.
fn raise_open_file_limit() {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit and setrlimit only read and write the struct we pass.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = limit.rlim_max;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    tracing::warn!(
                        "could not raise the open-file limit; large bursts may run out of sockets"
                    );
                }
            }
        }
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
