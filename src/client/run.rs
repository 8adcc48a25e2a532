//! The run loop: issue requests on schedule (or as concurrency slots free up), hand each to an
//! exchange on a pooled connection, collect records in completion order, report progress, and
//! stop on count, duration (with a drain window) or cancellation. Every request issued ends as
//! exactly one record.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::Pool;
use super::gauges::ServerSeries;
use super::one::{Issue, Shared, one, us};
use super::pace::Pacer;
use super::plausible::ChunkTiming;
use super::progress::{Observer, Ticker, Totals, spawn_collector, spawn_ticker};
use super::record::RequestRecord;
use super::request::BodyTemplate;
use super::schedule::{Arrivals, RampLog, RpsChange};
use super::scraper::Scraper;
use super::selfcheck::{Observed, SelfCheck, assess, cpu_times, current_rss_kib, spawn_probe};
use super::server_metrics::ServerWindow;
use super::session::{issue_sessions, plan, sessions};
use super::target::Target;
use super::{ClientConfig, ClientError};
use crate::dataset::Prompt;
use crate::load::{Endpoint, Limit};

/// Longest time spent opening connections before a run.
const OPEN_AHEAD_WITHIN: Duration = Duration::from_secs(10);

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// One per request issued, in completion order.
    pub records: Vec<RequestRecord>,
    /// Wall-clock time of the run start (offset 0 of every record).
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// From the run start until the last request ended.
    pub elapsed: Duration,
    /// Peak number of requests in flight, counted exactly.
    pub max_in_flight: u64,
    pub self_check: SelfCheck,
    /// The server's own figures over the measured window (warm-up and cool-down excluded, to
    /// the nearest scrape), when its `/metrics` answered.
    pub server_metrics: Option<ServerWindow>,
    /// The servers' gauges over the run, the entry first (empty when the time series is
    /// off or no `/metrics` is scraped).
    pub server_series: Vec<ServerSeries>,
    /// Ramp-up runs: when the ramp reached each whole rate (vLLM's `rps_change_events`).
    pub rps_change_events: Vec<RpsChange>,
}

