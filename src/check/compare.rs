//! Comparing a run with its baseline: points matched across runs, medians and spread per
//! metric, a verdict per point x metric, and the refusals (the run itself as baseline, a
//! baseline with nothing valid to compare with).

use serde::Serialize;

use std::cmp::Ordering;

use super::interval::{beyond, change_interval, seed_of};
use super::threshold::SEARCH_METRICS;
use super::{CheckError, Threshold};
use crate::archive::{Row, Run, RunSearch, trimmed_windows};

/// Outcome of one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    /// Better than the baseline by more than the allowed change.
    Improved,
    Regressed,
    /// The point is in the baseline but not measured (or not completed) in this run.
    Missing,
    /// This run's point failed a validity gate: its numbers cannot pass a gate.
    Invalid,
    /// The baseline's point is invalid or lacks the metric: nothing to compare with.
    NoBaseline,
}

impl Verdict {
    /// Does this verdict fail the gate?
    pub fn fails(self) -> bool {
        matches!(
            self,
            Verdict::Regressed | Verdict::Missing | Verdict::Invalid
        )
    }
}

/// One point x metric.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub point: String,
    pub metric: String,
    pub baseline: Option<f64>,
    pub current: Option<f64>,
    /// (current - baseline) / baseline.
    pub delta: Option<f64>,
    /// The change allowed after widening for noise (a fraction, no sign).
    pub allowed: f64,
    /// The larger observed spread of the two runs (fraction), 0 with one repetition.
    pub noise: f64,
    /// The 95 % bootstrap interval of `delta` over the repetitions; `None` when a side has
    /// one repetition: then there is no noise estimate and the threshold alone decides.
    pub interval: Option<(f64, f64)>,
    pub repetitions: (usize, usize),
    pub verdict: Verdict,
}

/// Everything `check` decided.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub current: String,
    pub baseline: String,
    pub thresholds: Vec<Threshold>,
    pub noise_k: f64,
    pub comparisons: Vec<Comparison>,
    /// Points only in this run (not gated).
    pub new_points: Vec<String>,
    /// Which window the gated figures come from, when some point of either run trimmed a
    /// warm-up or cool-down (throughput and latencies are then the trimmed window's).
    pub window: Option<String>,
}

impl CheckReport {
    pub fn failures(&self) -> usize {
        self.comparisons
            .iter()
            .filter(|c| c.verdict.fails())
            .count()
    }

    pub fn passed(&self) -> bool {
        self.failures() == 0
    }
}

fn key(row: &Row) -> String {
    let dep = row.deployment_label();
    if dep.is_empty() {
        row.match_key()
    } else {
        format!("{dep} {}", row.match_key())
    }
}

fn usable(row: &Row) -> bool {
    row.status == crate::archive::PointStatus::Completed && !row.summaries.is_empty()
}

/// Compare `current` with `baseline` under `thresholds`, widening each to `noise_k` x the
/// observed spread. Refuses a baseline that is the run itself, and one with no valid
/// completed point (a failed or invalid baseline would otherwise pass every comparison as
/// "no baseline").
pub fn check(
    current: &Run,
    baseline: &Run,
    thresholds: &[Threshold],
    noise_k: f64,
) -> Result<CheckReport, CheckError> {
    if same_run(current, baseline) {
        return Err(CheckError::SameRun {
            run: run_name(current),
        });
    }
    let report = compare(current, baseline, thresholds, noise_k);
    if !report.comparisons.iter().any(|c| c.baseline.is_some()) {
        return Err(CheckError::NoBaseline {
            baseline: run_name(baseline),
            status: baseline.manifest.status.to_string(),
        });
    }
    Ok(report)
}

fn same_run(a: &Run, b: &Run) -> bool {
    let canonical = |run: &Run| run.dir.canonicalize().unwrap_or_else(|_| run.dir.clone());
    canonical(a) == canonical(b)
        || (a.manifest.task == b.manifest.task && a.manifest.run_id == b.manifest.run_id)
}

