//! The client watching itself: event-loop lag (every 10 ms a probe task wakes, yields and
//! measures how late it woke and how long it waited in the run queue), read delay (for every read, how
//! long after the kernel received the bytes the client read them) and the output chunks a late
//! read may have merged, dispatch lag (from the records), and the process's CPU time
//! (getrusage). From these it decides whether the run may have been client-limited, and says
//! why.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::plausible::ChunkTiming;

const PROBE_EVERY: Duration = Duration::from_millis(10);
/// tokio's timers fire on whole milliseconds.
const TIMER_GRANULARITY: Duration = Duration::from_millis(1);
/// Above these the client may have distorted the figures.
const LAG_P99_LIMIT_US: u64 = 1_000;
const DISPATCH_P99_LIMIT_US: u64 = 1_000;
const CPU_BUSY_LIMIT: f64 = 0.9;
/// A read later than this after its bytes arrived, holding several output chunks, may have
/// merged chunks the server sent apart: the earlier ones get the last one's time.
const MERGE_DELAY_US: u64 = 1_000;
/// Above this share of output chunks possibly merged, chunk times are not trusted.
const MERGED_LIMIT: f64 = 0.01;

/// The client's own health during one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelfCheck {
    /// Event-loop lag: how long a task that became ready waited to be polled (microseconds).
    pub loop_lag_p50_us: u64,
    pub loop_lag_p99_us: u64,
    pub loop_lag_max_us: u64,
    /// Where chunk times come from: `kernel_receive` (the kernel's receive timestamp of the
    /// bytes, so a busy client does not delay them), `read_return` (when the read returned:
    /// no kernel timestamps on this platform or socket), or `mixed`.
    #[serde(default)]
    pub chunk_time_source: String,
    /// Read delay: from the kernel receiving bytes to the client reading them (microseconds,
    /// upper bounds of log-spaced buckets, +-12%); kernel-stamped reads only.
    #[serde(default)]
    pub read_delay_p50_us: u64,
    #[serde(default)]
    pub read_delay_p99_us: u64,
    #[serde(default)]
    pub read_delay_max_us: u64,
    /// Output chunks that came in one read with later ones, read more than 1 ms after they
    /// arrived: the client may have merged chunks the server sent apart, and these carry the
    /// last one's time.
    #[serde(default)]
    pub merged_chunks: u64,
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
    /// The run's ITL disagrees with its own TPOT (median ITL under half the median TPOT) or
    /// many gaps are under 0.1 ms while tokens take milliseconds: chunk times or per-chunk
    /// token counts are wrong, or the server sends in bursts (client/plausible.rs).
    #[serde(default)]
    pub chunk_times_suspect: bool,
    /// True when a limit above was crossed or the chunk times are suspect: the client may
    /// have been the bottleneck, or its figures are wrong; `reasons` says which.
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

/// Log-spaced buckets: exact below 16 us, then four per power of two.
const BUCKETS: usize = 16 + 4 * 60;

fn bucket(us: u64) -> usize {
    if us < 16 {
        return us as usize;
    }
    let log = 63 - us.leading_zeros() as usize; // >= 4
    let sub = ((us >> (log - 2)) & 3) as usize;
    (16 + 4 * (log - 4) + sub).min(BUCKETS - 1)
}

/// The largest value in bucket `i`.
fn bucket_top(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let (log, sub) = (4 + (i - 16) / 4, ((i - 16) % 4) as u64);
    ((4 + sub + 1) << (log - 2)) - 1
}

/// Every read of a response body, as the exchanges report them (shared, lock-free).
pub(crate) struct ReadDelays {
    buckets: Box<[AtomicU64]>,
    max_us: AtomicU64,
    unstamped: AtomicU64,
    merged_chunks: AtomicU64,
}

impl Default for ReadDelays {
    fn default() -> Self {
        ReadDelays {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_us: AtomicU64::new(0),
            unstamped: AtomicU64::new(0),
            merged_chunks: AtomicU64::new(0),
        }
    }
}

