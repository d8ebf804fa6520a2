//! Command line and environment settings, including every limit the server enforces.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser};

/// See `Config::commit_delay_ms`.
pub const DEFAULT_COMMIT_DELAY_MS: u64 = 20;

/// See `Config::store_cache_kib`. SQLite's own default is 2,000 KiB for each connection; with
/// 256 KiB, 100 busy watched labs ran as well and the server held about 9 MiB less over ten
/// minutes (BENCHMARKS.md, "Session 24").
pub const DEFAULT_STORE_CACHE_KIB: u64 = 256;

#[derive(Debug, Clone, Parser)]
#[command(name = "retrylab", version, about = "Break an endpoint, send traffic, watch retries work.")]
pub struct Config {
    /// Address to serve on. Without it, `--port` alone serves on 0.0.0.0:PORT (for hosting
    /// platforms), else 127.0.0.1:3000.
    #[arg(long, env = "RETRYLAB_ADDR")]
    pub addr: Option<SocketAddr>,

    /// Port to serve on, on every interface, when `--addr` is not given (hosting platforms
    /// set `PORT`).
    #[arg(long, env = "PORT")]
    pub port: Option<u16>,

    /// This instance's name when several run (each with its own store): it becomes part of
    /// every new lab id, and a request for another instance's lab is answered with
    /// `fly-replay: instance=<owner>` so Fly's proxy replays it there. Defaults to Fly's
    /// `FLY_MACHINE_ID` when Fly sets it; without either, one machine serves every lab.
    #[arg(long, env = "RETRYLAB_INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// How log lines are written to stderr: `text` for people, `json` for log collectors.
    #[arg(long, env = "RETRYLAB_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The SQLite file that holds every lab; created (with its folder) on first run.
    #[arg(long, env = "RETRYLAB_DB", default_value = "data/retrylab.db")]
    pub db: PathBuf,

    /// The most the store's file may grow to, in bytes (0: as far as the disk allows). Past it
    /// writes are refused as on a full disk, and the server says so.
    #[arg(long, env = "RETRYLAB_MAX_DB_BYTES", default_value_t = 0)]
    pub max_db_bytes: u64,

    /// How long the store may hold changes nobody waits for (a delivery's attempts, a repeat's
    /// event) before it commits them, so that more fold into one commit; 0 commits at once. A
    /// change someone waits for (an answer of the endpoint, a burst, a settings change) is
    /// committed at once, whatever this says.
    #[arg(long, env = "RETRYLAB_COMMIT_DELAY_MS", default_value_t = DEFAULT_COMMIT_DELAY_MS)]
    pub commit_delay_ms: u64,

    /// The most each of the store's connections keeps of the file's pages in memory, in KiB
    /// (SQLite's own default is 2,000). A smaller cache reads more pages again from the file
    /// (the operating system's page cache, most often); a commit's changed pages are held
    /// until it is made, past this.
    #[arg(long, env = "RETRYLAB_STORE_CACHE_KIB", default_value_t = DEFAULT_STORE_CACHE_KIB)]
    pub store_cache_kib: u64,

    #[command(flatten)]
    pub limits: Limits,

    #[command(flatten)]
    pub retention: Retention,

