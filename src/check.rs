//! The regression gate: compare a run with a baseline run, point by point and metric by
//! metric, against direction-aware thresholds (`output_throughput=-5%`: a drop of more than
//! 5 % regresses; `p99_ttft_ms=+10%`: a rise of more than 10 % regresses). Noise-aware: it
//! compares medians over repetitions and widens a threshold to `k x` the observed spread
//! (largest deviation of a repetition from its median, in either run), so run-to-run noise
//! alone does not fail the gate. Renders the verdict as markdown and JUnit XML. Pure: the
//! CLI (cli/check.rs) resolves runs, writes files and maps the verdict to exit codes.

use std::fmt::Write as _;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

use crate::archive::{Row, Run, value_text};
use crate::units::number;

/// Metrics a threshold may name (vllm bench serve summary fields): the latency and
/// throughput columns of summary.csv (its first two, the request counts, are not gated).
pub const METRICS: &[&str] = crate::archive::CSV_METRICS.split_at(2).1;

/// Used when neither flags nor the task file give thresholds.
pub const DEFAULT_THRESHOLDS: &[&str] = &[
    "output_throughput=-5%",
    "p99_ttft_ms=+10%",
    "p99_tpot_ms=+10%",
    "mean_e2el_ms=+10%",
];

/// Bad check input.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(
        "threshold `{text}` is not `METRIC=+N%` or `METRIC=-N%` (e.g. output_throughput=-5%, p99_ttft_ms=+10%): {reason}"
    )]
    Syntax { text: String, reason: String },
    #[error("threshold metric `{metric}` is unknown; use one of: {}", METRICS.join(", "))]
    UnknownMetric { metric: String },
    #[error(
        "the baseline is the run {run} itself; pick another baseline (`previous`, a run id, a tag or a run directory)"
    )]
    SameRun { run: String },
    #[error(
        "baseline {baseline} (status {status}) has no valid completed point to compare with; pick another baseline"
    )]
    NoBaseline { baseline: String, status: String },
}

/// One metric's allowed change. The sign says which way is worse.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Threshold {
    pub metric: String,
    /// Signed fraction: -0.05 = a drop of more than 5 % regresses (higher is better);
    /// +0.10 = a rise of more than 10 % regresses (lower is better).
    pub limit: f64,
}

impl FromStr for Threshold {
    type Err = CheckError;

    fn from_str(text: &str) -> Result<Self, CheckError> {
        let syntax = |reason: &str| CheckError::Syntax {
            text: text.into(),
            reason: reason.into(),
        };
        let (metric, limit) = text.split_once('=').ok_or_else(|| syntax("no `=`"))?;
        let metric = metric.trim();
        let limit = limit.trim();
        let sign = match limit.chars().next() {
            Some('+') => 1.0,
            Some('-') => -1.0,
            _ => {
                return Err(syntax(
                    "the limit needs a sign: + (lower is better) or - (higher is better)",
                ));
            }
        };
        let pct = limit[1..]
            .strip_suffix('%')
            .ok_or_else(|| syntax("the limit must end with %"))?;
        let pct: f64 = pct
            .trim()
            .parse()
            .map_err(|_| syntax("the limit is not a number"))?;
        if !pct.is_finite() || pct < 0.0 {
            return Err(syntax(
                "the limit must be a finite, non-negative percentage",
            ));
        }
        if !METRICS.contains(&metric) {
            return Err(CheckError::UnknownMetric {
                metric: metric.into(),
            });
        }
        Ok(Self {
            metric: metric.into(),
            limit: sign * pct / 100.0,
        })
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.limit < 0.0 { '-' } else { '+' };
        write!(
            f,
            "{}={sign}{}%",
            self.metric,
            number(self.limit.abs() * 100.0)
        )
    }
}

/// Parse thresholds (flags or task file entries).
pub fn parse_thresholds<S: AsRef<str>>(texts: &[S]) -> Result<Vec<Threshold>, CheckError> {
    texts.iter().map(|t| t.as_ref().parse()).collect()
}

/// Thresholds from a resolved task: `benchmark: {check: {thresholds: {output_throughput:
/// "-5%", ...}}}` (also accepted as top-level `check.thresholds` or `benchmark.thresholds`).
/// `None` when the task has none.
pub fn thresholds_from_task(resolved: &Value) -> Option<Result<Vec<Threshold>, CheckError>> {
    let map = [
        "/benchmark/check/thresholds",
        "/check/thresholds",
        "/benchmark/thresholds",
    ]
    .iter()
    .find_map(|p| resolved.pointer(p))?
    .as_object()?;
    let texts: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect();
    Some(parse_thresholds(&texts))
}

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
            status: value_text(&serde_json::to_value(baseline.manifest.status).expect("status")),
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
        let k = key(base);
        let cur = current.rows.iter().find(|r| key(r) == k);
        for t in thresholds {
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
            let allowed = t.limit.abs().max(noise_k * noise);
            let delta = match (b, c) {
                (Some(b), Some(c)) if b != 0.0 => Some((c - b) / b),
                _ => None,
            };
            // An invalid point fails the gate whatever the baseline says.
            let verdict = if cur.is_some_and(|r| r.valid == Some(false)) {
                Verdict::Invalid
            } else if b.is_none() {
                Verdict::NoBaseline
            } else if c.is_none() {
                Verdict::Missing
            } else {
                // Worse is the direction of the threshold's sign.
                let d = delta.unwrap_or(0.0);
                let worse = if t.limit < 0.0 { -d } else { d };
                if worse > allowed + 1e-12 {
                    Verdict::Regressed
                } else if -worse > allowed + 1e-12 {
                    Verdict::Improved
                } else {
                    Verdict::Ok
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
                verdict,
            });
        }
    }
    let mut new_points = Vec::new();
    for row in &current.rows {
        let k = key(row);
        if baseline.rows.iter().any(|b| key(b) == k) {
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
    }
}

