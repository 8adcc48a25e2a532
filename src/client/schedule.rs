//! When each request should be issued: the arrival schedule, from one seed, with vLLM's
//! semantics (gamma gaps with shape `burstiness` and mean `1/rate`; Poisson is burstiness 1;
//! linear or exponential ramp-up of the rate; count-bound runs are rescaled so the last arrival
//! lands at N/rate exactly as vLLM does), or a trace's own offsets. Pure: offsets from the run
//! start, no clock.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

use crate::load::{LoadShape, RampStrategy, RampUp, Rate};

/// Keeps the arrival stream independent of the dataset's random stream for the same seed.
const STREAM: u64 = 0x5EED_A771_7A15;

/// Arrival offsets from the run start, one per request.
#[derive(Debug)]
pub struct Arrivals {
    kind: Kind,
    index: u64,
}

#[derive(Debug)]
enum Kind {
    /// No rate: every request is due at once (bounded by the concurrency cap).
    Immediate,
    /// Precomputed (count-bound runs), with the ramp's rate at each arrival when ramping.
    Fixed(Vec<Duration>, Vec<f64>),
    /// Drawn as needed (duration-bound runs).
    Stream(Box<Stream>),
}

#[derive(Debug)]
struct Stream {
    rng: StdRng,
    gap: Gap,
    rps: f64,
    /// Seconds of the last arrival.
    now: f64,
    /// The rate the last gap was drawn at.
    last_rps: f64,
    /// The ramp and the window it spans (seconds; 0 when count-bound).
    ramp: Option<(RampUp, f64)>,
}

#[derive(Debug, Clone, Copy)]
enum Gap {
    Constant,
    Gamma { burstiness: f64 },
}

impl Arrivals {
    /// The schedule for `shape`; `count` is the number of requests when count-bound, and
    /// `duration` the issuing window when duration-bound.
    pub fn new(
        shape: &LoadShape,
        count: Option<u64>,
        duration: Option<Duration>,
        seed: u64,
    ) -> Self {
        let gamma = |burstiness: f64| Gap::Gamma { burstiness };
        let (gap, rps) = match (&shape.ramp_up, &shape.rate) {
            (None, Rate::Unlimited) => {
                return Arrivals {
                    kind: Kind::Immediate,
                    index: 0,
                };
            }
            (Some(r), Rate::Gamma { burstiness, .. }) => (gamma(*burstiness), r.start_rps),
            (Some(r), _) => (gamma(1.0), r.start_rps),
            (None, Rate::Constant { rps }) => (Gap::Constant, *rps),
            (None, Rate::Poisson { rps }) => (gamma(1.0), *rps),
            (None, Rate::Gamma { rps, burstiness }) => (gamma(*burstiness), *rps),
        };
        let mut stream = Stream {
            rng: StdRng::seed_from_u64(seed ^ STREAM),
            gap,
            rps,
            now: 0.0,
            last_rps: rps,
            ramp: shape
                .ramp_up
                .clone()
                .map(|r| (r, duration.map_or(0.0, |d| d.as_secs_f64()))),
        };
        let kind = match count {
            Some(n) => {
                let mut rates = Vec::new();
                let mut times: Vec<f64> = (0..n)
                    .map(|i| {
                        let t = stream.draw(i, n);
                        if stream.ramp.is_some() {
                            rates.push(stream.last_rps);
                        }
                        t
                    })
                    .collect();
                // vLLM: without ramp-up, scale random gaps so the last arrival is exactly at
                // N/rate. Constant pacing is exact already (first at 0, then every 1/rate).
                if shape.ramp_up.is_none() && matches!(gap, Gap::Gamma { .. }) {
                    let last = times.last().copied().unwrap_or(0.0);
                    if last > 0.0 {
                        let scale = n as f64 / rps / last;
                        times.iter_mut().for_each(|t| *t *= scale);
                    }
                }
                Kind::Fixed(
                    times.into_iter().map(Duration::from_secs_f64).collect(),
                    rates,
                )
            }
            None => Kind::Stream(Box::new(stream)),
        };
        Arrivals { kind, index: 0 }
    }

    /// Trace replay: request `i` is due at `offsets[i]` (the trace's own timestamps), and the
    /// schedule ends with the trace.
    pub fn trace(offsets: Vec<Duration>) -> Self {
        Arrivals {
            kind: Kind::Fixed(offsets, Vec::new()),
            index: 0,
        }
    }

