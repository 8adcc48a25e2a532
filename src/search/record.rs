//! The result of a search as it is archived (`slo_search.json`) and read back by the report
//! and `check`: the interval [largest passing, smallest failing], the binding SLO, the
//! throughput at the edge, whether the edge is a cliff, every level and every measurement.
//! A superset of AIPerf's `search_history.json` (`iterations`, `boundary_summary`,
//! `convergence_reason`) and `sla_breach.json` (`max_passing_<axis>`,
//! `first_failing_<axis>`, `first_failing_breach`, `all_points`, `monotonicity_check`).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::algorithm::{Convergence, Iteration, Search};
use super::level::{Bracket, Level, Throughput};
use super::verdict::{Check, Verdict};
use crate::load::search::SearchSpec;

/// One level of the search (AIPerf's `all_points[]` entry, plus ours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub level: f64,
    pub feasible: bool,
    pub verdict: Verdict,
    pub measurements: u32,
    pub deployments: u32,
    /// Requests judged over all its measurements (misses included).
    pub requests: u64,
    pub checks: Vec<Check>,
    /// The checks that did not pass.
    pub breaches: Vec<Check>,
    #[serde(flatten)]
    pub throughput: Throughput,
}

/// An end of the interval (AIPerf's `feasible_max` / `infeasible_min`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub value: f64,
    pub iteration_idx: usize,
    /// Output tokens per second there.
    pub objective_value: f64,
    /// At the failing end: the SLO that failed worst.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_breach: Option<Check>,
}

/// Where the boundary lies (AIPerf's `boundary_summary`, plus the interval's width).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Boundary {
    pub swept_dim_path: String,
    pub feasible_max: Option<Edge>,
    pub infeasible_min: Option<Edge>,
    /// `cliff` or `smooth`; absent without both ends.
    pub boundary_type: Option<String>,
    /// The SLO that decides the edge, as written (`p99 TPOT <= 40 ms`).
    pub binding_constraint: Option<String>,
    /// infeasible_min / feasible_max - 1.
    pub relative_width: Option<f64>,
}

/// The archived result of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRecord {
    pub config: SearchSpec,
    pub swept_param: String,
    /// Largest passing level; `None` when `min` failed.
    pub max_passing: Option<f64>,
    /// Smallest failing level; `None` when every level passed.
    pub first_failing: Option<f64>,
    /// True when the edge is a cliff: the binding score grows more than twice as fast as the
    /// load across the interval, or the failing end has misses at its percentile.
    pub cliff: Option<bool>,
    /// Throughput at the largest passing level.
    pub throughput_at_edge: Option<Throughput>,
    pub boundary_summary: Boundary,
    pub monotonicity_check: bool,
    pub convergence_reason: Convergence,
    /// Distinct levels measured, and measurements in all (repetitions included).
    pub points: usize,
    pub measurements: usize,
    /// Wall-clock seconds the search took (set by the driver).
    pub elapsed_s: f64,
    pub all_points: Vec<Point>,
    pub iterations: Vec<Iteration>,
}

fn point(l: &Level) -> Point {
    Point {
        level: l.level,
        feasible: l.passes(),
        verdict: l.verdict,
        measurements: l.measurements,
        deployments: l.deployments,
        requests: l.samples.len() as u64,
        checks: l.checks.clone(),
        breaches: l
            .checks
            .iter()
            .filter(|c| c.verdict != Verdict::Pass)
            .cloned()
            .collect(),
        throughput: l.throughput(),
    }
}

fn describe(c: &Check) -> String {
    if c.op == "ge" {
        format!(
            "attainment >= {}%",
            crate::units::number(c.threshold * 100.0)
        )
    } else {
        format!(
            "{} {} <= {} ms",
            c.stat,
            c.metric_tag.to_uppercase(),
            crate::units::number(c.threshold)
        )
    }
}

