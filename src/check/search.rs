//! The capacity search in the gate: a deployment's search (`benchmark.search`) is compared
//! with the baseline's search of the same deployment, not level by level (each run probes
//! its own levels). `capacity` is the interval's lower bound, the largest passing level (0
//! when even the first level failed); `capacity_output_throughput` the output tokens per
//! second there. Both are higher-is-better: `capacity=-5%` fails when the lower bound fell by
//! more than 5%. A search that did not finish has no figure (its deployment is `missing`).

use std::cmp::Ordering;

use super::interval::beyond;
use super::{Comparison, Threshold, Verdict};
use crate::archive::{Row, Run, RunSearch};

/// The metrics a threshold may name for a search.
pub const SEARCH_METRICS: &[&str] = &["capacity", "capacity_output_throughput"];

/// What `check` gates on a search run when no threshold is given.
pub const DEFAULT_SEARCH_THRESHOLD: &str = "capacity=-5%";

/// A search's figure `metric`; `None` for an unfinished search or another metric.
pub(super) fn figure(s: &RunSearch, metric: &str) -> Option<f64> {
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
pub(super) fn searched(run: &Run, row: &Row) -> bool {
    run.searches.iter().any(|s| s.deployment == row.deployment)
}

fn key(s: &RunSearch) -> String {
    let label = s.label();
    if label.is_empty() {
        "search".to_string()
    } else {
        format!("search {label}")
    }
}

/// Each baseline search against the current run's search of the same deployment, for every
/// threshold on a search metric.
pub(super) fn compare_searches(
    current: &Run,
    baseline: &Run,
    thresholds: &[Threshold],
) -> Vec<Comparison> {
    let mut out = Vec::new();
    for base in &baseline.searches {
        let k = key(base);
        let cur = current.searches.iter().find(|s| key(s) == k);
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