    #[command(flatten)]
    pub exposure: Exposure,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What to do instead of serving.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Compares retry policies on one scenario without a browser: starts its own server on a
    /// free loopback port with a temporary store, runs each run's policies together and the
    /// runs one after another, prints the table and the verdict on the scenario's key figure.
    Compare(CompareArgs),
    /// Probes the idempotency and retry contract of an API you own: missing and bad keys, a
    /// replay, another body, copies at once, a retry after a timeout, and `Retry-After`.
    Check(CheckArgs),
    /// Grades a client of yours for CI: starts a lab, runs CMD against its endpoint
    /// (`RETRYLAB_URL`, or `{url}` in its arguments) while the endpoint fails on a schedule,
    /// prints the report card; exits 1 when a check failed.
    Grade(GradeArgs),
    /// Prints a policy as a complete client program for a real retry library (urllib3,
    /// tenacity, stamina, httpx-retries, got, axios-retry, go-retryablehttp): the same waits,
    /// attempts, timeout and `Retry-After` rule, the policy's settings in a comment, what the
    /// library cannot express on stderr. The program reads its endpoint from `RETRYLAB_URL` or
    /// its first argument, so it runs under `retrylab grade` as printed.
    Export(ExportArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// A preset's name (as `compare --policy` takes them), or a policy as JSON: the settings
    /// `PUT /api/labs/{lab}/policy` takes, over a new lab's policy.
    #[arg(long)]
    pub policy: String,
    /// urllib3, tenacity, stamina, httpx-retries, got, axios-retry or go-retryablehttp.
    #[arg(long)]
    pub library: String,
    /// Sets the policy's way with `Retry-After` over what `--policy` says: floor, jitter_above,
    /// exact, exact_including_zero or nominal_floor (`jitter_above` spreads the keys told the
    /// same header past it).
    #[arg(long, value_name = "MODE")]
    pub retry_after_mode: Option<String>,
    /// Prints the JSON `GET /api/policies/export` answers instead of the program.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// outage, overload, throttled, flaky or metastable.
    #[arg(long)]
    pub scenario: String,
    /// Messages each policy sends.
    #[arg(long, default_value_t = 100)]
    pub burst: usize,
    /// A preset or a custom policy as JSON: `{"name": "mine", "policy": {...}}`. Two to five.
    /// (`cli::command` writes the presets in, from static/policy-presets.json.)
    #[arg(long = "policy", required = true)]
    pub policies: Vec<String>,
    /// Makes the comparison a grid of server defences × client policies: each `--defence` is a
    /// row, each `--policy` a column (1 to 3 of each), each cell a lab of its own whose
    /// endpoint has the row's defences. A named defence (none, deadline, codel, adaptive_lifo,
    /// aimd), `NAME=JSON` or `{"name": "...", "defences": {...}}`, the JSON being the
    /// endpoint's `defences` as `PUT /api/labs/{lab}/downstream` takes them. Only overload and
    /// metastable have a line to defend. The grid prints each cell's median [least-most] of
    /// the scenario's key figure (on metastable, goodput after the trigger, and whether the
    /// cell ended the failure); it names no best cell, only each row's verdict among its
    /// policies.
    #[arg(long = "defence")]
    pub defences: Vec<String>,
    /// Seeds every policy's jitter the same way.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Runs each policy this many times, one run after another, each run's policies together
    /// with a seed derived from `--seed`. The verdict on the scenario's key figure is an exact
    /// Mann-Whitney U test over the runs, Holm-corrected over the pairs of policies at alpha
    /// 0.05; by default, the fewest runs with which it can find a difference (4 for two
    /// policies on overload, throttled or metastable; 5 on outage and flaky, which have two
    /// key figures; up to 6 for five policies).
    #[arg(long)]
    pub runs: Option<u32>,
    /// A run whose clock ticks, steps or arrivals ran later than this (p99, ms) is run again
    /// once, and left out of the medians and the verdict if it is late again (both tries are
    /// listed in `invalid_runs`); 1 to 1000, by default 20.
    #[arg(long)]
    pub late_threshold_ms: Option<f64>,
    /// Prints the comparison as one JSON document instead of the table, the same document
    /// `GET /api/comparisons/{id}` sends: `scenario`, `seed`, `runs`, `key_figure` (the
    /// figures judged, in order), `policies` (each with `name`, its full `policy` settings, its
    /// `runs` with each run's `figures`, and `median` and `range` per figure over the valid
    /// runs), `verdict` (`figure`, `best` — empty when there is no verdict —, `test`,
    /// `result`, `runs_needed` and each pair's `tests` with U and p), `same_for_all`,
    /// `lateness_ms_p99`, `invalid_runs` (runs left out for running late) and `columns` (each
    /// run's lab); with `--defence`, also `grid` (`rows` with each defence's settings and
    /// verdict, `policies`, and `cells`, each with its `defence`, `policy`, `median`, `range`,
    /// `ends_failure`, `valid_runs` and `labs`).
    #[arg(long)]
    pub json: bool,
    /// Gives up (and exits non-zero) when the comparison has not finished by then (its runs go
    /// one after another: a metastable run takes about 20 s).
    #[arg(long, default_value_t = 900)]
    pub time_limit_s: u64,
    /// Prints no progress on stderr (errors still go there).
    #[arg(long)]
    pub quiet: bool,
}

/// `retrylab check URL` (`crate::cli::check`).
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The operation to probe, e.g. http://127.0.0.1:8080/orders.
    pub url: String,
    #[arg(long, default_value = r#"{"retrylab_check": {n}}"#, help = body_help())]
    pub body: String,
    /// The method of the operation.
    #[arg(long, default_value = "POST")]
    pub method: String,
    /// How to count the effect: `GET URL` (or just the URL), read before and after the checks
    /// that repeat a request; its JSON answer is a number or a list (counted).
    #[arg(long)]
    pub effect: Option<String>,
    /// A JSON pointer into the effect's answer, e.g. /counters/applied.
    #[arg(long, default_value = "")]
    pub effect_pointer: String,
    /// Prints every request it would send, and sends none.
    #[arg(long)]
    pub dry_run: bool,
    /// The most requests it sends (the effect's reads included); `crate::contract` holds the
    /// same default.
    #[arg(long, default_value_t = 60)]
    pub max_requests: usize,
    /// How long `timeout_retry` waits out an operation still in progress (409) before it judges.
    #[arg(long, default_value_t = 10_000)]
    pub in_progress_wait_ms: u64,
    /// Trusts only the certificates in this PEM file for an https URL (the server's own, or its
    /// CA's), as curl's --cacert.
    #[arg(long)]
    pub cacert: Option<std::path::PathBuf>,
    /// Accepts any certificate for an https URL (a self-signed one), as curl's -k.
    #[arg(long, short = 'k')]
    pub insecure: bool,
    /// A host that is not loopback, allowed to be probed (repeat for several).
    #[arg(long = "allow-host")]
    pub allow_hosts: Vec<String>,
    /// Prints `{"url", "probe", "refused", "checks": [...], "keys", "locations"}` instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also writes the checks as JUnit XML to this file.
    #[arg(long)]
    pub junit: Option<std::path::PathBuf>,
}

