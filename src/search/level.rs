//! One load level of a search: every measurement of it pooled (requests, time, tokens), the
//! SLO checks on the pool, and the level's verdict; and the bracket read off all levels:
//! the largest passing level below the smallest failing one.

use serde::{Deserialize, Serialize};

use super::sample::{Origin, RequestSample, samples};
use super::verdict::{Check, Verdict, check_attainment, check_percentile};
use crate::client::RequestRecord;
use crate::load::search::SearchSpec;
use crate::load::{LoadShape, Rate};
use crate::metrics::Window;

/// What one measurement of a level gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measurement {
    /// One per request issued in the measured window, misses included.
    pub samples: Vec<RequestSample>,
    /// Seconds the measurement ran.
    pub duration_s: f64,
    pub completed: u64,
    pub output_tokens: u64,
}

impl Measurement {
    /// A measurement read off its request records (as the client returned them or the
    /// archive kept them) under `shape`: the requests sent in the measured window (warm-up
    /// and cool-down trimmed), their latencies from the scheduled arrival when the load was
    /// paced, the run's length, and the completed requests and their output tokens.
    pub fn of(records: &[RequestRecord], shape: &LoadShape) -> Measurement {
        let origin = match shape.rate {
            Rate::Unlimited => Origin::Sent,
            _ => Origin::Scheduled,
        };
        let end_us = records.iter().map(|x| x.end_us).max().unwrap_or(0);
        let window = Window::trimmed(end_us, shape.warmup, shape.cooldown);
        let completed: Vec<_> = records
            .iter()
            .filter(|x| x.outcome.is_completed())
            .collect();
        Measurement {
            samples: samples(records, origin, window),
            duration_s: end_us as f64 / 1e6,
            completed: completed.len() as u64,
            output_tokens: completed.iter().map(|x| x.output_tokens()).sum(),
        }
    }
}

/// A level and its pooled measurements.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Level {
    pub(super) level: f64,
    pub(super) samples: Vec<RequestSample>,
    pub(super) measurements: u32,
    /// Deployments it was measured on (the first counts as one).
    pub(super) deployments: u32,
    pub(super) duration_s: f64,
    pub(super) completed: u64,
    pub(super) output_tokens: u64,
    pub(super) checks: Vec<Check>,
    pub(super) verdict: Verdict,
    /// The history index of its first measurement.
    pub(super) first_iteration: usize,
}

/// Pooled throughput of a level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Output tokens per second over all its measurements.
    pub output_throughput: f64,
    /// Completed requests per second over all its measurements.
    pub request_throughput: f64,
}

impl Level {
    pub(super) fn new(level: f64, first_iteration: usize) -> Level {
        Level {
            level,
            samples: Vec::new(),
            measurements: 0,
            deployments: 0,
            duration_s: 0.0,
            completed: 0,
            output_tokens: 0,
            checks: Vec::new(),
            verdict: Verdict::Inconclusive,
            first_iteration,
        }
    }

    /// Pool a measurement and judge the pool again.
    pub(super) fn add(&mut self, m: Measurement, redeployed: bool, spec: &SearchSpec) {
        if self.measurements == 0 || redeployed {
            self.deployments += 1;
        }
        self.measurements += 1;
        self.samples.extend(m.samples);
        self.duration_s += m.duration_s;
        self.completed += m.completed;
        self.output_tokens += m.output_tokens;
        let mut checks: Vec<Check> = spec
            .percentiles
            .iter()
            .map(|p| check_percentile(p, &self.samples, spec.confidence))
            .collect();
        if let Some(a) = &spec.attainment {
            checks.push(check_attainment(a, &self.samples, spec.confidence));
        }
        self.verdict = Verdict::all(checks.iter().map(|c| c.verdict));
        self.checks = checks;
    }

    /// Inconclusive with repetitions left: measure it again.
    pub(super) fn open(&self, spec: &SearchSpec) -> bool {
        self.verdict == Verdict::Inconclusive && self.measurements < spec.repetitions
    }

    /// Failed, or still inconclusive after every repetition (not proven to pass).
    pub(super) fn fails(&self, spec: &SearchSpec) -> bool {
        self.verdict == Verdict::Fail || (self.verdict == Verdict::Inconclusive && !self.open(spec))
    }

    pub(super) fn passes(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    /// The largest score over the SLOs: above 1 beyond the edge.
    pub(super) fn score(&self) -> f64 {
        self.checks.iter().map(|c| c.score).fold(0.0, f64::max)
    }

    /// The SLO that binds: the failing one with the largest score, else the largest score.
    pub(super) fn binding(&self) -> Option<&Check> {
        let worst = |a: &&Check, b: &&Check| a.score.total_cmp(&b.score);
        self.checks
            .iter()
            .filter(|c| c.verdict != Verdict::Pass)
            .max_by(worst)
            .or_else(|| self.checks.iter().max_by(worst))
    }

    pub(super) fn throughput(&self) -> Throughput {
        let d = self.duration_s.max(1e-9);
        Throughput {
            output_throughput: self.output_tokens as f64 / d,
            request_throughput: self.completed as f64 / d,
        }
    }
}

/// The interval read off the levels: `pass` is the largest passing level below `fail`, the
/// smallest failing one. `monotonic` is false when some level above `fail` passed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Bracket {
    pub(super) pass: Option<usize>,
    pub(super) fail: Option<usize>,
    pub(super) monotonic: bool,
}

impl Bracket {
    /// Indexes into `levels`.
    pub(super) fn of(levels: &[Level], spec: &SearchSpec) -> Bracket {
        let fail = levels
            .iter()
            .enumerate()
            .filter(|(_, l)| l.fails(spec))
            .min_by(|a, b| a.1.level.total_cmp(&b.1.level))
            .map(|(i, _)| i);
        let limit = fail.map_or(f64::INFINITY, |i| levels[i].level);
        let pass = levels
            .iter()
            .enumerate()
            .filter(|(_, l)| l.passes() && l.level < limit)
            .max_by(|a, b| a.1.level.total_cmp(&b.1.level))
            .map(|(i, _)| i);
        let monotonic = !levels.iter().any(|l| l.passes() && l.level > limit);
        Bracket {
            pass,
            fail,
            monotonic,
        }
    }
}
