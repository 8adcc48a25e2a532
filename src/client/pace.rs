//! Releasing arrivals: each one at its due time (paced runs; how late it left is kept as the
//! dispatch lag, and a ramp's rate changes are logged) or as a concurrency slot frees up
//! (closed loop), until the schedule ends, the run is cancelled or a duration-bound run's
//! issuing window closes. Requests and conversations' session starts are released alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::one::us;
use super::schedule::{Arrivals, RampLog};
use super::timer::PreciseTimer;
use crate::load::{Limit, LoadShape};

/// The arrivals of a run, released one by one.
pub(super) struct Pacer {
    arrivals: Arrivals,
    t0: Instant,
    cancel: CancellationToken,
    semaphore: Option<Arc<Semaphore>>,
    closed_loop: bool,
    /// Duration-bound runs: the issuing window.
    duration: Option<Duration>,
    /// How late each paced arrival left.
    pub(super) lags_us: Vec<u64>,
    /// When a ramp reached each whole rate.
    pub(super) ramp: Option<RampLog>,
    /// Paced runs: waits for due times finer than tokio's millisecond timer.
    timer: Option<PreciseTimer>,
}

/// One released arrival: when it was due and released, and its concurrency slot.
pub(super) struct Release {
    pub(super) scheduled: Instant,
    pub(super) dispatched: Instant,
    permit: Option<OwnedSemaphorePermit>,
    semaphore: Option<Arc<Semaphore>>,
}

impl Release {
    /// The arrival's concurrency slot (a closed loop took it before releasing; a paced run
    /// waits for it here); `None` without a cap. Hold it while the work lasts.
    pub(super) async fn slot(self) -> Option<OwnedSemaphorePermit> {
        match (self.permit, self.semaphore) {
            (Some(p), _) => Some(p),
            (None, Some(sem)) => sem.acquire_owned().await.ok(),
            (None, None) => None,
        }
    }
}

impl Pacer {
    /// The pacer of `arrivals` under `shape`'s cap and limit, from the run start `t0`.
    pub(super) fn new(
        arrivals: Arrivals,
        shape: &LoadShape,
        t0: Instant,
        cancel: &CancellationToken,
    ) -> Self {
        let closed_loop = arrivals.immediate();
        Pacer {
            timer: if closed_loop {
                None
            } else {
                PreciseTimer::start()
            },
            closed_loop,
            arrivals,
            t0,
            cancel: cancel.clone(),
            semaphore: shape
                .max_concurrency
                .map(|c| Arc::new(Semaphore::new(c.max(1) as usize))),
            duration: match shape.limit {
                Limit::Duration(d) => Some(d),
                Limit::Requests(_) => None,
            },
            lags_us: Vec::new(),
            ramp: shape.ramp_up.as_ref().map(|r| RampLog::new(r.start_rps)),
        }
    }

    /// Duration-bound runs: when issuing stops.
    pub(super) fn issue_until(&self) -> Option<Instant> {
        self.duration.map(|d| self.t0 + d)
    }

    /// The next arrival, once due (and, in a closed loop, once a slot is free); `None` when
    /// the schedule or the issuing window ended, or the run was cancelled.
    pub(super) async fn next(&mut self) -> Option<Release> {
        if self.cancel.is_cancelled() {
            return None;
        }
        let at = self.arrivals.next_at()?;
        if self.duration.is_some_and(|d| at >= d) {
            return None;
        }
        let ramp_rps = self.arrivals.current_rps();
        let due = self.t0 + at;
        if !self.closed_loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return None,
                _ = async {
                    match &self.timer {
                        Some(t) => t.sleep_until(due).await,
                        None => tokio::time::sleep_until(due.into()).await,
                    }
                } => {}
            }
        }
        let dispatched = Instant::now();
        if let (Some(log), Some(rps)) = (self.ramp.as_mut(), ramp_rps) {
            log.observe(rps, us(dispatched.saturating_duration_since(self.t0)));
        }
        // Closed loop: wait for a slot here so work is not created ahead of its slot.
        let issue_until = self.issue_until();
        let permit = match (&self.semaphore, self.closed_loop) {
            (Some(sem), true) => {
                let until = issue_until.unwrap_or(self.t0 + Duration::from_secs(86_400 * 365));
                tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => return None,
                    _ = tokio::time::sleep_until(until.into()) => return None,
                    p = sem.clone().acquire_owned() => Some(p.ok()?),
                }
            }
            _ => None,
        };
        if self.cancel.is_cancelled() || issue_until.is_some_and(|u| Instant::now() >= u) {
            return None;
        }
        if !self.closed_loop {
            self.lags_us
                .push(us(dispatched.saturating_duration_since(due)));
        }
        Some(Release {
            scheduled: if self.closed_loop { dispatched } else { due },
            dispatched,
            permit,
            semaphore: self.semaphore.clone(),
        })
    }
}
