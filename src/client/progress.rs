//! What the client tells its caller while it runs: every finished request (`on_record`, in
//! completion order, from one task) and a progress snapshot about every 250 ms. The caller
//! decides where they go (requests.jsonl, a progress line); this module draws nothing.
//! Also the two tasks of a run that feed it: the collector of records and the progress ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::record::RequestRecord;

const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Receives records and progress. Called from the runtime: keep it cheap (buffered writes).
pub trait Observer: Send + Sync {
    fn on_record(&self, record: &RequestRecord);
    fn on_progress(&self, progress: &Progress);
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_record(&self, _: &RequestRecord) {}
    fn on_progress(&self, _: &Progress) {}
}

/// A snapshot of the run so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub elapsed: Duration,
    /// Requests finished (any outcome).
    pub done: u64,
    /// Of which not completed.
    pub failed: u64,
    pub in_flight: u64,
    /// Total requests planned, when count-bound.
    pub total: Option<u64>,
    /// Output tokens of finished requests.
    pub output_tokens: u64,
    /// Over the last interval.
    pub requests_per_s: f64,
    pub tokens_per_s: f64,
}

impl Progress {
    /// One human line: `412/1000 done (3 failed) | 38.2 req/s | 9,120 tok/s | 64 in flight`.
    pub fn line(&self) -> String {
        let total = self.total.map_or(String::new(), |t| format!("/{t}"));
        format!(
            "{}{total} done ({} failed) | {:.1} req/s | {:.0} tok/s | {} in flight | {:.0}s",
            self.done,
            self.failed,
            self.requests_per_s,
            self.tokens_per_s,
            self.in_flight,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Running totals of finished requests: written by the collector, read by the ticker.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub done: AtomicU64,
    pub failed: AtomicU64,
    pub output_tokens: AtomicU64,
}

/// The one task that receives every record (in completion order), hands it to the observer,
/// counts it, and returns them all when the channel closes.
pub(crate) fn spawn_collector(
    mut rx: mpsc::UnboundedReceiver<RequestRecord>,
    observer: Arc<dyn Observer>,
    totals: Arc<Totals>,
) -> JoinHandle<Vec<RequestRecord>> {
    tokio::spawn(async move {
        let mut records = Vec::new();
        while let Some(r) = rx.recv().await {
            observer.on_record(&r);
            totals
                .output_tokens
                .fetch_add(r.output_tokens(), Ordering::Relaxed);
            if !r.outcome.is_completed() {
                totals.failed.fetch_add(1, Ordering::Relaxed);
            }
            totals.done.fetch_add(1, Ordering::Relaxed);
            records.push(r);
        }
        records
    })
}

/// What the ticker reads besides the totals.
pub(crate) struct Ticker {
    pub observer: Arc<dyn Observer>,
    pub totals: Arc<Totals>,
    /// The run start.
    pub t0: Instant,
    /// Total requests planned, when count-bound.
    pub total: Option<u64>,
    /// Requests in flight now.
    pub in_flight: Box<dyn Fn() -> u64 + Send>,
}

/// Report progress every 250 ms until `stop`.
pub(crate) fn spawn_ticker(t: Ticker, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = (Instant::now(), 0u64, 0u64);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now = Instant::now();
            let d = t.totals.done.load(Ordering::Relaxed);
            let tokens = t.totals.output_tokens.load(Ordering::Relaxed);
            let dt = now.duration_since(last.0).as_secs_f64().max(1e-9);
            t.observer.on_progress(&Progress {
                elapsed: now.duration_since(t.t0),
                done: d,
                failed: t.totals.failed.load(Ordering::Relaxed),
                in_flight: (t.in_flight)(),
                total: t.total,
                output_tokens: tokens,
                requests_per_s: (d - last.1) as f64 / dt,
                tokens_per_s: (tokens - last.2) as f64 / dt,
            });
            last = (now, d, tokens);
        }
    })
}