/// Drive the load described by `config` with `prompts` (reused cyclically when the run is
/// duration-bound or asks for more requests than prompts). Returns when every issued request
/// has ended; cancellation ends in-flight requests as `cancelled`.
pub async fn run(
    config: &ClientConfig,
    prompts: Vec<Prompt>,
    observer: Arc<dyn Observer>,
    cancel: CancellationToken,
) -> Result<RunOutcome, ClientError> {
    if prompts.is_empty() {
        return Err(ClientError::NoPrompts);
    }
    // Conversations: sessions are scheduled and capped; their turns follow each other.
    let sessions = sessions(&prompts).map(Arc::new);
    let with_history = prompts
        .iter()
        .any(|p| p.session.as_ref().is_some_and(|s| !s.standalone));
    if with_history && config.endpoint != Endpoint::Chat {
        return Err(ClientError::ConversationNeedsChat);
    }
    let (target, bodies) = prepare(config, &prompts).await?;
    let (count, duration) = match config.shape.limit {
        Limit::Requests(n) => (Some(n), None),
        Limit::Duration(d) => (None, Some(d)),
    };
    let (arrivals, starts) = arrivals(config, &prompts, sessions.as_ref().map(|s| s.as_slice()));
    if arrivals.immediate() && duration.is_some() && config.shape.max_concurrency.is_none() {
        return Err(ClientError::Unbounded);
    }
    let mut scraper = scraper(config, &target).await;
    // Before the connections are opened: their buffers are per-stream memory.
    let rss0 = current_rss_kib();
    let pool = Pool::default();
    if let (Some(slots), true) = (config.shape.max_concurrency, arrivals.immediate()) {
        // Closed loop: the first wave is known and leaves at once, so its connections are
        // opened before the clock starts. TTFT never holds a handshake anyway; this keeps
        // the handshakes' CPU from delaying the first responses' reads. (Paced runs dial as
        // they go: an idle connection could outlive the server's keep-alive timeout.)
        let n = starts.map_or(slots as u64, |c| c.min(u64::from(slots))) as usize;
        pool.open_ahead(&target, n, OPEN_AHEAD_WITHIN).await;
    }
    let started_at = chrono::Utc::now();
    let t0 = Instant::now();
    let cpu0 = cpu_times();
    let shared = Arc::new(Shared::new(
        config,
        Issue {
            target,
            pool,
            bodies,
            prompts,
        },
        (t0, started_at),
        &cancel,
    ));

    // Records flow to one collector task, which feeds the observer and the progress figures.
    let (tx, rx) = mpsc::unbounded_channel::<RequestRecord>();
    let totals = Arc::new(Totals::default());
    let collector = spawn_collector(rx, observer.clone(), totals.clone());
    let stop_aux = CancellationToken::new();
    let lags = spawn_probe(stop_aux.clone());
    let in_flight = shared.clone();
    let ticker = spawn_ticker(
        Ticker {
            observer,
            totals: totals.clone(),
            t0,
            total: count,
            in_flight: Box::new(move || in_flight.in_flight.load(Ordering::Relaxed)),
        },
        stop_aux.clone(),
    );
    if let Some(s) = scraper.as_mut() {
        s.start(t0, stop_aux.clone());
    }

    let tracker = TaskTracker::new();
    let issued = issue(&shared, (arrivals, sessions), config, &tracker, tx).await;
    tracker.close();
    // Duration-bound: in-flight requests get the drain window, then end as incomplete.
    match (duration, config.drain_timeout) {
        (Some(_), Some(drain)) => {
            if tokio::time::timeout(drain, tracker.wait()).await.is_err() {
                shared.cutoff.cancel();
                tracker.wait().await;
            }
        }
        _ => tracker.wait().await,
    }
    let records = collector.await.unwrap_or_default();
    stop_aux.cancel();
    let _ = ticker.await;
    let run_end_us = records.iter().map(|r| r.end_us).max().unwrap_or(0);
    let (server_metrics, server_series) = match scraper {
        Some(s) => {
            // Without trimming, the scrapes before the first and after the last request.
            let end = (!config.shape.cooldown.is_zero())
                .then(|| run_end_us.saturating_sub(us(config.shape.cooldown)));
            let series = config.timeseries_interval.is_some();
            s.finish(t0, (us(config.shape.warmup), end), series).await
        }
        None => (None, Vec::new()),
    };
    let elapsed = records
        .iter()
        .map(|r| r.end_us)
        .max()
        .map_or(t0.elapsed(), Duration::from_micros);
    let self_check = assess(Observed {
        loop_lags_us: lags.lock().map(|l| l.clone()).unwrap_or_default(),
        reads: &shared.reads,
        output_chunks: records.iter().map(|r| r.chunks.len() as u64).sum(),
        dispatch_lags_us: issued.dispatch_lags_us,
        cpu: cpu_since(cpu0),
        wall: t0.elapsed(),
        output_tokens: totals.output_tokens.load(Ordering::Relaxed),
        rss_start_kib: rss0,
        max_in_flight: shared.max_in_flight.load(Ordering::Relaxed),
        timing: ChunkTiming::of(&records),
    });
    Ok(RunOutcome {
        records,
        started_at,
        elapsed,
        max_in_flight: shared.max_in_flight.load(Ordering::Relaxed),
        self_check,
        server_metrics,
        server_series,
        rps_change_events: issued.ramp.map(RampLog::events).unwrap_or_default(),
    })
}