    /// True when requests are not paced (closed loop).
    pub fn immediate(&self) -> bool {
        matches!(self.kind, Kind::Immediate)
    }

    /// The next arrival offset; `None` when a count-bound schedule is exhausted.
    pub fn next_at(&mut self) -> Option<Duration> {
        let i = self.index;
        self.index += 1;
        match &mut self.kind {
            Kind::Immediate => Some(Duration::ZERO),
            Kind::Fixed(times, _) => times.get(i as usize).copied(),
            Kind::Stream(s) => Some(Duration::from_secs_f64(s.draw(i, 0))),
        }
    }
}

impl Arrivals {
    /// The ramp's rate at the arrival `next_at` returned last; `None` when not ramping.
    pub fn current_rps(&self) -> Option<f64> {
        let i = self.index.checked_sub(1)? as usize;
        match &self.kind {
            Kind::Fixed(_, rates) => rates.get(i).copied(),
            Kind::Stream(s) if s.ramp.is_some() => Some(s.last_rps),
            _ => None,
        }
    }
}

/// One entry of vLLM's `rps_change_events`: the ramp reached `rps` (after the first entry, a
/// whole number) when the request released `at_us` after the run start was issued.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RpsChange {
    pub rps: f64,
    pub at_us: u64,
}

/// Builds `rps_change_events` as vLLM does: the start rate at the start, then one event per
/// whole rate the ramp passes, stamped when the first request at that rate is issued.
#[derive(Debug, Clone)]
pub struct RampLog {
    last: f64,
    events: Vec<RpsChange>,
}

impl RampLog {
    pub fn new(start_rps: f64) -> Self {
        RampLog {
            last: start_rps,
            events: vec![RpsChange {
                rps: start_rps,
                at_us: 0,
            }],
        }
    }

    /// A request was issued `at_us` after the start at ramp rate `rps`.
    pub fn observe(&mut self, rps: f64, at_us: u64) {
        let whole = rps.floor();
        if whole > self.last {
            let mut next = self.last.floor() + 1.0;
            while next <= whole {
                self.events.push(RpsChange { rps: next, at_us });
                next += 1.0;
            }
            self.last = whole;
        }
    }

    pub fn events(self) -> Vec<RpsChange> {
        self.events
    }
}

/// The current rate of a ramp: linear or exponential from start to end over `progress` in `[0, 1]`.
pub fn ramp_rps(r: &RampUp, progress: f64) -> f64 {
    let p = progress.clamp(0.0, 1.0);
    match r.strategy {
        RampStrategy::Linear => r.start_rps + (r.end_rps - r.start_rps) * p,
        RampStrategy::Exponential => {
            let start = r.start_rps.max(1e-9);
            start * (r.end_rps / start).powf(p)
        }
    }
}

