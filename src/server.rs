//! The composition root: opens the store, builds the labs, the client and the routes, resumes
//! what the last process left unfinished, binds, runs the background loops (retention, load)
//! and serves until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::compare::Comparisons;
use crate::config::{Config, MetricsAt};
use crate::domain::{Instance, MarkerKind};
use crate::lab::{Labs, unix_now_ms};
use crate::metrics::Metrics;
use crate::producer::Producer;
use crate::store::{LoadedLab, Store, StoreError, StoreSettings};
use crate::web::{self, App, AppState, ConnectionLimits};

/// How long open requests may run on after a shutdown signal before they are cut off, so the
/// whole shutdown stays within 5 s.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Serves retrylab on `listener` until `shutdown` completes: opens the store, resumes what the
/// last process left unfinished, serves, and on shutdown stops the deliveries, lets open
/// requests finish (up to a grace period) and commits everything before returning.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    config.refuse_contradictions().map_err(std::io::Error::other)?;
    config.refuse_unsafe().map_err(std::io::Error::other)?;
    let opened = open_store(&config).await.map_err(std::io::Error::other)?;
    serve_opened(listener, config, opened, shutdown).await
}

/// The store as `open_store` found it: open, its writer running, every lab read back.
pub struct OpenedStore {
    store: Store,
    loaded: Vec<LoadedLab>,
}

/// Opens the store named by `config` (creating it if needed) and reads every lab back: done
/// before the server says it is serving, so a store that cannot be used stops it at once.
pub async fn open_store(config: &Config) -> Result<OpenedStore, StoreError> {
    let db = config.db.clone();
    let settings = StoreSettings {
        max_bytes: config.max_db_bytes,
        commit_delay: std::time::Duration::from_millis(config.commit_delay_ms),
        cache_kib: config.store_cache_kib,
    };
    let (store, loaded) = tokio::task::spawn_blocking(move || Store::open(&db, settings))
        .await
        .map_err(|e| StoreError::Failed(e.to_string()))??;
    Ok(OpenedStore { store, loaded })
}