fn run_name(run: &Run) -> String {
    format!("{}/{}", run.manifest.task, run.manifest.run_id)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |d| format!("{:+.1}%", d * 100.0))
}

fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Ok => "ok",
        Verdict::Improved => "improved",
        Verdict::Regressed => "**REGRESSED**",
        Verdict::Missing => "**MISSING**",
        Verdict::Invalid => "**INVALID**",
        Verdict::NoBaseline => "no baseline",
    }
}

/// A markdown summary fit for a CI job summary.
pub fn markdown(report: &CheckReport) -> String {
    let mut out = String::new();
    let failures = report.failures();
    let _ = writeln!(
        out,
        "## orchestrate check: {}\n",
        if failures == 0 {
            "passed"
        } else {
            "REGRESSION"
        }
    );
    let _ = writeln!(
        out,
        "Run `{}` against baseline `{}`: {} comparisons, {} failing.\n",
        report.current,
        report.baseline,
        report.comparisons.len(),
        failures
    );
    let thresholds: Vec<String> = report.thresholds.iter().map(|t| format!("`{t}`")).collect();
    let _ = writeln!(
        out,
        "Thresholds: {}. Medians over repetitions; a threshold widens to {} x the observed spread (largest deviation of a repetition from its median) when that is larger.\n",
        thresholds.join(", "),
        number(report.noise_k)
    );
    let _ = writeln!(
        out,
        "| Point | Metric | Baseline | Current | Change | Allowed | Spread | Reps (cur/base) | Verdict |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|:---:|---|");
    // Failures first, then the rest in order.
    let mut rows: Vec<&Comparison> = report.comparisons.iter().collect();
    rows.sort_by_key(|c| !c.verdict.fails());
    for c in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | ±{:.1}% | {:.1}% | {}/{} | {} |",
            c.point,
            c.metric,
            c.baseline.map_or("-".into(), number),
            c.current.map_or("-".into(), number),
            pct(c.delta),
            c.allowed * 100.0,
            c.noise * 100.0,
            c.repetitions.0,
            c.repetitions.1,
            verdict_text(c.verdict)
        );
    }
    if !report.new_points.is_empty() {
        let _ = writeln!(
            out,
            "\nPoints only in this run (not gated): {}",
            report.new_points.join("; ")
        );
    }
    out
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// JUnit XML: one test case per point x metric; failures carry the numbers.
pub fn junit(report: &CheckReport) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"orchestrate check\" tests=\"{n}\" failures=\"{f}\">\n<testsuite name=\"{}\" tests=\"{n}\" failures=\"{f}\" skipped=\"{s}\">",
        xml(&format!("{} vs {}", report.current, report.baseline)),
        n = report.comparisons.len(),
        f = report.failures(),
        s = report
            .comparisons
            .iter()
            .filter(|c| c.verdict == Verdict::NoBaseline)
            .count(),
    );
    for c in &report.comparisons {
        let _ = write!(
            out,
            "<testcase classname=\"{}\" name=\"{}\">",
            xml(&c.point),
            xml(&c.metric)
        );
        let detail = format!(
            "baseline {} current {} change {} allowed ±{:.1}% spread {:.1}%",
            c.baseline.map_or("-".into(), number),
            c.current.map_or("-".into(), number),
            pct(c.delta),
            c.allowed * 100.0,
            c.noise * 100.0
        );
        match c.verdict {
            v if v.fails() => {
                let _ = write!(
                    out,
                    "<failure message=\"{}\">{}</failure>",
                    xml(&format!("{:?}: {detail}", v).to_lowercase()),
                    xml(&detail)
                );
            }
            Verdict::NoBaseline => out.push_str("<skipped message=\"no valid baseline value\"/>"),
            _ => {}
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_with_direction() {
        let t: Threshold = "output_throughput=-5%".parse().unwrap();
        assert_eq!(t.limit, -0.05);
        let t: Threshold = "p99_ttft_ms = +10%".parse().unwrap();
        assert_eq!(t.limit, 0.10);
        assert_eq!(t.to_string(), "p99_ttft_ms=+10%");
        for bad in [
            "p99_ttft_ms",
            "p99_ttft_ms=10%",
            "p99_ttft_ms=+10",
            "p99_ttft_ms=+x%",
        ] {
            let err = bad.parse::<Threshold>().unwrap_err().to_string();
            assert!(err.contains("is not `METRIC=+N%`"), "{bad}: {err}");
        }
        let err = "ttft=+1%".parse::<Threshold>().unwrap_err().to_string();
        assert!(err.contains("unknown"), "{err}");
    }

    #[test]
    fn task_thresholds_are_read() {
        let task = serde_json::json!({"benchmark": {"check": {"thresholds": {"output_throughput": "-3%"}}}});
        let t = thresholds_from_task(&task).unwrap().unwrap();
        assert_eq!(
            t,
            vec![Threshold {
                metric: "output_throughput".into(),
                limit: -0.03
            }]
        );
        assert!(thresholds_from_task(&serde_json::json!({})).is_none());
    }
}
