//! Re-scoring an archived run without running it again (`report --goodput/--trim`, and the
//! same flags of `compare` and `check`): every point's goodput, attainment and measured
//! window recomputed from its request records (`requests.jsonl`) under new goodput SLOs or a
//! new warm-up and cool-down, and every capacity search's levels judged again under them.
//! The archive is not changed: the re-scored figures live in the [`Run`] read from it.

use std::time::Duration;

use serde_json::Value;

use super::ArchiveError;
use super::fold::Run;
use super::read::{PointSummary, read_point_summary};
use super::requests::read_requests;
use crate::load::Slo;
use crate::metrics::{SummaryOptions, summarize};
use crate::search::{Measurement, Probe, Search};

/// What to score differently; `None` keeps each point's own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rescore {
    /// Goodput SLOs (and a search's attainment bounds).
    pub goodput: Option<Vec<Slo>>,
    /// Warm-up and cool-down excluded from the measured window.
    pub trim: Option<(Duration, Duration)>,
}

/// The summary keys a re-score replaces (`metrics::Summary`'s names).
const RESCORED: &[&str] = &["request_goodput", "goodput", "trimmed"];

impl Rescore {
    /// Nothing to re-score.
    pub fn is_empty(&self) -> bool {
        self.goodput.is_none() && self.trim.is_none()
    }

    /// `--trim WARMUP[:COOLDOWN]`: `30s:10s`, or `30s` (no cool-down).
    pub fn parse_trim(text: &str) -> Result<(Duration, Duration), String> {
        let (w, c) = text.split_once(':').unwrap_or((text, "0s"));
        let d = |s: &str| {
            crate::units::parse_duration(s.trim())
                .map_err(|e| format!("--trim `{text}`: {e}; write WARMUP[:COOLDOWN], like 30s:10s"))
        };
        Ok((d(w)?, d(c)?))
    }

    /// `goodput TTFT <= 2000 ms; trimmed 30 s : 10 s`, for the report.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(g) = &self.goodput {
            parts.push(format!("goodput {}", crate::load::describe_slos(g)));
        }
        if let Some((w, c)) = self.trim {
            parts.push(format!(
                "warm-up {} and cool-down {} trimmed",
                crate::units::format_duration(w),
                crate::units::format_duration(c)
            ));
        }
        parts.join(", ")
    }

    /// The summary options of a point planned as `load`, with the new SLOs and trim.
    fn options(&self, load: &crate::plan::LoadPlan) -> SummaryOptions {
        let (warmup, cooldown) = self
            .trim
            .unwrap_or((load.shape.warmup, load.shape.cooldown));
        SummaryOptions {
            percentiles: load.percentiles.clone(),
            goodput: self.goodput.clone().unwrap_or_else(|| load.goodput.clone()),
            warmup,
            cooldown,
        }
    }
}

/// Re-score `run` in place (a no-op for an empty `how`). A point without a planned load (an
/// imported run's) or without request records keeps its figures.
pub fn rescore(run: &mut Run, how: &Rescore) -> Result<(), ArchiveError> {
    if how.is_empty() {
        return Ok(());
    }
    for row in &mut run.rows {
        let mut k = 0;
        for point in run
            .manifest
            .points
            .iter()
            .filter(|p| p.id == row.id && p.deployment == row.deployment)
        {
            if read_point_summary(&run.dir, &point.dir)?.is_none() {
                continue;
            }
            let dir = run.dir.join("points").join(&point.dir);
            if let (Some(load), true, Some(summary)) = (
                point.load_plan(),
                dir.join("requests.jsonl").is_file(),
                row.summaries.get_mut(k),
            ) {
                let records = read_requests(&dir)?;
                let options = how.options(load);
                *summary = overlay(summary, &serde_json::json!(summarize(&records, &options)));
            }
            k += 1;
        }
    }
    for s in &mut run.searches {
        let mut spec = s.record.config.clone();
        if let (Some(a), Some(g)) = (&mut spec.attainment, &how.goodput) {
            a.bounds = g.clone();
        }
        let mut search = Search::new(spec);
        let entry = run
            .manifest
            .deployments
            .iter()
            .find(|d| d.id == s.deployment)
            .and_then(|d| d.search.clone())
            .unwrap_or_default();
        for (it, dir) in s.record.iterations.iter().zip(&entry.points) {
            let Some(point) = run.manifest.points.iter().find(|p| &p.dir == dir) else {
                continue;
            };
            let Some(load) = point.load_plan() else {
                continue;
            };
            let records = read_requests(&run.dir.join("points").join(dir))?;
            let mut shape = load.shape.clone();
            (shape.warmup, shape.cooldown) = how.trim.unwrap_or((shape.warmup, shape.cooldown));
            let probe = Probe {
                iteration: it.iteration_idx,
                level: it.level,
                repetition: it.repetition,
                redeploy: it.redeploy,
                step: it.step,
            };
            search.record(&probe, Measurement::of(&records, &shape));
        }
        let mut record = search.result(s.record.elapsed_s);
        record.convergence_reason = s.record.convergence_reason;
        s.record = record;
    }
    run.rescored = Some(how.describe());
    Ok(())
}

/// `summary` with the re-scored keys of `fresh` (a `metrics::Summary` as JSON).
fn overlay(summary: &PointSummary, fresh: &Value) -> PointSummary {
    let mut value = summary.to_value();
    if let Value::Object(o) = &mut value {
        for key in RESCORED {
            o.insert(
                (*key).to_string(),
                fresh.get(*key).cloned().unwrap_or(Value::Null),
            );
        }
    }
    PointSummary::from_json(&value)
}
