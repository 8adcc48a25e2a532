//! A run's capacity searches (`benchmark.search`) in the report: per deployment the
//! interval, the binding SLO, the throughput at the edge, whether the edge is a cliff and why
//! the search stopped; its history (each measurement: the level, why it was chosen, the
//! requests judged, the level's verdict after it); and a chart of each level's worst SLO
//! score (observed / limit: at most 1 passes) against the level, the interval shaded.

use serde::Serialize;

use super::charts::RenderedChart;
use super::data::Run;
use super::svg::{self, Axis, Band, Chart, Point, Scale, Series};
use crate::archive::RunSearch;
use crate::units::number;

/// One search as the templates see it.
#[derive(Debug, Clone, Serialize)]
pub struct SearchSection {
    pub run: String,
    pub deployment: String,
    /// `[16, 17] concurrency (6.3% wide), bound by p90 TPOT <= 30 ms, smooth`.
    pub headline: String,
    pub finished: bool,
    /// `precision_reached`, ...
    pub convergence: String,
    /// Output and request throughput at the largest passing level, as text.
    pub throughput: String,
    pub points: usize,
    pub measurements: usize,
    pub elapsed: String,
    pub history: Vec<HistoryRow>,
    /// The chart's file under plots/, and its SVG (inlined in HTML).
    pub chart_file: String,
    pub chart_svg: String,
}

/// One measurement of a search.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryRow {
    pub n: usize,
    pub level: String,
    pub step: String,
    pub redeploy: bool,
    pub requests: u64,
    /// `pass`, `fail` or `inconclusive`: the level's verdict after this measurement.
    pub verdict: String,
    /// Each SLO: `p90 tpot 31.2 ms [30.1, 32.4] vs 30`.
    pub checks: String,
}

fn json_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn history(s: &RunSearch) -> Vec<HistoryRow> {
    s.record
        .iterations
        .iter()
        .map(|it| HistoryRow {
            n: it.iteration_idx + 1,
            level: number(it.level),
            step: json_name(&it.step),
            redeploy: it.redeploy,
            requests: it.requests,
            verdict: json_name(&it.verdict),
            checks: it
                .checks
                .iter()
                .map(|c| {
                    let b = |x: Option<f64>| x.map_or("-".into(), number);
                    format!(
                        "{} {} {} [{}, {}] vs {}",
                        c.stat,
                        c.metric_tag,
                        number(c.observed),
                        b(c.ci_low),
                        b(c.ci_high),
                        number(c.threshold)
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        })
        .collect()
}

/// Largest score drawn: a level whose percentile falls on misses scores infinitely.
const SCORE_CAP: f64 = 4.0;

fn chart(s: &RunSearch, title: &str) -> Chart {
    let r = &s.record;
    let point = |p: &crate::search::Point| Point {
        x: p.level,
        y: p.checks
            .iter()
            .map(|c| c.score)
            .fold(0.0, f64::max)
            .min(SCORE_CAP),
        valid: true,
        label: format!("{}={} ({:?})", r.swept_param, number(p.level), p.verdict),
    };
    let series = |name: &str, style: usize, feasible: bool| Series {
        name: name.to_string(),
        style,
        points: r
            .all_points
            .iter()
            .filter(|p| p.feasible == feasible)
            .map(point)
            .collect(),
    };
    let bands = match (r.max_passing, r.first_failing) {
        (Some(p), Some(f)) => vec![Band {
            from: p,
            to: f,
            label: "interval".into(),
            fill: "#e0ecf8",
        }],
        _ => Vec::new(),
    };
    Chart {
        title: title.to_string(),
        x: Axis {
            label: r.swept_param.clone(),
            scale: Scale::Log2,
        },
        y: Axis {
            label: "worst SLO score (observed / limit; <= 1 passes)".into(),
            scale: Scale::Linear,
        },
        series: vec![series("pass", 2, true), series("fail", 1, false)],
        bands,
    }
}

/// The search sections of `runs`, in run and deployment order.
pub fn search_sections(runs: &[Run]) -> Vec<SearchSection> {
    let mut out = Vec::new();
    for run in runs {
        for s in &run.searches {
            let label = s.label();
            let deployment = if label.is_empty() {
                s.deployment.clone()
            } else {
                format!("{} ({label})", s.deployment)
            };
            let title = format!("Capacity search: {} {deployment}", run.label);
            let slug: String = format!("{}-{}", run.label, s.deployment)
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            let r = &s.record;
            out.push(SearchSection {
                run: run.label.clone(),
                deployment,
                headline: r.headline(),
                finished: s.finished,
                convergence: json_name(&r.convergence_reason),
                throughput: r.throughput_at_edge.map_or("-".into(), |t| {
                    format!(
                        "{} output tok/s, {} req/s",
                        number(t.output_throughput),
                        number(t.request_throughput)
                    )
                }),
                points: r.points,
                measurements: r.measurements,
                elapsed: format!("{} s", number(r.elapsed_s)),
                history: history(s),
                chart_file: format!("search_{slug}.svg"),
                chart_svg: svg::render(&chart(s, &title)),
            });
        }
    }
    out
}

/// The search charts, to write under plots/.
pub fn search_charts(sections: &[SearchSection]) -> Vec<RenderedChart> {
    sections
        .iter()
        .map(|s| RenderedChart {
            title: format!("Capacity search: {} {}", s.run, s.deployment),
            file: s.chart_file.clone(),
            svg: s.chart_svg.clone(),
        })
        .collect()
}