/// `check --body`'s help: the request's body, JSON once each `{n}` is replaced with a number
/// unique to the request. clap reads `{n}` in help text as a line break, so the placeholder is
/// written with a style break between `{` and `n}`: bold on a terminal, `{n}` as plain text.
fn body_help() -> clap::builder::StyledStr {
    use std::fmt::Write;
    let literal = clap::builder::styling::Style::new().bold();
    let mut help = clap::builder::StyledStr::new();
    let _ = write!(
        help,
        "The request's body: JSON once each `{literal}{{{literal:#}{literal}n}}{literal:#}` is replaced \
         with a number unique to the request (and to the run), so that each request is a new \
         operation to the API. Without it, the check that needs a second body under one key adds a \
         field \"retrylab_check_variant\" to a JSON object"
    );
    help
}

/// `retrylab grade -- CMD [ARGS...]` (`crate::cli::grade`).
#[derive(Debug, Clone, Args)]
pub struct GradeArgs {
    /// `standard` (down 3 s with no Retry-After, down 1.5 s with Retry-After: 1, down 2.5 s
    /// with Retry-After: 2, slow 1.5 s, then healthy), `healthy`, or a JSON list of phases: each
    /// the endpoint's settings with `ms`, its length (the last lasts until CMD exits).
    #[arg(long, default_value = "standard")]
    pub schedule: String,
    /// Prints the report as `GET /api/labs/{lab}/callers` gives it.
    #[arg(long)]
    pub json: bool,
    /// Also writes the cards as JUnit XML to this file.
    #[arg(long)]
    pub junit: Option<std::path::PathBuf>,
    /// Also fails when a check could not be judged (too few keys retried alike, or waits spread
    /// no more than CMD's own process adds). Without it, such a check is reported and skipped.
    #[arg(long)]
    pub strict: bool,
    /// Stops CMD (and fails) when it runs longer than this.
    #[arg(long, default_value_t = 300)]
    pub time_limit_s: u64,
    /// The command to grade and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// How the server meets the public internet.
#[derive(Debug, Clone, Args)]
pub struct Exposure {
    /// Serve `/metrics` on this separate address instead of the main one. Metrics name labs
    /// by id, and a lab's id is all it takes to open it: without this setting, `/metrics` is
    /// served on the main address only when that is loopback, and not at all otherwise.
    #[arg(long, env = "RETRYLAB_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// A header set by a trusted proxy that holds the client's address (e.g. `Fly-Client-IP`),
    /// for the per-client rate limit. Without it, the connection's peer address is used.
    #[arg(long, env = "RETRYLAB_CLIENT_IP_HEADER")]
    pub client_ip_header: Option<String>,
    /// Milliseconds a connection has to send a request's headers, counted from when it opens
    /// or from the end of its previous answer; then it is closed, so clients that never
    /// finish their headers cannot hold connections open. 0 turns it off.
    #[arg(long, env = "RETRYLAB_HEADER_READ_TIMEOUT_MS", default_value_t = DEFAULT_EXPOSURE.header_read_timeout_ms)]
    pub header_read_timeout_ms: u64,
    /// Most connections one client address (an IPv6 /64) may hold open at once; past it a new
    /// connection is answered 429 and closed. 0 turns it off: behind a proxy every connection
    /// comes from the proxy's address (the proxy then caps clients, as fly.toml's hard_limit does).
    #[arg(long, env = "RETRYLAB_MAX_CONNECTIONS_PER_IP", default_value_t = DEFAULT_EXPOSURE.max_connections_per_ip)]
    pub max_connections_per_ip: usize,
}

const DEFAULT_EXPOSURE: Exposure = Exposure {
    metrics_addr: None,
    client_ip_header: None,
    header_read_timeout_ms: 5_000,
    max_connections_per_ip: 128,
};

impl Default for Exposure {
    fn default() -> Self {
        DEFAULT_EXPOSURE
    }
}

/// Where `/metrics` is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAt {
    /// On the main address, beside the lab: only when that address is loopback.
    MainAddress,
    /// On an address of its own (`--metrics-addr`).
    Own(SocketAddr),
    /// Nowhere: the main address is public and no private one was given.
    Nowhere,
}