impl Stream {
    /// Advance by one gap and return the new arrival time in seconds (`n` = count when
    /// count-bound, 0 otherwise).
    fn draw(&mut self, i: u64, n: u64) -> f64 {
        let rps = match &self.ramp {
            Some((r, window)) => {
                let progress = if n > 1 {
                    i as f64 / (n - 1) as f64
                } else if *window > 0.0 {
                    self.now / *window
                } else {
                    1.0
                };
                ramp_rps(r, progress)
            }
            None => self.rps,
        }
        .max(1e-9);
        self.last_rps = rps;
        let at = match self.gap {
            // Evenly spaced, the first at t=0.
            Gap::Constant if i == 0 => 0.0,
            Gap::Constant => self.now + 1.0 / rps,
            Gap::Gamma { burstiness } => {
                // Mean 1/rps: shape b, scale 1/(rps*b) (vLLM's parametrisation).
                let b = burstiness.max(1e-9);
                let step =
                    Gamma::new(b, 1.0 / (rps * b)).map_or(1.0 / rps, |g| g.sample(&mut self.rng));
                self.now + step
            }
        };
        self.now = at;
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Limit;

    fn shape(rate: Rate, ramp_up: Option<RampUp>) -> LoadShape {
        LoadShape {
            max_concurrency: None,
            rate,
            ramp_up,
            limit: Limit::Requests(100),
            warmup: Duration::ZERO,
            cooldown: Duration::ZERO,
        }
    }

    fn take(a: &mut Arrivals, n: usize) -> Vec<Duration> {
        (0..n).map_while(|_| a.next_at()).collect()
    }

    #[test]
    fn same_seed_same_schedule_other_seed_differs() {
        let s = shape(
            Rate::Gamma {
                rps: 10.0,
                burstiness: 0.5,
            },
            None,
        );
        let a = take(&mut Arrivals::new(&s, Some(100), None, 7), 100);
        let b = take(&mut Arrivals::new(&s, Some(100), None, 7), 100);
        let c = take(&mut Arrivals::new(&s, Some(100), None, 8), 100);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let d1 = take(
            &mut Arrivals::new(&s, None, Some(Duration::from_secs(10)), 7),
            50,
        );
        let d2 = take(
            &mut Arrivals::new(&s, None, Some(Duration::from_secs(10)), 7),
            50,
        );
        assert_eq!(d1, d2);
    }

    #[test]
    fn count_bound_poisson_ends_at_n_over_rate_and_is_sorted() {
        let s = shape(Rate::Poisson { rps: 20.0 }, None);
        let t = take(&mut Arrivals::new(&s, Some(100), None, 1), 200);
        assert_eq!(t.len(), 100);
        assert!((t[99].as_secs_f64() - 5.0).abs() < 1e-6);
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn constant_rate_is_evenly_spaced_from_zero() {
        let s = shape(Rate::Constant { rps: 4.0 }, None);
        let t = take(
            &mut Arrivals::new(&s, None, Some(Duration::from_secs(2)), 1),
            4,
        );
        let secs: Vec<f64> = t.iter().map(Duration::as_secs_f64).collect();
        assert_eq!(secs, vec![0.0, 0.25, 0.5, 0.75]);
    }

    #[test]
    fn unlimited_is_immediate() {
        let mut a = Arrivals::new(&shape(Rate::Unlimited, None), Some(3), None, 1);
        assert!(a.immediate());
        assert_eq!(a.next_at(), Some(Duration::ZERO));
    }

    #[test]
    fn ramp_goes_from_start_to_end() {
        let r = RampUp {
            strategy: RampStrategy::Exponential,
            start_rps: 1.0,
            end_rps: 100.0,
        };
        assert!((ramp_rps(&r, 0.5) - 10.0).abs() < 1e-9);
        let lin = RampUp {
            strategy: RampStrategy::Linear,
            ..r.clone()
        };
        assert!((ramp_rps(&lin, 0.5) - 50.5).abs() < 1e-9);
        // A ramp's gaps shrink: the last 100 gaps are shorter on average than the first 100.
        let s = shape(Rate::Unlimited, Some(lin));
        let t = take(&mut Arrivals::new(&s, Some(1000), None, 3), 1000);
        let first = t[100].as_secs_f64() - t[0].as_secs_f64();
        let last = t[999].as_secs_f64() - t[899].as_secs_f64();
        assert!(last * 5.0 < first, "first {first} last {last}");
    }

    #[test]
    fn ramp_log_has_one_event_per_whole_rate_like_vllm() {
        let lin = RampUp {
            strategy: RampStrategy::Linear,
            start_rps: 1.0,
            end_rps: 4.0,
        };
        let s = shape(Rate::Unlimited, Some(lin));
        let mut a = Arrivals::new(&s, Some(7), None, 1);
        let mut log = RampLog::new(1.0);
        let mut seen = Vec::new();
        while let Some(at) = a.next_at() {
            let rps = a.current_rps().unwrap();
            seen.push(rps);
            log.observe(rps, at.as_micros() as u64);
        }
        // Rates 1, 1.5, 2, ..., 4 at requests 0..7.
        assert_eq!(seen, vec![1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]);
        let events = log.events();
        let rates: Vec<f64> = events.iter().map(|e| e.rps).collect();
        assert_eq!(rates, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(events[0].at_us, 0);
        assert!(events.windows(2).all(|w| w[0].at_us < w[1].at_us));
        // A jump over several whole rates logs each one at the same time.
        let mut log = RampLog::new(0.5);
        log.observe(3.2, 10);
        let rates: Vec<f64> = log.events().iter().map(|e| e.rps).collect();
        assert_eq!(rates, vec![0.5, 1.0, 2.0, 3.0]);
        // No ramp, no rates.
        let mut flat = Arrivals::new(&shape(Rate::Poisson { rps: 5.0 }, None), Some(3), None, 1);
        flat.next_at();
        assert_eq!(flat.current_rps(), None);
    }
}
