//! The search itself, as a state machine with no clock and no I/O: `next_probe` says which level to
//! measure (and whether on a fresh deployment), `record` takes what the measurement gave.
//!
//! 1. Probe `min`, then `max` (the saturated probe), or without `max` probe upwards by
//!    `growth` (or further when the level's score says so) until a level fails.
//! 2. Narrow the bracket with Little's law: at a saturated level latency grows in proportion
//!    to the load (W = L / X with X flat), so a level at score s predicts the edge at
//!    level / s. From a failing level that estimate lies above the edge; the next level is
//!    aimed just under it (by half the target width), and when the estimate says the edge is
//!    within the width of the largest passing level, the level one width above it is probed
//!    to close the interval. Two model steps in a row on the same side, a cliff between the
//!    ends (the failing score grew more than twice as fast as the load), or a level the model
//!    cannot place inside the bracket, fall back to bisection (in log space).
//! 3. A level whose verdict is inconclusive is measured again (pooled), up to `repetitions`:
//!    only levels near the edge are. One still inconclusive counts as failing.
//! 4. With `repeat_deployments` N > 1, both ends of the final interval are measured on N
//!    deployments before the search stops; a changed verdict moves the bracket.

use serde::{Deserialize, Serialize};

use super::level::{Bracket, Level, Measurement};
use super::verdict::{Check, Verdict};
use crate::load::search::SearchSpec;

/// Why a level was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// `min`, first.
    First,
    /// `max`, second.
    Saturated,
    /// Upwards by `growth` (no `max`).
    Exponential,
    /// Placed by the Little's-law estimate.
    Little,
    /// One width above the largest passing level, to close the interval.
    Close,
    /// Half way (in log space) between the ends of the bracket.
    Bisect,
    /// The same level again: its verdict was inconclusive.
    Repeat,
    /// An end of the final interval again, on a fresh deployment.
    Redeploy,
}

/// What to measure next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// Index in the history (0, 1, ...).
    pub iteration: usize,
    pub level: f64,
    /// How many times this level was measured before (0: first time).
    pub repetition: u32,
    /// Deploy the server afresh before measuring.
    pub redeploy: bool,
    pub step: Step,
}

/// Why the search stopped (AIPerf's `convergence_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Convergence {
    /// The interval is within the target width.
    PrecisionReached,
    /// `min` fails: the capacity is below the range.
    NoPassInRange,
    /// `max` passes: the capacity is above the range.
    NoFailureInRange,
    /// `max_points` levels were measured.
    MaxPoints,
}

/// One measurement as the history keeps it: the level's pooled verdict after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    pub iteration_idx: usize,
    pub level: f64,
    pub repetition: u32,
    pub redeploy: bool,
    pub step: Step,
    /// Requests this measurement judged (misses included).
    pub requests: u64,
    /// The level's verdict over all its measurements so far.
    pub verdict: Verdict,
    pub feasible: bool,
    pub checks: Vec<Check>,
}

/// The search state.
#[derive(Debug, Clone)]
pub struct Search {
    pub(super) spec: SearchSpec,
    pub(super) levels: Vec<Level>,
    pub(super) history: Vec<Iteration>,
    pending: Option<Probe>,
    pub(super) done: Option<Convergence>,
}

impl Search {
    /// A search for `spec` (validated by the caller).
    pub fn new(spec: SearchSpec) -> Search {
        Search {
            spec,
            levels: Vec::new(),
            history: Vec::new(),
            pending: None,
            done: None,
        }
    }

    /// What the search looks for.
    pub fn spec(&self) -> &SearchSpec {
        &self.spec
    }

    /// The next measurement, or `None` when the search is over. Asking twice without
    /// `record` gives the same probe.
    pub fn next_probe(&mut self) -> Option<Probe> {
        if let Some(p) = self.pending {
            return Some(p);
        }
        if self.done.is_some() {
            return None;
        }
        match self.decide() {
            Ok((level, step)) => {
                let existing = self.find(level);
                let (repetition, deployments) = existing.map_or((0, 0), |i| {
                    (self.levels[i].measurements, self.levels[i].deployments)
                });
                let redeploy = match step {
                    Step::Redeploy => true,
                    Step::Repeat => deployments < self.spec.repeat_deployments,
                    _ => false,
                };
                let probe = Probe {
                    iteration: self.history.len(),
                    level,
                    repetition,
                    redeploy,
                    step,
                };
                self.pending = Some(probe);
                Some(probe)
            }
            Err(reason) => {
                self.done = Some(reason);
                None
            }
        }
    }

    /// What the measurement of `probe` gave.
    pub fn record(&mut self, probe: &Probe, m: Measurement) {
        self.pending = None;
        let requests = m.samples.len() as u64;
        let i = match self.find(probe.level) {
            Some(i) => i,
            None => {
                self.levels
                    .push(Level::new(probe.level, self.history.len()));
                self.levels.len() - 1
            }
        };
        let level = &mut self.levels[i];
        level.add(m, probe.redeploy, &self.spec);
        self.history.push(Iteration {
            iteration_idx: self.history.len(),
            level: probe.level,
            repetition: probe.repetition,
            redeploy: probe.redeploy,
            step: probe.step,
            requests,
            verdict: level.verdict,
            feasible: level.passes(),
            checks: level.checks.clone(),
        });
    }

