//! What the client tells its caller while it runs: every finished request (`on_record`, in
//! completion order, from one task) and a progress snapshot about every 250 ms. The caller
//! decides where they go (requests.jsonl, a progress line); this module draws nothing.

use std::time::Duration;

use super::record::RequestRecord;

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