impl ReadDelays {
    /// A read whose bytes arrived `arrived` (`kernel`: the kernel's time) and held `chunks`
    /// output-bearing chunks.
    pub(crate) fn record(&self, arrived: Instant, kernel: bool, chunks: usize) {
        if !kernel {
            self.unstamped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let delay = u64::try_from(arrived.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket(delay)].fetch_add(1, Ordering::Relaxed);
        self.max_us.fetch_max(delay, Ordering::Relaxed);
        if chunks > 1 && delay > MERGE_DELAY_US {
            self.merged_chunks
                .fetch_add(chunks as u64 - 1, Ordering::Relaxed);
        }
    }

    fn percentile(&self, counts: &[u64], total: u64, p: f64) -> u64 {
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_top(i).min(self.max_us.load(Ordering::Relaxed));
            }
        }
        0
    }

    /// (source, p50, p99, max, merged chunks).
    fn summary(&self) -> (String, u64, u64, u64, u64) {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let stamped: u64 = counts.iter().sum();
        let unstamped = self.unstamped.load(Ordering::Relaxed);
        let source = match (stamped > 0, unstamped > 0) {
            (true, false) => "kernel_receive",
            (false, true) => "read_return",
            (true, true) => "mixed",
            (false, false) => "",
        };
        (
            source.to_string(),
            self.percentile(&counts, stamped, 50.0),
            self.percentile(&counts, stamped, 99.0),
            self.max_us.load(Ordering::Relaxed),
            self.merged_chunks.load(Ordering::Relaxed),
        )
    }
}