    fn find(&self, level: f64) -> Option<usize> {
        self.levels.iter().position(|l| l.level == level)
    }

    fn round(&self, level: f64) -> f64 {
        let r = self.spec.axis.round(level);
        match self.spec.max {
            Some(max) => r.min(max),
            None => r,
        }
    }

    /// The next level and why, or why to stop.
    fn decide(&self) -> Result<(f64, Step), Convergence> {
        let spec = &self.spec;
        if let Some(last) = self.history.last()
            && let Some(i) = self.find(last.level)
            && self.levels[i].open(spec)
        {
            return Ok((last.level, Step::Repeat));
        }
        if self.levels.is_empty() {
            return Ok((self.round(spec.min), Step::First));
        }
        let b = Bracket::of(&self.levels, spec);
        let Some(pi) = b.pass else {
            return Err(Convergence::NoPassInRange);
        };
        let p = &self.levels[pi];
        let out_of_points = self.levels.len() >= spec.max_points as usize;
        let Some(fi) = b.fail else {
            let next = match spec.max {
                Some(max) if p.level >= max => return Err(Convergence::NoFailureInRange),
                Some(max) => (max, Step::Saturated),
                None => {
                    let little = p.level / p.score().max(1e-9);
                    (
                        self.round((p.level * spec.growth).max(little)),
                        Step::Exponential,
                    )
                }
            };
            return if out_of_points {
                Err(Convergence::MaxPoints)
            } else {
                Ok(next)
            };
        };
        let f = &self.levels[fi];
        if self.converged(p.level, f.level) {
            for end in [p, f] {
                if end.deployments < spec.repeat_deployments {
                    return Ok((end.level, Step::Redeploy));
                }
            }
            return Err(Convergence::PrecisionReached);
        }
        if out_of_points {
            return Err(Convergence::MaxPoints);
        }
        let (level, step) = self.narrow(p, f);
        if level > p.level && level < f.level && self.find(level).is_none() {
            return Ok((level, step));
        }
        let mid = self.bisect(p.level, f.level);
        if mid > p.level && mid < f.level && self.find(mid).is_none() {
            Ok((mid, Step::Bisect))
        } else {
            Err(Convergence::PrecisionReached)
        }
    }

    fn converged(&self, pass: f64, fail: f64) -> bool {
        fail / pass <= 1.0 + self.spec.width + 1e-12 || self.bisect(pass, fail) <= pass
    }

    fn bisect(&self, pass: f64, fail: f64) -> f64 {
        let mid = self.round((pass * fail).sqrt());
        // Concurrency: the geometric mean of adjacent levels rounds onto one of them.
        if mid >= fail { pass } else { mid }
    }

    /// A model step between `p` (passing) and `f` (failing), or a bisection.
    fn narrow(&self, p: &Level, f: &Level) -> (f64, Step) {
        let w = self.spec.width;
        // A cliff between the ends (the failing score grew more than twice as fast as the
        // load): no model places the edge; bisect.
        if f.score() > 2.0 * (f.level / p.level) * p.score() {
            return (self.bisect(p.level, f.level), Step::Bisect);
        }
        // Only the failing end's estimate is used: a passing level far below a cliff has a
        // flat latency and would put the edge far too high.
        let from_fail = f.level / f.score();
        let close = match self.spec.axis {
            crate::load::search::Axis::Concurrency => (p.level * (1.0 + w)).floor(),
            crate::load::search::Axis::RequestRate => self.round(p.level * (1.0 + w) * 0.999),
        };
        let aim = from_fail * (1.0 - w / 2.0);
        if !(aim.is_finite() && aim > 0.0) {
            return (self.bisect(p.level, f.level), Step::Bisect);
        }
        // The last two level-choosing steps were model steps landing on the same side: the
        // model keeps missing; bisect (after one close step, which costs least).
        let recent: Vec<&Iteration> = self
            .history
            .iter()
            .rev()
            .filter(|i| !matches!(i.step, Step::Repeat | Step::Redeploy))
            .take(2)
            .collect();
        let model = |i: &Iteration| matches!(i.step, Step::Little | Step::Close);
        let stagnant = recent.len() == 2
            && model(recent[0])
            && model(recent[1])
            && recent[0].feasible == recent[1].feasible;
        if aim <= close && !(stagnant && recent[0].step == Step::Close) {
            return (close, Step::Close);
        }
        if stagnant {
            return (self.bisect(p.level, f.level), Step::Bisect);
        }
        // Keep the model step inside the middle 80% of the bracket (log space).
        let (lo, hi) = (p.level.ln(), f.level.ln());
        let x = aim.ln().clamp(lo + 0.1 * (hi - lo), lo + 0.9 * (hi - lo));
        (self.round(x.exp()), Step::Little)
    }
}
