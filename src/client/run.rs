//! The run loop: issue requests on schedule (or as concurrency slots free up), hand each to an
//! exchange on a pooled connection, collect records in completion order, report progress, and
//! stop on count, duration (with a drain window) or cancellation. Every request issued ends as
//! exactly one record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::Pool;
use super::exchange::{Ask, Deadlines, Watch, exchange};
use super::gauges::ServerSeries;
use super::plausible::ChunkTiming;
use super::progress::{Observer, Ticker, Totals, spawn_collector, spawn_ticker};
use super::record::{ChunkTokens, RequestOutcome, RequestRecord, Usage};
use super::request::BodyTemplate;
use super::schedule::{Arrivals, RampLog, RpsChange};
use super::scraper::Scraper;
use super::selfcheck::{
    Observed, ReadDelays, SelfCheck, assess, cpu_times, current_rss_kib, spawn_probe,
};
use super::server_metrics::ServerWindow;
use super::sse::unescape;
use super::target::Target;
use super::{ClientConfig, ClientError};
use crate::dataset::Prompt;
use crate::load::Limit;

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

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

struct Shared {
    target: Target,
    pool: Pool,
    bodies: Vec<bytes::Bytes>,
    prompts: Vec<Prompt>,
    deadlines: Deadlines,
    t0: Instant,
    cancel: CancellationToken,
    cutoff: CancellationToken,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    reads: ReadDelays,
    check_every: u64,
    /// Keep every answer's text in its record (`--save-detailed`'s `generated_texts`).
    keep_texts: bool,
    /// Prefix of every `X-Request-Id` (`<run_tag>-<index>`).
    run_tag: String,
    tokenizer: Option<Arc<tokenizers::Tokenizer>>,
}

/// Where and what a run sends.
struct Issue {
    target: Target,
    pool: Pool,
    bodies: Vec<bytes::Bytes>,
    prompts: Vec<Prompt>,
}

impl Shared {
    /// What every request task reads, from the config; `started` is the run start (monotonic
    /// and wall clock).
    fn new(
        config: &ClientConfig,
        issue: Issue,
        started: (Instant, chrono::DateTime<chrono::Utc>),
        cancel: &CancellationToken,
    ) -> Self {
        let Issue {
            target,
            pool,
            bodies,
            prompts,
        } = issue;
        Shared {
            target,
            pool,
            bodies,
            prompts,
            deadlines: Deadlines {
                first_token: config.ttft_timeout,
                total: config.request_timeout,
            },
            t0: started.0,
            cutoff: cancel.child_token(),
            cancel: cancel.clone(),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            reads: ReadDelays::default(),
            run_tag: format!("orc{:x}", started.1.timestamp_micros()),
            check_every: config
                .output_check
                .as_ref()
                .map_or(0, |c| u64::from(c.every.max(1))),
            tokenizer: config.output_check.as_ref().map(|c| c.tokenizer.clone()),
            keep_texts: config.keep_texts,
        }
    }
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
    let (target, bodies) = prepare(config, &prompts).await?;
    let (count, duration) = match config.shape.limit {
        Limit::Requests(n) => (Some(n), None),
        Limit::Duration(d) => (None, Some(d)),
    };
    // A replayed trace brings its own arrival times; the point's rate does not apply.
    let trace: Option<Vec<Duration>> = prompts
        .iter()
        .map(|p| p.at_us.map(Duration::from_micros))
        .collect();
    let arrivals = match trace {
        Some(offsets) => Arrivals::trace(offsets),
        None => Arrivals::new(&config.shape, count, duration, config.seed),
    };
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
        let n = count.map_or(slots as u64, |c| c.min(u64::from(slots))) as usize;
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
    let issued = issue(&shared, arrivals, config, &tracker, tx).await;
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
    let template = BodyTemplate {
        backend: config.backend,
        endpoint: config.endpoint,
        model: &config.model,
        ignore_eos: config.ignore_eos,
        extra_body: &config.extra_body,
    };
    Ok((target, template.bodies(prompts)))
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

/// Issue requests on schedule (or as concurrency slots free up) until the count, the duration
/// or cancellation ends it; each runs as a task on `tracker` and sends its record on `tx`.
async fn issue(
    shared: &Arc<Shared>,
    mut arrivals: Arrivals,
    config: &ClientConfig,
    tracker: &TaskTracker,
    tx: mpsc::UnboundedSender<RequestRecord>,
) -> Issued {
    let (t0, cancel) = (shared.t0, &shared.cancel);
    let (count, duration) = match config.shape.limit {
        Limit::Requests(n) => (Some(n), None),
        Limit::Duration(d) => (None, Some(d)),
    };
    let semaphore = config
        .shape
        .max_concurrency
        .map(|c| Arc::new(Semaphore::new(c.max(1) as usize)));
    let mut dispatch_lags_us = Vec::new();
    let closed_loop = arrivals.immediate();
    let issue_until = duration.map(|d| t0 + d);
    let mut index: u64 = 0;
    let mut ramp = config
        .shape
        .ramp_up
        .as_ref()
        .map(|r| RampLog::new(r.start_rps));
    loop {
        if count.is_some_and(|n| index >= n) || cancel.is_cancelled() {
            break;
        }
        let Some(at) = arrivals.next_at() else { break };
        if duration.is_some_and(|d| at >= d) {
            break;
        }
        let ramp_rps = arrivals.current_rps();
        let due = t0 + at;
        if !closed_loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep_until(due.into()) => {}
            }
        }
        let dispatched = Instant::now();
        if let (Some(log), Some(rps)) = (ramp.as_mut(), ramp_rps) {
            log.observe(rps, us(dispatched.saturating_duration_since(t0)));
        }
        // Closed loop: wait for a slot here so requests are not created ahead of their slot.
        let permit = match (&semaphore, closed_loop) {
            (Some(sem), true) => {
                let until = issue_until.unwrap_or(t0 + Duration::from_secs(86_400 * 365));
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep_until(until.into()) => break,
                    p = sem.clone().acquire_owned() => match p { Ok(p) => Some(p), Err(_) => break },
                }
            }
            _ => None,
        };
        if cancel.is_cancelled() || issue_until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
        if !closed_loop {
            dispatch_lags_us.push(us(dispatched.saturating_duration_since(due)));
        }
        let scheduled = if closed_loop { dispatched } else { due };
        let (shared, tx, semaphore) = (shared.clone(), tx.clone(), semaphore.clone());
        tracker.spawn(async move {
            let _permit = match (permit, semaphore) {
                (Some(p), _) => Some(p),
                (None, Some(sem)) => sem.acquire_owned().await.ok(),
                (None, None) => None,
            };
            let record = one(&shared, index, scheduled, dispatched).await;
            let _ = tx.send(record);
        });
        index += 1;
    }
    Issued {
        dispatch_lags_us,
        ramp,
    }
}

