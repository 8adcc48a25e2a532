//! Thresholds of the regression gate: `METRIC=-N%` / `METRIC=+N%` parsed from flags or the
//! task file, the metrics they may name and the defaults; and check's input errors.

use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

use crate::archive::value_text;
use crate::units::number;

/// Metrics a threshold may name (vllm bench serve summary fields): the latency, throughput
/// and goodput (`request_goodput`, points with SLOs) columns of summary.csv (its first two,
/// the request counts, are not gated).
pub const METRICS: &[&str] = crate::archive::CSV_METRICS.split_at(2).1;

/// The metrics a threshold may name for a capacity search: `capacity` is the interval's
/// lower bound (the largest passing level, 0 when even the first level failed),
/// `capacity_output_throughput` the output tokens per second there; both higher-is-better.
pub const SEARCH_METRICS: &[&str] = &["capacity", "capacity_output_throughput"];

/// What `check` gates on a search run when no threshold is given.
pub const DEFAULT_SEARCH_THRESHOLD: &str = "capacity=-5%";

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
    #[error("threshold metric `{metric}` is unknown; use one of: {}, or for a capacity search {}", METRICS.join(", "), SEARCH_METRICS.join(", "))]
    UnknownMetric { metric: String },
    #[error(
        "the baseline is the run {run} itself; pick another baseline (`previous`, a run id, a tag or a run directory)"
    )]
    SameRun { run: String },
    #[error(
        "baseline {baseline} (status {status}) has no valid completed point with a value of the gated metrics; pick another baseline"
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
        if !METRICS.contains(&metric) && !SEARCH_METRICS.contains(&metric) {
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
        // Goodput is gated like any other metric (higher is better).
        let task =
            serde_json::json!({"benchmark": {"check": {"thresholds": {"request_goodput": "-5%"}}}});
        let t = thresholds_from_task(&task).unwrap().unwrap();
        assert_eq!(t[0].metric, "request_goodput");
        assert_eq!(t[0].limit, -0.05);
    }
}