impl Exposure {
    /// Where `/metrics` goes when the server listens on `main`: a public address never shows
    /// them unless asked to, on an address of their own.
    pub fn metrics_at(&self, main: SocketAddr) -> MetricsAt {
        match self.metrics_addr {
            Some(own) => MetricsAt::Own(own),
            None if main.ip().is_loopback() => MetricsAt::MainAddress,
            None => MetricsAt::Nowhere,
        }
    }
}

impl Config {
    /// The instance's name as given, lowercased: `--instance-id`, else Fly's machine id, else
    /// none. `domain::Instance::parse` checks it.
    pub fn instance_name(&self) -> Option<String> {
        let name = self.instance_id.clone().or_else(|| std::env::var("FLY_MACHINE_ID").ok());
        name.filter(|n| !n.is_empty()).map(|n| n.to_ascii_lowercase())
    }

    /// Every setting at its default, serving from `db`: for tests, benchmarks and tools that
    /// start a server in-process.
    pub fn new(db: PathBuf) -> Config {
        Config {
            addr: None,
            port: None,
            log_format: LogFormat::Text,
            instance_id: None,
            db,
            max_db_bytes: 0,
            commit_delay_ms: DEFAULT_COMMIT_DELAY_MS,
            store_cache_kib: DEFAULT_STORE_CACHE_KIB,
            limits: Limits::default(),
            retention: Retention::default(),
            exposure: Exposure::default(),
            command: None,
        }
    }

    /// Refuses settings under which the lab would break its own promises, saying why.
    /// The dedup window must outlast the longest a message may still send its key within one
    /// round, with a margin of a tenth (the reference's rule: dedup window >= max retry
    /// duration + margin); the keys of dead letters are kept as long as the dead letters, and
    /// those of messages owed a delivery until they are delivered, whatever the window.
    pub fn refuse_unsafe(&self) -> Result<(), String> {
        let window_ms = self.retention.key_ttl_s.saturating_mul(1000);
        let longest = self.limits.max_retry_duration_ms;
        let needed = longest.saturating_add(longest / 10);
        if window_ms < needed {
            return Err(format!(
                "the dedup window (--key-ttl-s {}) must be at least the longest retry duration \
                 (--max-retry-duration-ms {longest}) plus a tenth, {needed} ms: a retry after the \
                 window would apply its write again. Raise --key-ttl-s or lower --max-retry-duration-ms",
                self.retention.key_ttl_s
            ));
        }
        Ok(())
    }

    /// Refuses settings that contradict each other, naming both and what to do: a settled
    /// window as large as the cap on a lab's messages would fill the lab with delivered
    /// messages (kept for the window) and refuse every new one.
    pub fn refuse_contradictions(&self) -> Result<(), String> {
        let (window, cap) = (self.limits.settled_window, self.limits.max_messages_per_lab);
        if window >= cap {
            return Err(format!(
                "--settled-window {window} keeps at least as many delivered messages as a lab may \
                 hold (--max-messages-per-lab {cap}): the lab would fill with them and refuse new \
                 traffic. Lower --settled-window below --max-messages-per-lab (say {}), or raise \
                 --max-messages-per-lab above {window}",
                cap / 2
            ));
        }
        Ok(())
    }

    pub fn listen_addr(&self) -> SocketAddr {
        if let Some(addr) = self.addr {
            return addr;
        }
        match self.port {
            Some(port) => SocketAddr::from(([0, 0, 0, 0], port)),
            None => SocketAddr::from(([127, 0, 0, 1], 3000)),
        }
    }
}