/// Runs the lag probe until `stop`; returns the lags seen (microseconds).
pub(crate) fn spawn_probe(stop: CancellationToken) -> Arc<Mutex<Vec<u32>>> {
    let lags = Arc::new(Mutex::new(Vec::new()));
    let out = lags.clone();
    tokio::spawn(async move {
        loop {
            let slept = Instant::now();
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(PROBE_EVERY) => {}
            }
            // A stall while the probe slept shows as a late wake-up (beyond the timer's 1 ms
            // granularity); one while it waited in the run queue, as a late re-poll.
            let woke_late = slept
                .elapsed()
                .saturating_sub(PROBE_EVERY + TIMER_GRANULARITY);
            let ready = Instant::now();
            tokio::task::yield_now().await;
            let late = ready.elapsed().max(woke_late).as_micros();
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
pub(crate) struct Observed<'a> {
    pub loop_lags_us: Vec<u32>,
    pub reads: &'a ReadDelays,
    pub output_chunks: u64,
    pub dispatch_lags_us: Vec<u64>,
    pub cpu: (Duration, Duration),
    pub wall: Duration,
    pub output_tokens: u64,
    pub rss_start_kib: u64,
    pub max_in_flight: u64,
    /// ITL and TPOT of the completed requests.
    pub timing: ChunkTiming,
}

pub(crate) fn assess(o: Observed<'_>) -> SelfCheck {
    let mut lags: Vec<u64> = o.loop_lags_us.iter().map(|&x| u64::from(x)).collect();
    lags.sort_unstable();
    let mut dispatch = o.dispatch_lags_us;
    dispatch.sort_unstable();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu = (o.cpu.0 + o.cpu.1).as_secs_f64();
    let wall = o.wall.as_secs_f64().max(1e-9);
    let (chunk_time_source, read_p50, read_p99, read_max, merged_chunks) = o.reads.summary();
    let kernel_times = chunk_time_source == "kernel_receive";
    let mut c = SelfCheck {
        chunk_time_source,
        read_delay_p50_us: read_p50,
        read_delay_p99_us: read_p99,
        read_delay_max_us: read_max,
        merged_chunks,
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
        chunk_times_suspect: false,
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
        // With kernel receive times a late poll no longer moves chunk times (merges are
        // counted below); it still delays requests and so lowers the load.
        let effect = if kernel_times {
            "requests may leave late"
        } else {
            "timestamps may be late"
        };
        c.reasons.push(format!(
            "event-loop lag p99 {} us > {LAG_P99_LIMIT_US} us {cause}; {effect}",
            c.loop_lag_p99_us
        ));
    }
    if o.output_chunks > 0 && c.merged_chunks as f64 > MERGED_LIMIT * o.output_chunks as f64 {
        c.reasons.push(format!(
            "{} of {} output chunks ({:.1}%) were read more than {MERGE_DELAY_US} us late together with later ones: their times may be those of the later chunks",
            c.merged_chunks,
            o.output_chunks,
            100.0 * c.merged_chunks as f64 / o.output_chunks as f64
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
    let suspect = o.timing.reasons();
    c.chunk_times_suspect = !suspect.is_empty();
    c.reasons.extend(suspect);
    c.client_limited = !c.reasons.is_empty();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_a_lagging_client_and_passes_a_healthy_one() {
        let reads = ReadDelays::default();
        let base = || Observed {
            loop_lags_us: vec![50; 100],
            reads: &reads,
            output_chunks: 1000,
            dispatch_lags_us: vec![20; 100],
            cpu: (Duration::from_millis(100), Duration::from_millis(50)),
            wall: Duration::from_secs(10),
            output_tokens: 1000,
            rss_start_kib: 0,
            max_in_flight: 1,
            timing: ChunkTiming::default(),
        };
        let ok = assess(base());
        assert!(!ok.client_limited, "{:?}", ok.reasons);
        assert!((ok.cpu_us_per_output_token - 150.0).abs() < 1e-6);
        let mut slow = base();
        slow.loop_lags_us = vec![5_000; 100];
        let bad = assess(slow);
        assert!(bad.client_limited);
        assert!(bad.reasons[0].contains("event-loop lag"));
        assert!(bad.reasons[0].contains("timestamps may be late"));
        assert!(!bad.chunk_times_suspect);

        // ITL far under TPOT: flagged even when the client was healthy.
        let mut odd = base();
        odd.timing = ChunkTiming {
            itls: 100,
            tiny: 60,
            median_itl_us: 20.0,
            median_tpot_us: 9_000.0,
        };
        let odd = assess(odd);
        assert!(odd.chunk_times_suspect && odd.client_limited, "{odd:?}");
        assert_eq!(odd.reasons.len(), 2, "{:?}", odd.reasons);
        assert!(
            odd.reasons[0].contains("median ITL 0.020 ms is under half the median TPOT 9.000 ms")
        );
    }

    #[test]
    fn buckets_cover_every_value_within_an_eighth() {
        for v in (0..5_000u64).chain([65_535, 1 << 20, 123_456_789, u64::MAX / 2]) {
            let i = bucket(v);
            assert!(
                bucket_top(i) >= v,
                "{v} above its bucket's top {}",
                bucket_top(i)
            );
            assert!(
                i == 0 || bucket_top(i - 1) < v,
                "{v} belongs in an earlier bucket"
            );
            assert!(
                bucket_top(i) as f64 <= v as f64 * 1.25 + 1.0,
                "{v}: bucket too wide"
            );
        }
    }

    #[test]
    fn read_delays_give_percentiles_the_source_and_late_merged_chunks() {
        let reads = ReadDelays::default();
        let now = Instant::now();
        for _ in 0..98 {
            reads.record(now, true, 1);
        }
        // Two reads 5 ms late: one held three chunks (two may be merged), one held one.
        let late = now - Duration::from_millis(5);
        reads.record(late, true, 3);
        reads.record(late, true, 1);
        // A read soon after its bytes came may hold several chunks the server sent together.
        reads.record(now, true, 4);
        let observed = |reads| Observed {
            loop_lags_us: vec![50; 10],
            reads,
            output_chunks: 104,
            dispatch_lags_us: Vec::new(),
            cpu: (Duration::ZERO, Duration::ZERO),
            wall: Duration::from_secs(1),
            output_tokens: 104,
            rss_start_kib: 0,
            max_in_flight: 1,
            timing: ChunkTiming::default(),
        };
        let c = assess(observed(&reads));
        assert_eq!(c.chunk_time_source, "kernel_receive");
        assert!(c.read_delay_p50_us < 1_000, "{}", c.read_delay_p50_us);
        assert!(
            (5_000..=6_500).contains(&c.read_delay_max_us),
            "{}",
            c.read_delay_max_us
        );
        assert_eq!(c.merged_chunks, 2);
        assert!(c.client_limited, "2 of 104 chunks is over 1%");
        assert!(
            c.reasons[0].contains("2 of 104 output chunks"),
            "{:?}",
            c.reasons
        );

        let plain = ReadDelays::default();
        plain.record(Instant::now(), false, 1);
        let c = assess(observed(&plain));
        assert_eq!(c.chunk_time_source, "read_return");
        assert_eq!((c.read_delay_p99_us, c.merged_chunks), (0, 0));
        assert!(!c.client_limited, "{:?}", c.reasons);
    }
}