fn compare(current: &Run, baseline: &Run, thresholds: &[Threshold], noise_k: f64) -> CheckReport {
    let mut comparisons = Vec::new();
    for base in &baseline.rows {
        if searched(baseline, base) {
            continue;
        }
        let k = key(base);
        let cur = current.rows.iter().find(|r| key(r) == k);
        for t in thresholds
            .iter()
            .filter(|t| !SEARCH_METRICS.contains(&t.metric.as_str()))
        {
            let b = base
                .metric(&t.metric)
                .filter(|_| usable(base) && base.valid != Some(false));
            let c = cur.filter(|r| usable(r)).and_then(|r| r.metric(&t.metric));
            let noise = [
                base.spread(&t.metric),
                cur.and_then(|r| r.spread(&t.metric)),
            ]
            .into_iter()
            .flatten()
            .fold(0.0, f64::max);
            let delta = match (b, c) {
                (Some(b), Some(c)) if b != 0.0 => Some((c - b) / b),
                _ => None,
            };
            let interval = match (b, c) {
                (Some(_), Some(_)) => change_interval(
                    &cur.map_or_else(Vec::new, |r| r.values(&t.metric)),
                    &base.values(&t.metric),
                    seed_of(&k, &t.metric),
                ),
                _ => None,
            };
            // With an interval the noise is in it; without one, widen by the spread.
            let allowed = if interval.is_some() {
                t.limit.abs()
            } else {
                t.limit.abs().max(noise_k * noise)
            };
            // An invalid point fails the gate whatever the baseline says.
            let verdict = if cur.is_some_and(|r| r.valid == Some(false)) {
                Verdict::Invalid
            } else if b.is_none() {
                Verdict::NoBaseline
            } else if c.is_none() {
                Verdict::Missing
            } else {
                // With an interval, the whole interval must be past the allowed change;
                // else the median change.
                let d = delta.unwrap_or(0.0);
                match beyond(t.limit, interval.unwrap_or((d, d)), allowed) {
                    Ordering::Greater => Verdict::Regressed,
                    Ordering::Less => Verdict::Improved,
                    Ordering::Equal => Verdict::Ok,
                }
            };
            comparisons.push(Comparison {
                point: k.clone(),
                metric: t.metric.clone(),
                baseline: b,
                current: c,
                delta,
                allowed,
                noise,
                repetitions: (cur.map_or(0, |r| r.summaries.len()), base.summaries.len()),
                interval,
                verdict,
            });
        }
    }
    let mut new_points = Vec::new();
    comparisons.extend(compare_searches(current, baseline, thresholds));
    for row in &current.rows {
        let k = key(row);
        if searched(current, row) || baseline.rows.iter().any(|b| key(b) == k) {
            continue;
        }
        if row.valid != Some(false) {
            new_points.push(k);
            continue;
        }
        // An invalid point fails the gate whatever the baseline says, also a new one.
        for t in thresholds {
            comparisons.push(Comparison {
                point: k.clone(),
                metric: t.metric.clone(),
                baseline: None,
                current: row.metric(&t.metric),
                delta: None,
                allowed: t.limit.abs(),
                noise: row.spread(&t.metric).unwrap_or(0.0),
                repetitions: (row.summaries.len(), 0),
                interval: None,
                verdict: Verdict::Invalid,
            });
        }
    }
    CheckReport {
        current: run_name(current),
        baseline: run_name(baseline),
        thresholds: thresholds.to_vec(),
        noise_k,
        comparisons,
        new_points,
        window: trimmed_windows(current.rows.iter().chain(&baseline.rows)),
    }
}

fn run_name(run: &Run) -> String {
    format!("{}/{}", run.manifest.task, run.manifest.run_id)
}

// A deployment's capacity search is compared with the baseline's search of the same
// deployment, not level by level (each run probes its own levels). A search that did not
// finish has no figure (its deployment is `missing`).

/// A search's figure `metric`; `None` for an unfinished search or another metric.
fn figure(s: &RunSearch, metric: &str) -> Option<f64> {
    if !s.finished {
        return None;
    }
    match metric {
        "capacity" => Some(s.record.max_passing.unwrap_or(0.0)),
        "capacity_output_throughput" => Some(
            s.record
                .throughput_at_edge
                .map_or(0.0, |t| t.output_throughput),
        ),
        _ => None,
    }
}

/// Whether `row` is a level of a search of `run` (gated through the search instead).
fn searched(run: &Run, row: &Row) -> bool {
    run.searches.iter().any(|s| s.deployment == row.deployment)
}

fn search_key(s: &RunSearch) -> String {
    let label = s.label();
    if label.is_empty() {
        "search".to_string()
    } else {
        format!("search {label}")
    }
}

/// Each baseline search against the current run's search of the same deployment, for every
/// threshold on a search metric.
fn compare_searches(current: &Run, baseline: &Run, thresholds: &[Threshold]) -> Vec<Comparison> {
    let mut out = Vec::new();
    for base in &baseline.searches {
        let k = search_key(base);
        let cur = current.searches.iter().find(|s| search_key(s) == k);
        for t in thresholds
            .iter()
            .filter(|t| SEARCH_METRICS.contains(&t.metric.as_str()))
        {
            let b = figure(base, &t.metric);
            let c = cur.and_then(|s| figure(s, &t.metric));
            let delta = match (b, c) {
                (Some(b), Some(c)) if b != 0.0 => Some((c - b) / b),
                _ => None,
            };
            let allowed = t.limit.abs();
            let verdict = match (b, c) {
                (None, _) => Verdict::NoBaseline,
                (_, None) => Verdict::Missing,
                (Some(b), Some(c)) => {
                    // From a baseline of 0, any drop is all of it.
                    let d = delta.unwrap_or(if c < b { -1.0 } else { 0.0 });
                    match beyond(t.limit, (d, d), allowed) {
                        Ordering::Greater => Verdict::Regressed,
                        Ordering::Less => Verdict::Improved,
                        Ordering::Equal => Verdict::Ok,
                    }
                }
            };
            out.push(Comparison {
                point: k.clone(),
                metric: t.metric.clone(),
                baseline: b,
                current: c,
                delta,
                allowed,
                noise: 0.0,
                interval: None,
                repetitions: (usize::from(c.is_some()), usize::from(b.is_some())),
                verdict,
            });
        }
    }
    out
}