/// Every limit is named, so an answer that hits one can say which.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Most labs this server holds at once.
    #[arg(long, env = "RETRYLAB_MAX_LABS", default_value_t = DEFAULT_LIMITS.max_labs)]
    pub max_labs: usize,
    /// Most messages one burst may create.
    #[arg(long, env = "RETRYLAB_MAX_BURST", default_value_t = DEFAULT_LIMITS.max_burst)]
    pub max_burst: usize,
    /// Most messages one lab holds before it must be reset.
    #[arg(long, env = "RETRYLAB_MAX_MESSAGES_PER_LAB", default_value_t = DEFAULT_LIMITS.max_messages_per_lab)]
    pub max_messages_per_lab: usize,
    /// Most requests one lab's producer has open to the downstream at once.
    #[arg(long, env = "RETRYLAB_MAX_CONCURRENT_REQUESTS", default_value_t = DEFAULT_LIMITS.max_concurrent_requests)]
    pub max_concurrent_requests: usize,
    /// Most requests all labs' producers have open to the downstream at once.
    #[arg(long, env = "RETRYLAB_MAX_CONCURRENT_REQUESTS_OVERALL", default_value_t = DEFAULT_LIMITS.max_concurrent_requests_overall)]
    pub max_concurrent_requests_overall: usize,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "RETRYLAB_MAX_BODY_BYTES", default_value_t = DEFAULT_LIMITS.max_body_bytes)]
    pub max_body_bytes: usize,
    /// Most messages one lab may have still owed a delivery (queued, in flight or backing off).
    #[arg(long, env = "RETRYLAB_MAX_ACTIVE_MESSAGES_PER_LAB", default_value_t = DEFAULT_LIMITS.max_active_messages_per_lab)]
    pub max_active_messages_per_lab: usize,
    /// Most messages owed a delivery across all labs: a burst past it is refused (503), a
    /// steady-traffic arrival past it is refused at the source and counted.
    #[arg(long, env = "RETRYLAB_MAX_ACTIVE_MESSAGES", default_value_t = DEFAULT_LIMITS.max_active_messages)]
    pub max_active_messages: usize,
    /// Most open event streams per lab (browser tabs watching it).
    #[arg(long, env = "RETRYLAB_MAX_SUBSCRIBERS_PER_LAB", default_value_t = DEFAULT_LIMITS.max_subscribers_per_lab)]
    pub max_subscribers_per_lab: usize,
    /// Most open event streams on the whole server.
    #[arg(long, env = "RETRYLAB_MAX_SUBSCRIBERS", default_value_t = DEFAULT_LIMITS.max_subscribers)]
    pub max_subscribers: usize,
    /// Control requests (creating labs, changing settings, bursts, replays) one client may
    /// make per second, sustained.
    #[arg(long, env = "RETRYLAB_CONTROL_RATE_PER_S", default_value_t = DEFAULT_LIMITS.control_rate_per_s)]
    pub control_rate_per_s: u32,
    /// Control requests one client may make in a quick run before the rate applies.
    #[arg(long, env = "RETRYLAB_CONTROL_BURST", default_value_t = DEFAULT_LIMITS.control_burst)]
    pub control_burst: u32,
    /// Labs one client may create per hour, sustained (opening `/` creates one, a comparison
    /// one per run of each policy): well below
    /// what it would take one address to cycle the whole store through `--max-labs`.
    #[arg(long, env = "RETRYLAB_LAB_CREATES_PER_HOUR", default_value_t = DEFAULT_LIMITS.lab_creates_per_hour)]
    pub lab_creates_per_hour: u32,
    /// Labs one client may create in a quick run before the hourly rate applies: also the most
    /// labs one comparison may have. Room for a person exploring (a dozen page opens and five
    /// default comparisons of ten labs each) while a loop from one address is still held to the
    /// hourly rate, so that cycling `--max-labs` would take it over half a day.
    #[arg(long, env = "RETRYLAB_LAB_CREATE_BURST", default_value_t = DEFAULT_LIMITS.lab_create_burst)]
    pub lab_create_burst: u32,
    /// Bytes of snapshots (`GET /api/labs/{lab}`, and an event stream that starts from one) one
    /// client may read per second, sustained; then 429.
    #[arg(long, env = "RETRYLAB_SNAPSHOT_BYTES_PER_S", default_value_t = DEFAULT_LIMITS.snapshot_bytes_per_s)]
    pub snapshot_bytes_per_s: u64,
    /// Bytes of snapshots one client may read in a quick run before the rate applies.
    #[arg(long, env = "RETRYLAB_SNAPSHOT_BURST_BYTES", default_value_t = DEFAULT_LIMITS.snapshot_burst_bytes)]
    pub snapshot_burst_bytes: u64,
    /// Bytes of snapshots the server builds at once, for every client together; past it a
    /// read is answered 429, so big labs read many times over cannot slow the other labs.
    #[arg(long, env = "RETRYLAB_MAX_SNAPSHOT_BYTES_BUILDING", default_value_t = DEFAULT_LIMITS.max_snapshot_bytes_building)]
    pub max_snapshot_bytes_building: u64,
    /// Events kept per lab so a reconnecting page can resume without a snapshot.
    #[arg(long, env = "RETRYLAB_EVENT_WINDOW", default_value_t = DEFAULT_LIMITS.event_window)]
    pub event_window: usize,
    /// Bytes of events kept per lab, for resumes and for the open streams that read them: the
    /// newest counted as sent with their overhead, the older at their deflated size; the
    /// oldest go first past it. The whole cost of a lab's
    /// events, however many pages watch; a stream that has not read what left gets a snapshot.
    #[arg(long, env = "RETRYLAB_EVENT_WINDOW_BYTES", default_value_t = DEFAULT_LIMITS.event_window_bytes)]
    pub event_window_bytes: usize,
    /// Requests per second one outside client may send to a lab's endpoint, sustained (the
    /// lab's own client is never limited by this).
    #[arg(long, env = "RETRYLAB_ENDPOINT_RATE_PER_S", default_value_t = DEFAULT_LIMITS.endpoint_rate_per_s)]
    pub endpoint_rate_per_s: u32,
    /// Requests one outside client may send to the endpoint in a quick run before the rate applies.
    #[arg(long, env = "RETRYLAB_ENDPOINT_BURST", default_value_t = DEFAULT_LIMITS.endpoint_burst)]
    pub endpoint_burst: u32,
    /// Idempotency keys one lab keeps for outside callers (each a digest and a stored answer).
    #[arg(long, env = "RETRYLAB_MAX_OUTSIDE_KEYS_PER_LAB", default_value_t = DEFAULT_LIMITS.max_outside_keys_per_lab)]
    pub max_outside_keys_per_lab: usize,
    /// Idempotency keys all labs together keep for outside callers.
    #[arg(long, env = "RETRYLAB_MAX_OUTSIDE_KEYS", default_value_t = DEFAULT_LIMITS.max_outside_keys)]
    pub max_outside_keys: usize,
    /// Outside callers one lab tells apart (by X-Client-Name, User-Agent or address); the
    /// requests of callers past it are answered but not kept, and counted. At most 65,536
    /// whatever it says (`callers::MAX_CALLERS`).
    #[arg(long, env = "RETRYLAB_MAX_CALLERS_PER_LAB", default_value_t = DEFAULT_LIMITS.max_callers_per_lab)]
    pub max_callers_per_lab: usize,
    /// Requests kept per outside caller's key; later ones are answered and counted, not kept.
    #[arg(long, env = "RETRYLAB_MAX_OUTSIDE_ATTEMPTS_PER_KEY", default_value_t = DEFAULT_LIMITS.max_outside_attempts_per_key)]
    pub max_outside_attempts_per_key: usize,
    /// Applied idempotency keys one lab holds whole in memory: those most recently applied or
    /// read back. Others are held as a 24-byte fingerprint, and a repeat of one reads its
    /// answer from the store.
    #[arg(long, env = "RETRYLAB_HOT_KEYS_PER_LAB", default_value_t = DEFAULT_LIMITS.hot_keys_per_lab)]
    pub hot_keys_per_lab: usize,
    /// Applied idempotency keys one lab holds by fingerprint, past its hot ones (about 40 bytes
    /// each): past this, the oldest are let go from memory, a quarter at a time, and from then
    /// on a key the lab does not hold is looked up in the store by name before it counts as new
    /// (the dedup window holds all the same). Keys of messages still owed a delivery, and of
    /// dead letters, are never let go. A lab's key rows are indexed by name only from the
    /// commit before its first key goes. `/metrics` counts the keys let go.
    #[arg(long, env = "RETRYLAB_COLD_KEYS_PER_LAB", default_value_t = DEFAULT_LIMITS.cold_keys_per_lab)]
    pub cold_keys_per_lab: usize,
    /// The longest one round of a message's delivery may last, in milliseconds: no attempt
    /// starts later than this after the round's first (a policy's `max_total_ms` may end it
    /// sooner). The dedup window (`--key-ttl-s`) must cover it with a margin.
    #[arg(long, env = "RETRYLAB_MAX_RETRY_DURATION_MS", default_value_t = DEFAULT_LIMITS.max_retry_duration_ms)]
    pub max_retry_duration_ms: u64,
    /// Events a subscriber may fall behind before it is sent a fresh snapshot instead.
    #[arg(long, env = "RETRYLAB_SUBSCRIBER_LAG", default_value_t = DEFAULT_LIMITS.subscriber_lag)]
    pub subscriber_lag: usize,
    /// The fastest a redrive may replay dead letters, per second.
    #[arg(long, env = "RETRYLAB_MAX_REDRIVE_RATE_PER_S", default_value_t = DEFAULT_LIMITS.max_redrive_rate_per_s)]
    pub max_redrive_rate_per_s: u32,
    /// Delivered messages a lab keeps, the newest: older ones leave memory and the store (they
    /// stay counted in `delivered` and the load chart), so steady traffic can run for hours.
    /// Dead letters are kept whatever this says, until replayed or past their TTL. Must be
    /// below --max-messages-per-lab.
    #[arg(long, env = "RETRYLAB_SETTLED_WINDOW", default_value_t = DEFAULT_LIMITS.settled_window)]
    pub settled_window: usize,
    /// The highest rate of steady traffic a lab may be given, new messages per second.
    #[arg(long, env = "RETRYLAB_MAX_TRAFFIC_RATE_PER_S", default_value_t = DEFAULT_LIMITS.max_traffic_rate_per_s)]
    pub max_traffic_rate_per_s: f64,
    /// The most clients one lab's policy may run at once (`clients`), each with its own
    /// breaker, retry budget and jitter stream.
    #[arg(long, env = "RETRYLAB_MAX_CLIENTS", default_value_t = DEFAULT_LIMITS.max_clients)]
    pub max_clients: u32,
    /// The most runs of each policy one comparison may ask for (`runs`, `--runs`).
    #[arg(long, env = "RETRYLAB_MAX_COMPARE_RUNS", default_value_t = DEFAULT_LIMITS.max_compare_runs)]
    pub max_compare_runs: u32,
    /// The longest steady traffic may be set to run for (`for_ms`), in milliseconds.
    #[arg(long, env = "RETRYLAB_MAX_TRAFFIC_FOR_MS", default_value_t = DEFAULT_LIMITS.max_traffic_for_ms)]
    pub max_traffic_for_ms: u64,
}

