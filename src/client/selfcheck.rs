//! The client watching itself: event-loop lag (every 10 ms a probe task yields and measures how
//! long it waited in the run queue before it was polled again: the delay any ready socket read
//! suffers), dispatch lag (from the records), and the process's CPU time (getrusage). From these
//! it decides whether the run may have been client-limited, and says why.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

const PROBE_EVERY: Duration = Duration::from_millis(10);
/// Above these the client may have distorted the figures.
const LAG_P99_LIMIT_US: u64 = 1_000;
const DISPATCH_P99_LIMIT_US: u64 = 1_000;
const CPU_BUSY_LIMIT: f64 = 0.9;

/// The client's own health during one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelfCheck {
    /// Event-loop lag: how long a task that became ready waited to be polled (microseconds).
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
    /// Resident memory when the run started (prompts and bodies already built), KiB.
    pub rss_start_kib: u64,
    /// (peak - start) / peak requests in flight: memory per in-flight stream, KiB (an upper
    /// bound: it also holds the records of finished requests).
    pub kib_per_stream: f64,
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

/// Resident memory now (KiB), from /proc/self/statm; 0 where unavailable.
pub(crate) fn current_rss_kib() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page_kib = (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as u64 / 1024;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_kib)
}

/// Runs the lag probe until `stop`; returns the lags seen (microseconds).
pub(crate) fn spawn_probe(stop: CancellationToken) -> Arc<Mutex<Vec<u32>>> {
    let lags = Arc::new(Mutex::new(Vec::new()));
    let out = lags.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(PROBE_EVERY) => {}
            }
            let ready = Instant::now();
            tokio::task::yield_now().await;
            let late = ready.elapsed().as_micros();
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
    pub rss_start_kib: u64,
    pub max_in_flight: u64,
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
        rss_start_kib: o.rss_start_kib,
        kib_per_stream: if o.max_in_flight > 0 {
            peak_rss_kib().saturating_sub(o.rss_start_kib) as f64 / o.max_in_flight as f64
        } else {
            0.0
        },
        client_limited: false,
        reasons: Vec::new(),
    };
    if c.loop_lag_p99_us > LAG_P99_LIMIT_US {
        // Late polls with little CPU of our own mean the machine, not the client, is busy.
        let cause = if c.cpu_busy_fraction < 0.5 {
            format!(
                "while the client used only {:.0}% of the CPU: the machine is overloaded by other processes",
                c.cpu_busy_fraction * 100.0
            )
        } else {
            "and the client is busy".to_string()
        };
        c.reasons.push(format!(
            "event-loop lag p99 {} us > {LAG_P99_LIMIT_US} us {cause}; timestamps may be late",
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
            rss_start_kib: 0,
            max_in_flight: 1,
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