/// Issue one request and build its record.
async fn one(
    shared: &Shared,
    index: u64,
    scheduled: Instant,
    dispatched: Instant,
) -> RequestRecord {
    let n = shared.prompts.len() as u64;
    let prompt_index = (index % n) as usize;
    let prompt = &shared.prompts[prompt_index];
    let base = |sent: Instant, end: Instant, outcome: RequestOutcome| RequestRecord {
        index,
        prompt_index: prompt_index as u32,
        scheduled_us: us(scheduled.saturating_duration_since(shared.t0)),
        dispatched_us: us(dispatched.saturating_duration_since(shared.t0)),
        sent_us: us(sent.saturating_duration_since(shared.t0)),
        headers_us: None,
        prompt_len: prompt.prompt_len,
        output_len: prompt.output_len,
        usage: Usage::default(),
        tokenizer_output_tokens: None,
        generated_text: None,
        chunk_tokens: ChunkTokens::AssumedOne,
        chunks: Vec::new(),
        first_content_us: None,
        end_us: us(end.saturating_duration_since(shared.t0)),
        outcome,
    };
    let now = shared.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::Relaxed);
    let conn_start = Instant::now();
    let conn = tokio::select! {
        biased;
        _ = shared.cancel.cancelled() => Err(RequestOutcome::Cancelled),
        _ = shared.cutoff.cancelled() => Err(RequestOutcome::Incomplete),
        c = shared.pool.get(&shared.target) => c.map_err(|e| e.outcome()),
    };
    let (conn, fresh) = match conn {
        Ok(c) => c,
        Err(outcome) => {
            shared.in_flight.fetch_sub(1, Ordering::Relaxed);
            return base(conn_start, Instant::now(), outcome);
        }
    };
    let check = shared.check_every > 0 && index.is_multiple_of(shared.check_every);
    let keep_text = check || shared.keep_texts;
    let ask = Ask {
        body: shared.bodies[prompt_index].clone(),
        request_id: format!("{}-{index}", shared.run_tag),
        expect_chunks: (prompt.output_len as usize + 1).min(1 << 16),
    };
    let ex = exchange(
        conn,
        fresh,
        &shared.target,
        ask,
        shared.deadlines,
        keep_text,
        Watch {
            cancel: &shared.cancel,
            cutoff: &shared.cutoff,
            reads: &shared.reads,
        },
    )
    .await;
    shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    if let Some(conn) = ex.conn {
        shared.pool.put(conn);
    }
    let mut record = base(ex.sent, ex.end, ex.outcome);
    record.headers_us = ex.headers_us;
    record.usage = ex.usage;
    record.chunk_tokens = ex.chunk_tokens;
    record.chunks = ex.chunks;
    record.first_content_us = ex.first_content_us;
    let text = ex.text.map(|raw| unescape(&raw));
    if let (Some(text), Some(tok), true) = (&text, shared.tokenizer.clone(), check) {
        let text = text.clone();
        let counted = tokio::task::spawn_blocking(move || {
            tok.encode_fast(text.as_str(), false)
                .map(|e| e.get_ids().len() as u32)
                .ok()
        })
        .await
        .ok()
        .flatten();
        record.tokenizer_output_tokens = counted;
    }
    if shared.keep_texts {
        record.generated_text = text;
    }
    record
}