/// The defaults, in one place for the command line and for tests.
const DEFAULT_LIMITS: Limits = Limits {
    max_labs: 1_000,
    max_burst: 2_000,
    max_messages_per_lab: 20_000,
    max_concurrent_requests: 64,
    max_concurrent_requests_overall: 512,
    max_body_bytes: 64 * 1024,
    max_active_messages_per_lab: 5_000,
    max_active_messages: 50_000,
    max_subscribers_per_lab: 20,
    max_subscribers: 2_000,
    control_rate_per_s: 20,
    control_burst: 100,
    lab_creates_per_hour: 60,
    snapshot_bytes_per_s: 16 * 1024 * 1024,
    snapshot_burst_bytes: 64 * 1024 * 1024,
    max_snapshot_bytes_building: 32 * 1024 * 1024,
    lab_create_burst: 64,
    event_window: 10_000,
    event_window_bytes: 128 * 1024,
    subscriber_lag: 8_192,
    endpoint_rate_per_s: 50,
    endpoint_burst: 200,
    max_outside_keys_per_lab: 2_000,
    max_outside_keys: 100_000,
    max_callers_per_lab: 20,
    max_outside_attempts_per_key: 100,
    // Sized to the hash maps' own steps: a map holds up to 7/8 of a power of two. The whole
    // keys cool once they are a quarter over the hot ones (800 of the 896 that 1,024 slots of
    // about 100 bytes hold, leaving 96 for keys that come between two flushes); the
    // fingerprints are let go past the cold ones, after a cooling of at least 161 keys (1,697
    // of 1,792 in 2,048 slots of 25 bytes). At 1,024 and 3,072 each map took twice the slots.
    hot_keys_per_lab: 640,
    cold_keys_per_lab: 1_536,
    max_redrive_rate_per_s: 500,
    max_retry_duration_ms: 60 * 60 * 1000,
    settled_window: 2_000,
    max_traffic_rate_per_s: 5_000.0,
    max_traffic_for_ms: 60 * 60 * 1000,
    max_clients: 1_000,
    max_compare_runs: 10,
};