/// The arrival schedule, and how many arrivals a count-bound run has: requests, or session
/// starts for conversations (as many sessions as the request count needs). A replayed trace
/// brings its own arrival times (of its sessions' first turns); the point's rate does not
/// apply then.
fn arrivals(
    config: &ClientConfig,
    prompts: &[Prompt],
    sessions: Option<&[Vec<usize>]>,
) -> (Arrivals, Option<u64>) {
    let (count, duration) = match config.shape.limit {
        Limit::Requests(n) => (Some(n), None),
        Limit::Duration(d) => (None, Some(d)),
    };
    let starts = match sessions {
        Some(s) => count.map(|n| plan(s, n).len() as u64),
        None => count,
    };
    let at = |p: &Prompt| p.at_us.map(Duration::from_micros);
    let trace: Option<Vec<Duration>> = match sessions {
        Some(s) => s.iter().map(|turns| at(&prompts[turns[0]])).collect(),
        None => prompts.iter().map(at).collect(),
    };
    let arrivals = match trace {
        Some(offsets) => Arrivals::trace(offsets),
        None => Arrivals::new(&config.shape, starts, duration, config.seed),
    };
    (arrivals, starts)
}

/// The servers' scrapes of a run, their first taken (`None`: `/metrics` is not scraped).
async fn scraper(config: &ClientConfig, target: &Target) -> Option<Scraper> {
    let path = config.server_metrics.clone()?;
    let every = config
        .timeseries_interval
        .unwrap_or(crate::load::DEFAULT_TIMESERIES_INTERVAL);
    let entry = (target.origin.clone(), config.base_url.clone());
    Some(Scraper::before(entry, &config.metrics_sources, path, every).await)
}

/// The target resolved once and every prompt's request body.
async fn prepare(
    config: &ClientConfig,
    prompts: &[Prompt],
) -> Result<(Target, Vec<bytes::Bytes>), ClientError> {
    let path = config
        .path
        .clone()
        .unwrap_or_else(|| config.endpoint.path().to_string());
    let target = Target::resolve(
        &config.base_url,
        &path,
        config.api_key.as_deref(),
        config.stall_timeout,
    )
    .await?;
    Ok((target, BodyTemplate::of(config).bodies(prompts)))
}

/// CPU time (user, system) used since `cpu0`.
fn cpu_since(cpu0: (Duration, Duration)) -> (Duration, Duration) {
    let cpu1 = cpu_times();
    (cpu1.0.saturating_sub(cpu0.0), cpu1.1.saturating_sub(cpu0.1))
}

/// What issuing the requests observed.
struct Issued {
    /// How late each paced request left (open loop only).
    dispatch_lags_us: Vec<u64>,
    /// When a ramp reached each whole rate.
    ramp: Option<RampLog>,
}

/// Issue requests as the pacer releases them until the count, the duration or cancellation
/// ends it (conversations: start sessions, `session`); each runs as a task on `tracker` and
/// sends its record on `tx`.
async fn issue(
    shared: &Arc<Shared>,
    schedule: (Arrivals, Option<Arc<Vec<Vec<usize>>>>),
    config: &ClientConfig,
    tracker: &TaskTracker,
    tx: mpsc::UnboundedSender<RequestRecord>,
) -> Issued {
    let (arrivals, sessions) = schedule;
    let mut pacer = Pacer::new(arrivals, &config.shape, shared.t0, &shared.cancel);
    if let Some(s) = sessions {
        pacer = issue_sessions(shared, s, pacer, tracker, tx).await;
        return Issued {
            dispatch_lags_us: pacer.lags_us,
            ramp: pacer.ramp,
        };
    }
    let count = match config.shape.limit {
        Limit::Requests(n) => Some(n),
        Limit::Duration(_) => None,
    };
    let mut index: u64 = 0;
    while count.is_none_or(|n| index < n) {
        let Some(release) = pacer.next().await else {
            break;
        };
        let (shared, tx) = (shared.clone(), tx.clone());
        tracker.spawn(async move {
            let (scheduled, dispatched) = (release.scheduled, release.dispatched);
            let _slot = release.slot().await;
            let record = one(&shared, index, scheduled, dispatched).await;
            let _ = tx.send(record);
        });
        index += 1;
    }
    Issued {
        dispatch_lags_us: pacer.lags_us,
        ramp: pacer.ramp,
    }
}
