//! The client watching itself: event-loop lag (a probe that sleeps 10 ms and measures how late
//! it wakes), dispatch lag (from the records), and the process's CPU time (getrusage). From these
//! it decides whether the run may have been client-limited, and says why.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

const PROBE_EVERY: Duration = Duration::from_millis(10);
/// Above these the client may have distorted the figures.
const LAG_P99_LIMIT_US: u64 = 1_000;
const DISPATCH_P99_LIMIT_US: u64 = 1_000;
const CPU_BUSY_LIMIT: f64 = 0.9;

/// The client's own health during one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelfCheck {
    /// Event-loop lag: how late a 10 ms timer fired (microseconds).
    pub loop_lag_p50_us: u64,
    pub loop_lag_p99_us: u64,
    pub loop_lag_max_us: u64,
    /// Dispatch lag: issued minus scheduled (microseconds), paced runs only.
    pub dispatch_lag_p50_us: u64,
    pub dispatch_lag_p99_us: u64,
    pub dispatch_lag_max_us: u64,
    /// Process CPU time over the run (user + system), seconds.
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    /// CPU time / wall time / cores available to the process.
    pub cpu_busy_fraction: f64,
    /// Process CPU per output token (microseconds); 0 when no tokens.
    pub cpu_us_per_output_token: f64,
    /// Peak resident memory of the process (KiB), as the kernel reports it.
    pub peak_rss_kib: u64,
    /// True when a limit above was crossed: the client may have been the bottleneck.
    pub client_limited: bool,
    pub reasons: Vec<String>,
}

/// Process CPU time so far (user, system).
pub(crate) fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    (tv(usage.ru_utime), tv(usage.ru_stime))
}

/// Peak RSS of this process (KiB).
pub(crate) fn peak_rss_kib() -> u64 {
    // SAFETY: as above.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 { 0 } else { usage.ru_maxrss as u64 }
}

/// Runs the lag probe until `stop`; returns the lags seen (microseconds).
pub(crate) fn spawn_probe(stop: CancellationToken) -> Arc<Mutex<Vec<u32>>> {
    let lags = Arc::new(Mutex::new(Vec::new()));
    let out = lags.clone();
    tokio::spawn(async move {
        loop {
            let due = Instant::now() + PROBE_EVERY;
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(due.into()) => {}
            }
            let late = Instant::now().saturating_duration_since(due).as_micros();
            if let Ok(mut l) = out.lock() {
                l.push(u32::try_from(late).unwrap_or(u32::MAX));
            }
        }
    });
    lags
}

/// Nearest-rank percentile of unsorted microsecond samples.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Inputs gathered over the run.
pub(crate) struct Observed {
    pub loop_lags_us: Vec<u32>,
    pub dispatch_lags_us: Vec<u64>,
    pub cpu: (Duration, Duration),
    pub wall: Duration,
    pub output_tokens: u64,
}

pub(crate) fn assess(o: Observed) -> SelfCheck {
    let mut lags: Vec<u64> = o.loop_lags_us.iter().map(|&x| u64::from(x)).collect();
    lags.sort_unstable();
    let mut dispatch = o.dispatch_lags_us;
    dispatch.sort_unstable();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu = (o.cpu.0 + o.cpu.1).as_secs_f64();
    let wall = o.wall.as_secs_f64().max(1e-9);
    let mut c = SelfCheck {
        loop_lag_p50_us: pct(&lags, 50.0),
        loop_lag_p99_us: pct(&lags, 99.0),
        loop_lag_max_us: lags.last().copied().unwrap_or(0),
        dispatch_lag_p50_us: pct(&dispatch, 50.0),
        dispatch_lag_p99_us: pct(&dispatch, 99.0),
        dispatch_lag_max_us: dispatch.last().copied().unwrap_or(0),
        cpu_user_s: o.cpu.0.as_secs_f64(),
        cpu_system_s: o.cpu.1.as_secs_f64(),
        cpu_busy_fraction: cpu / wall / cores,
        cpu_us_per_output_token: if o.output_tokens > 0 {
            cpu * 1e6 / o.output_tokens as f64
        } else {
            0.0
        },
        peak_rss_kib: peak_rss_kib(),
        client_limited: false,
        reasons: Vec::new(),
    };
    if c.loop_lag_p99_us > LAG_P99_LIMIT_US {
        c.reasons.push(format!(
            "event-loop lag p99 {} us > {LAG_P99_LIMIT_US} us: timestamps may be late",
            c.loop_lag_p99_us
        ));
    }
    if c.dispatch_lag_p99_us > DISPATCH_P99_LIMIT_US {
        c.reasons.push(format!(
            "dispatch lag p99 {} us > {DISPATCH_P99_LIMIT_US} us: requests left late",
            c.dispatch_lag_p99_us
        ));
    }
    if c.cpu_busy_fraction > CPU_BUSY_LIMIT {
        c.reasons.push(format!(
            "the client process used {:.0}% of the CPU available to it",
            c.cpu_busy_fraction * 100.0
        ));
    }
    c.client_limited = !c.reasons.is_empty();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_a_lagging_client_and_passes_a_healthy_one() {
        let base = || Observed {
            loop_lags_us: vec![50; 100],
            dispatch_lags_us: vec![20; 100],
            cpu: (Duration::from_millis(100), Duration::from_millis(50)),
            wall: Duration::from_secs(10),
            output_tokens: 1000,
        };
        let ok = assess(base());
        assert!(!ok.client_limited, "{:?}", ok.reasons);
        assert!((ok.cpu_us_per_output_token - 150.0).abs() < 1e-6);
        let mut slow = base();
        slow.loop_lags_us = vec![5_000; 100];
        let bad = assess(slow);
        assert!(bad.client_limited);
        assert!(bad.reasons[0].contains("event-loop lag"));
    }
}