impl Default for Limits {
    fn default() -> Self {
        DEFAULT_LIMITS
    }
}

/// How long things are kept. Each window is shown on the page.
#[derive(Debug, Clone, Args)]
pub struct Retention {
    /// The dedup window: an applied idempotency key is remembered this long, in seconds.
    #[arg(long, env = "RETRYLAB_KEY_TTL_S", default_value_t = DEFAULT_RETENTION.key_ttl_s)]
    pub key_ttl_s: u64,
    /// Dead letters are kept this long for a person to look at and replay, in seconds.
    #[arg(long, env = "RETRYLAB_DEAD_LETTER_TTL_S", default_value_t = DEFAULT_RETENTION.dead_letter_ttl_s)]
    pub dead_letter_ttl_s: u64,
    /// A lab nobody has touched for this long is deleted, in seconds.
    #[arg(long, env = "RETRYLAB_IDLE_LAB_TTL_S", default_value_t = DEFAULT_RETENTION.idle_lab_ttl_s)]
    pub idle_lab_ttl_s: u64,
    /// How often the retention windows are applied, in milliseconds.
    #[arg(long, env = "RETRYLAB_SWEEP_INTERVAL_MS", default_value_t = DEFAULT_RETENTION.sweep_interval_ms)]
    pub sweep_interval_ms: u64,
    /// A lab no page watches lets go of its window of recent events (kept for resumes) once it
    /// has published nothing for this long, in milliseconds, or once its last page left (or
    /// read its snapshot) this long ago, busy or not; the latter keeps no events until a page
    /// reads its snapshot or subscribes. A page that comes back later starts from a snapshot.
    #[arg(long, env = "RETRYLAB_IDLE_EVENT_WINDOW_MS", default_value_t = DEFAULT_RETENTION.idle_event_window_ms)]
    pub idle_event_window_ms: u64,
    /// A lab no page watches, that owes no delivery, runs no traffic, holds no dead letters and
    /// has been idle this long, in milliseconds, leaves memory for the store (it rests): the
    /// next request to it reads it back. 0 keeps every lab in memory.
    #[arg(long, env = "RETRYLAB_IDLE_LAB_REST_MS", default_value_t = DEFAULT_RETENTION.idle_lab_rest_ms)]
    pub idle_lab_rest_ms: u64,
}