/// Serves with a store `open_store` opened (see `serve`).
pub async fn serve_opened(
    listener: TcpListener,
    config: Config,
    OpenedStore { store, loaded }: OpenedStore,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    // The producer calls the lab's own downstream route through a loopback listener of its own,
    // so its hundreds of connections do not count against the per-client cap of the public one.
    let internal = bind_loopback().await?;
    let metrics = Arc::new(Metrics::default());
    let slots = config.limits.max_concurrent_requests_overall;
    let producer = Producer::new(self_url(internal.local_addr()?), metrics.clone(), slots)
        .map_err(std::io::Error::other)?;
    let mut labs = Labs::new(config.limits.clone(), config.retention.clone(), store.clone(), loaded);
    labs.instance =
        config.instance_name().map(|n| Instance::parse(&n)).transpose().map_err(std::io::Error::other)?;
    let reader = store.clone();
    let comparisons = tokio::task::spawn_blocking(move || reader.load_comparisons())
        .await
        .map_err(std::io::Error::other)?
        .map_err(std::io::Error::other)?;
    // Before any delivery resumes: a run cut short is told from one that had finished.
    let comparisons = Comparisons::restore(comparisons, &labs, &store).await;
    let (stop, stopped) = watch::channel(false);
    let app = Arc::new(App {
        labs,
        comparisons,
        producer,
        store: store.clone(),
        metrics,
        rate_limiter: web::RateLimiter::new(
            config.limits.control_rate_per_s,
            config.limits.control_burst,
            config.exposure.client_ip_header.clone(),
        ),
        endpoint_limiter: web::RateLimiter::new(
            config.limits.endpoint_rate_per_s,
            config.limits.endpoint_burst,
            config.exposure.client_ip_header.clone(),
        ),
        create_limiter: web::RateLimiter::per_hour(
            config.limits.lab_creates_per_hour,
            config.limits.lab_create_burst,
            config.exposure.client_ip_header.clone(),
        ),
        snapshot_gate: web::SnapshotGate::new(&config.limits, config.exposure.client_ip_header.clone()),
        limits: config.limits,
        retention: config.retention,
        shutdown: stopped.clone(),
    });
    for lab in app.labs.all() {
        lab.mark(MarkerKind::Restart, "server restarted");
        lab.breaker_restarted();
        if let Some(revert) = lab.pending_revert() {
            lab.schedule_revert(revert);
        }
        let resumed = app.producer.resume(&lab, "restart");
        if resumed > 0 {
            tracing::info!(lab = %lab.id, resumed, "resumed deliveries after a restart");
        }
        // Steady traffic goes on at its rate; one whose time ran out while down ends now.
        if let Some(traffic) = lab.traffic() {
            match traffic.until_ms {
                Some(until) if until <= lab.now_ms() => lab.traffic_ended(traffic),
                _ => app.producer.drive_traffic(&lab),
            }
        }
    }
    tokio::spawn(apply_retention(app.clone()));
    tokio::spawn(publish_load(app.clone()));

    let metrics_at = config.exposure.metrics_at(address);
    match metrics_at {
        MetricsAt::Own(metrics_addr) => {
            let metrics_listener = TcpListener::bind(metrics_addr).await?;
            let router = web::metrics_router(AppState(app.clone()));
            tokio::spawn(async move { axum::serve(metrics_listener, router).await });
        }
        MetricsAt::Nowhere => tracing::warn!(
            %address,
            "not serving /metrics: this address is public and metrics name every lab; \
             give them a private address with --metrics-addr (e.g. 127.0.0.1:9091)"
        ),
        MetricsAt::MainAddress => {}
    }
    let router = web::router(AppState(app.clone()), metrics_at == MetricsAt::MainAddress);
    let exposure = &config.exposure;
    let public = ConnectionLimits {
        header_read_timeout: Some(Duration::from_millis(exposure.header_read_timeout_ms))
            .filter(|timeout| !timeout.is_zero()),
        max_per_ip: Some(exposure.max_connections_per_ip).filter(|&max| max > 0),
    };
    let server = async {
        tokio::try_join!(
            web::serve_connections(listener, router.clone(), public, stopped.clone()),
            web::serve_connections(
                internal,
                router.layer(axum::Extension(web::InternalCaller)),
                // The producer is the only peer here. Cutting its idle keep-alive connections
                // would race its reuse of them: a retry sent on one as it closes would fail
                // with a transport error the endpoint never saw.
                ConnectionLimits { max_per_ip: None, header_read_timeout: None },
                stopped
            ),
        )
    };
    tokio::select! {
        served = server => { served?; }
        () = async {
            shutdown.await;
            stop_deliveries(&app.labs);
            // Ends the event streams too, which would otherwise hold the shutdown open.
            let _ = stop.send(true);
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!("open requests outlived the shutdown grace period; cutting them off"),
    }
    stop_deliveries(&app.labs);
    // The load bins changed since the last periodic `load` event go with the last commit too.
    for lab in app.labs.all() {
        lab.publish_load();
    }
    tokio::task::spawn_blocking(move || store.close()).await.map_err(std::io::Error::other)?;
    Ok(())
}

/// Stops every delivery where it stands; what was recorded resumes on the next start.
fn stop_deliveries(labs: &Labs) {
    for lab in labs.all() {
        lab.stop_traffic_task();
        lab.abort_deliveries();
    }
}

/// Applies the retention windows now and then: idempotency keys, dead letters, the event
/// windows of labs no one watches, idle labs (deleted, or at rest in the store).
async fn apply_retention(app: Arc<App>) {
    let mut ticks = tokio::time::interval(Duration::from_millis(app.retention.sweep_interval_ms.max(10)));
    loop {
        ticks.tick().await;
        let now = unix_now_ms();
        for lab in app.labs.all() {
            lab.expire(now);
            lab.rest_event_window(now);
        }
        let purged = app.labs.purge_idle(now);
        if purged > 0 {
            tracing::info!(purged, "deleted idle labs");
        }
        let rested = app.labs.rest_idle(now);
        if rested > 0 {
            tracing::debug!(rested, "idle labs left memory for the store");
        }
    }
}

/// How often the load measured at each downstream goes out to the pages.
const LOAD_EVERY: Duration = Duration::from_millis(250);

/// Sends each lab's changed load bins as one event now and then, rather than one per request.
async fn publish_load(app: Arc<App>) {
    use tokio_stream::StreamExt;
    let mut ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(LOAD_EVERY));
    while ticks.next().await.is_some() {
        for lab in app.labs.all() {
            lab.publish_load();
        }
    }
}

/// A listener for the producer alone, on IPv4 loopback or, failing that, IPv6's.
async fn bind_loopback() -> std::io::Result<TcpListener> {
    match TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
        Ok(listener) => Ok(listener),
        Err(_) => TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0))).await,
    }
}

/// How the producer reaches this server's own downstream route: over loopback when the server
/// listens on every interface.
fn self_url(address: SocketAddr) -> String {
    let host = match address.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    format!("http://{host}:{}", address.port())
}