impl Search {
    /// The result so far (final once `next_probe` returned `None`).
    pub fn result(&self, elapsed_s: f64) -> SearchRecord {
        let spec = &self.spec;
        let b = Bracket::of(&self.levels, spec);
        let pass = b.pass.map(|i| &self.levels[i]);
        let fail = b.fail.map(|i| &self.levels[i]);
        let edge = |l: &Level, breach: bool| Edge {
            value: l.level,
            iteration_idx: l.first_iteration,
            objective_value: l.throughput().output_throughput,
            first_breach: breach.then(|| l.binding().cloned()).flatten(),
        };
        let cliff = match (pass, fail) {
            (Some(p), Some(f)) => {
                let (sp, sf) = (p.score().max(1e-9), f.score());
                Some(!sf.is_finite() || sf / sp > 2.0 * f.level / p.level)
            }
            _ => None,
        };
        let binding = fail.or(pass).and_then(|l| l.binding()).map(describe);
        let mut all_points: Vec<Point> = self.levels.iter().map(point).collect();
        all_points.sort_by(|a, b| a.level.total_cmp(&b.level));
        SearchRecord {
            config: spec.clone(),
            swept_param: spec.axis.name().to_string(),
            max_passing: pass.map(|l| l.level),
            first_failing: fail.map(|l| l.level),
            cliff,
            throughput_at_edge: pass.map(|l| l.throughput()),
            boundary_summary: Boundary {
                swept_dim_path: spec.axis.name().to_string(),
                feasible_max: pass.map(|l| edge(l, false)),
                infeasible_min: fail.map(|l| edge(l, true)),
                boundary_type: cliff.map(|c| if c { "cliff" } else { "smooth" }.to_string()),
                binding_constraint: binding,
                relative_width: pass.zip(fail).map(|(p, f)| f.level / p.level - 1.0),
            },
            monotonicity_check: b.monotonic,
            convergence_reason: self.done.unwrap_or(Convergence::MaxPoints),
            points: self.levels.len(),
            measurements: self.history.len(),
            elapsed_s,
            all_points,
            iterations: self.history.clone(),
        }
    }
}

impl SearchRecord {
    /// The JSON written to the archive: the record plus AIPerf's `sla_breach.json` keys named
    /// for the axis (`max_passing_concurrency`, `first_failing_concurrency`,
    /// `first_failing_breach`) and its `variation_values` in each iteration.
    pub fn to_json(&self) -> Value {
        let mut v = json!(self);
        let axis = &self.swept_param;
        if let Value::Object(m) = &mut v {
            m.insert(format!("max_passing_{axis}"), json!(self.max_passing));
            m.insert(format!("first_failing_{axis}"), json!(self.first_failing));
            m.insert(
                "first_failing_breach".into(),
                json!(
                    self.boundary_summary
                        .infeasible_min
                        .as_ref()
                        .and_then(|e| e.first_breach.clone())
                ),
            );
            if let Some(Value::Array(its)) = m.get_mut("iterations") {
                for it in its {
                    let level = it.get("level").cloned();
                    if let (Value::Object(o), Some(level)) = (it, level) {
                        let mut values = serde_json::Map::new();
                        values.insert(axis.clone(), level);
                        o.insert("variation_values".into(), Value::Object(values));
                    }
                }
            }
        }
        v
    }

    /// `[296, 322] concurrency (8.8% wide), bound by p99 TPOT <= 40 ms, smooth`.
    pub fn headline(&self) -> String {
        let n = |x: Option<f64>| x.map_or("-".to_string(), crate::units::number);
        let mut s = format!(
            "[{}, {}] {}",
            n(self.max_passing),
            n(self.first_failing),
            self.swept_param
        );
        if let Some(w) = self.boundary_summary.relative_width {
            s.push_str(&format!(" ({:.1}% wide)", w * 100.0));
        }
        if let Some(b) = &self.boundary_summary.binding_constraint {
            s.push_str(&format!(", bound by {b}"));
        }
        if let Some(t) = &self.boundary_summary.boundary_type {
            s.push_str(&format!(", {t}"));
        }
        s
    }
}