const DAY_S: u64 = 24 * 60 * 60;

const DEFAULT_RETENTION: Retention = Retention {
    key_ttl_s: DAY_S,
    dead_letter_ttl_s: 14 * DAY_S,
    idle_lab_ttl_s: 7 * DAY_S,
    sweep_interval_ms: 60_000,
    idle_event_window_ms: 60_000,
    idle_lab_rest_ms: 300_000,
};

impl Default for Retention {
    fn default() -> Self {
        DEFAULT_RETENTION
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dedup_window_shorter_than_a_retry_is_refused() {
        let mut config = Config::new("x.db".into());
        assert_eq!(config.refuse_unsafe(), Ok(()), "the defaults hold");
        config.retention.key_ttl_s = 3;
        let refused = config.refuse_unsafe().unwrap_err();
        assert!(
            refused.contains("--key-ttl-s 3") && refused.contains("--max-retry-duration-ms"),
            "{refused}"
        );
        config.limits.max_retry_duration_ms = 2_700;
        assert_eq!(config.refuse_unsafe(), Ok(()));
    }

    #[test]
    fn a_settled_window_that_fills_the_lab_is_refused() {
        let mut config = Config::new("x.db".into());
        assert_eq!(config.refuse_contradictions(), Ok(()), "the defaults hold");
        config.limits.max_messages_per_lab = 300;
        let refused = config.refuse_contradictions().unwrap_err();
        assert!(
            refused.contains("--settled-window 2000") && refused.contains("--max-messages-per-lab 300"),
            "{refused}"
        );
        config.limits.settled_window = 150;
        assert_eq!(config.refuse_contradictions(), Ok(()));
    }

    #[test]
    fn metrics_stay_off_a_public_address_unless_given_their_own() {
        let none = Exposure::default();
        let at = |addr: &str| none.metrics_at(addr.parse().unwrap());
        assert_eq!(at("127.0.0.1:3000"), MetricsAt::MainAddress);
        assert_eq!(at("[::1]:3000"), MetricsAt::MainAddress);
        assert_eq!(at("0.0.0.0:8080"), MetricsAt::Nowhere, "the --port / PORT path");
        assert_eq!(at("[::]:8080"), MetricsAt::Nowhere);
        assert_eq!(at("192.0.2.10:8080"), MetricsAt::Nowhere);
        let own: SocketAddr = "127.0.0.1:9091".parse().unwrap();
        let private = Exposure { metrics_addr: Some(own), ..Default::default() };
        assert_eq!(private.metrics_at("0.0.0.0:8080".parse().unwrap()), MetricsAt::Own(own));
        assert_eq!(private.metrics_at("127.0.0.1:3000".parse().unwrap()), MetricsAt::Own(own));
    }
}
