//! The Pareto view, as InferenceX draws it: per ISL:OSL, every point's output throughput per
//! GPU against its interactivity (1000 / median TPOT: the tokens per second one user sees),
//! one curve per run and deployment, the Pareto frontier of the valid points (no other valid
//! point is at least as interactive and at least as productive, and better in one) and, when
//! percentile SLOs are known (`--slo`, else the runs' capacity searches), the frontier of the
//! valid points that meet them. A point's GPUs are its telemetry's `gpu_count`, else its
//! deployment's planned `gpus`; when any plotted point has neither, the whole chart plots
//! output throughput per deployment and says so. Owns the points, frontiers, the frontier
//! tables and `pareto.json`; the SLO verdicts are `slo`'s, drawing `svg`'s, the curves'
//! naming `charts`'.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ReportError;
use super::charts::{Curve, RenderedChart, curves, groups, valid};
use super::data::{Group, Row, Run};
use super::slo::{Meets, judge, slos_for};
use super::svg::{self, Axis, Chart, Point, Scale, Series};
use super::table::markdown_grid;
use crate::load::search::PercentileSlo;
use crate::units::number;

/// The file beside report.md / compare.md with the view's numbers, for scripts.
pub const PARETO_JSON: &str = "pareto.json";

/// Styles of the frontiers in svg's palette: black, solid, circles; brown, dashed, squares.
const FRONTIER_STYLE: usize = 6;
const SLO_FRONTIER_STYLE: usize = 7;

/// One plotted point.
#[derive(Debug, Clone, Serialize)]
pub struct ParetoPoint {
    /// Its curve: the run's label, then the deployment's axes.
    pub series: String,
    pub deployment: String,
    /// The point id, e.g. `concurrency=16`.
    pub point: String,
    /// 1000 / median TPOT (mean TPOT when no median): tok/s per user.
    pub interactivity: f64,
    /// The whole deployment's output throughput (tok/s).
    pub output_throughput: f64,
    /// GPUs it ran on (telemetry, else the plan); `None`: unknown.
    pub gpus: Option<f64>,
    /// What the chart plots: output throughput per GPU, or per deployment when the group's
    /// `per_gpu` is false.
    pub throughput: f64,
    /// Completed and passed its validity gates (or was not judged).
    pub valid: bool,
    /// Against the SLOs; `None` when no SLOs are known.
    pub meets_slo: Option<Meets>,
    pub on_frontier: bool,
    pub on_slo_frontier: bool,
    /// The curve's style index (the same as in the other charts).
    #[serde(skip)]
    style: usize,
}

/// One ISL:OSL group's view (what `pareto.json` holds per group).
#[derive(Debug, Clone, Serialize)]
pub struct ParetoGroup {
    /// `1000:1000`.
    pub group: String,
    pub title: String,
    /// True: throughput per GPU; false: per deployment (some point's GPU count unknown).
    pub per_gpu: bool,
    pub y_label: String,
    pub notes: Vec<String>,
    pub points: Vec<ParetoPoint>,
    /// The valid point with the most throughput among those that meet the SLOs.
    pub best_within_slo: Option<ParetoPoint>,
    /// Under plots/.
    pub chart_file: String,
}

/// A group as the templates see it: the data, the frontier table and the chart.
#[derive(Debug, Clone, Serialize)]
pub struct ParetoSection {
    #[serde(flatten)]
    pub data: ParetoGroup,
    pub headers: Vec<String>,
    /// The Pareto frontier, in interactivity order.
    pub rows: Vec<Vec<String>>,
    pub markdown: String,
    /// `Most throughput per GPU within the SLO: ...`; `None` without SLOs.
    pub best_line: Option<String>,
    pub chart_svg: String,
}

/// The whole view.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Pareto {
    pub slos: Vec<PercentileSlo>,
    /// `p99 TPOT <= 50 ms, p99 TTFT <= 2000 ms`; empty without SLOs.
    pub slo_text: String,
    /// Where the SLOs come from; `None` without SLOs.
    pub slo_source: Option<String>,
    pub sections: Vec<ParetoSection>,
}

/// The view of `runs`; SLOs from `given` (`--slo`) when any, else from the runs' searches.
pub fn pareto(runs: &[Run], given: &[PercentileSlo]) -> Pareto {
    let (slos, slo_source) = slos_for(runs, given);
    let curves = curves(runs);
    let groups = groups(&curves);
    let slo_text = slos
        .iter()
        .map(PercentileSlo::describe)
        .collect::<Vec<_>>()
        .join(", ");
    let sections = groups
        .iter()
        .filter_map(|g| section(&curves, g, &slos, &slo_text))
        .collect();
    Pareto {
        slos,
        slo_text,
        slo_source,
        sections,
    }
}

/// 1000 / median TPOT (mean TPOT when the summary has no median), tok/s per user.
fn interactivity(row: &Row) -> Option<f64> {
    let tpot = row
        .metric("median_tpot_ms")
        .or_else(|| row.metric("mean_tpot_ms"))?;
    (tpot > 0.0 && tpot.is_finite()).then(|| 1000.0 / tpot)
}

/// The GPUs a point ran on: its telemetry's count, else its deployment's planned GPUs.
fn gpus(row: &Row, run: &Run) -> Option<f64> {
    row.metric("gpu_count").filter(|g| *g > 0.0).or_else(|| {
        run.manifest
            .deployments
            .iter()
            .find(|d| d.id == row.deployment)
            .and_then(|d| d.gpus)
            .map(f64::from)
    })
}

/// Indices of the points passing `keep` that no other such point dominates (at least as
/// interactive and as productive, better in one), in interactivity order. Equal points
/// dominate neither other: both stay.
fn frontier(points: &[ParetoPoint], keep: impl Fn(&ParetoPoint) -> bool) -> Vec<usize> {
    let candidates: Vec<usize> = (0..points.len()).filter(|&i| keep(&points[i])).collect();
    let dominated = |p: &ParetoPoint| {
        candidates.iter().map(|&j| &points[j]).any(|q| {
            q.interactivity >= p.interactivity
                && q.throughput >= p.throughput
                && (q.interactivity > p.interactivity || q.throughput > p.throughput)
        })
    };
    let mut out: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| !dominated(&points[i]))
        .collect();
    out.sort_by(|&a, &b| {
        let (p, q) = (&points[a], &points[b]);
        p.interactivity
            .total_cmp(&q.interactivity)
            .then(q.throughput.total_cmp(&p.throughput))
    });
    out
}

/// Divide each point's throughput by its GPUs when every point knows them; else keep the
/// per-deployment figures and return the note that says so.
fn per_gpu(points: &mut [ParetoPoint]) -> Option<String> {
    if points.iter().all(|p| p.gpus.is_some()) {
        for p in points.iter_mut() {
            p.throughput = p.output_throughput / p.gpus.expect("checked");
        }
        return None;
    }
    let mut unknown: Vec<&str> = Vec::new();
    for p in points.iter().filter(|p| p.gpus.is_none()) {
        if !unknown.contains(&p.series.as_str()) {
            unknown.push(&p.series);
        }
    }
    Some(format!(
        "GPU count unknown for {}: throughput is per deployment (all its GPUs together), not per GPU. \
         GPU telemetry (`run --telemetry`) or `resources.gpu` in the task records it.",
        unknown.join(", ")
    ))
}

/// The points of one group: each curve's rows with both values, in concurrency order.
fn points_of(
    curves: &[Curve<'_>],
    group: &Group,
    slos: &[PercentileSlo],
    missing: &mut BTreeMap<String, usize>,
) -> Vec<ParetoPoint> {
    let mut points = Vec::new();
    for (style, c) in curves.iter().enumerate() {
        let mut rows: Vec<&Row> = c
            .rows
            .iter()
            .copied()
            .filter(|r| r.group == *group)
            .collect();
        rows.sort_by(|a, b| {
            a.concurrency
                .unwrap_or(0.0)
                .total_cmp(&b.concurrency.unwrap_or(0.0))
        });
        for row in rows {
            let (Some(x), Some(out)) = (interactivity(row), row.metric("output_throughput")) else {
                continue;
            };
            let mut lacking = Vec::new();
            let meets = (!slos.is_empty()).then(|| judge(row, slos, &mut lacking));
            for key in lacking {
                *missing.entry(key).or_default() += 1;
            }
            points.push(ParetoPoint {
                series: c.name.clone(),
                deployment: row.deployment.clone(),
                point: row.id.clone(),
                interactivity: x,
                output_throughput: out,
                gpus: gpus(row, c.run),
                throughput: out,
                valid: valid(row),
                meets_slo: meets,
                on_frontier: false,
                on_slo_frontier: false,
                style,
            });
        }
    }
    points
}

fn section(
    curves: &[Curve<'_>],
    group: &Group,
    slos: &[PercentileSlo],
    slo_text: &str,
) -> Option<ParetoSection> {
    let mut missing = BTreeMap::new();
    let mut points = points_of(curves, group, slos, &mut missing);
    if points.len() < 2 {
        return None;
    }
    let mut notes: Vec<String> = per_gpu(&mut points).into_iter().collect();
    let per_gpu = notes.is_empty();
    for (key, n) in &missing {
        notes.push(format!(
            "`{key}` is missing from the summaries of {n} point(s), so whether they meet the SLOs is unknown: \
             a summary holds only the percentiles it was measured with (`benchmark.percentiles` \
             in a task file, default p99, plus its `search.slo` ones; \
             `orchestrate bench --metric-percentiles`)."
        ));
    }
    let front = frontier(&points, |p| p.valid);
    let slo_front = if slos.is_empty() {
        Vec::new()
    } else {
        frontier(&points, |p| p.valid && p.meets_slo == Some(Meets::Yes))
    };
    for &i in &front {
        points[i].on_frontier = true;
    }
    for &i in &slo_front {
        points[i].on_slo_frontier = true;
    }
    let best = slo_front
        .iter()
        .copied()
        .max_by(|&a, &b| points[a].throughput.total_cmp(&points[b].throughput));
    let unit = if per_gpu { "tok/s/GPU" } else { "tok/s" };
    let best_line = (!slos.is_empty()).then(|| {
        let what = if per_gpu {
            "Most throughput per GPU"
        } else {
            "Most output throughput per deployment"
        };
        match best.map(|i| &points[i]) {
            Some(p) => format!(
                "{what} within the SLO ({slo_text}): {} {}, {} {unit} at {} tok/s/user{}.",
                p.series,
                p.point,
                number(p.throughput),
                number(p.interactivity),
                p.gpus
                    .map_or(String::new(), |g| format!(" on {} GPUs", number(g)))
            ),
            None => format!(
                "{what} within the SLO ({slo_text}): none of the {} valid points meets it ({} unknown).",
                points.iter().filter(|p| p.valid).count(),
                points
                    .iter()
                    .filter(|p| p.valid && p.meets_slo == Some(Meets::Unknown))
                    .count()
            ),
        }
    });
    let label = group.label();
    let (title, y_label) = if per_gpu {
        (
            format!("Throughput per GPU vs interactivity, ISL:OSL={label}"),
            "Output throughput per GPU (tok/s/GPU)".to_string(),
        )
    } else {
        (
            format!("Throughput per deployment vs interactivity, ISL:OSL={label}"),
            "Output throughput per deployment (tok/s; GPU count unknown)".to_string(),
        )
    };
    let chart = chart(&points, (&front, &slo_front), &title, &y_label);
    let headers = vec![
        "Run / deployment".to_string(),
        "Point".into(),
        "Interactivity (tok/s/user)".into(),
        if per_gpu {
            "Output tok/s/GPU".into()
        } else {
            "Output tok/s (per deployment)".into()
        },
        "GPUs".into(),
        "Meets SLO".into(),
    ];
    let rows: Vec<Vec<String>> = front
        .iter()
        .map(|&i| {
            let p = &points[i];
            vec![
                p.series.clone(),
                p.point.clone(),
                number(p.interactivity),
                number(p.throughput),
                p.gpus.map_or("-".into(), number),
                p.meets_slo.map_or("-", Meets::text).to_string(),
            ]
        })
        .collect();
    Some(ParetoSection {
        markdown: markdown_grid(&headers, &rows),
        headers,
        rows,
        best_line,
        chart_svg: svg::render(&chart),
        data: ParetoGroup {
            group: label,
            title,
            per_gpu,
            y_label,
            notes,
            best_within_slo: best.map(|i| points[i].clone()),
            points,
            chart_file: format!("pareto_{}.svg", group.slug()),
        },
    })
}

/// The chart: one curve per run and deployment, then the frontiers as lines in x order.
fn chart(
    points: &[ParetoPoint],
    (front, slo_front): (&[usize], &[usize]),
    title: &str,
    y_label: &str,
) -> Chart {
    let point = |p: &ParetoPoint| Point {
        x: p.interactivity,
        y: p.throughput,
        valid: p.valid,
        label: p.point.clone(),
    };
    let mut series: Vec<Series> = Vec::new();
    for p in points {
        match series.iter_mut().find(|s| s.style == p.style) {
            Some(s) => s.points.push(point(p)),
            None => series.push(Series {
                name: p.series.clone(),
                style: p.style,
                points: vec![point(p)],
            }),
        }
    }
    let line = |name: &str, style: usize, indices: &[usize]| Series {
        name: name.to_string(),
        style,
        points: indices.iter().map(|&i| point(&points[i])).collect(),
    };
    series.push(line("Pareto frontier", FRONTIER_STYLE, front));
    if !slo_front.is_empty() {
        series.push(line("SLO frontier", SLO_FRONTIER_STYLE, slo_front));
    }
    Chart {
        title: title.to_string(),
        x: Axis {
            label: "Interactivity (tok/s/user = 1000 / median TPOT)".into(),
            scale: Scale::Linear,
        },
        y: Axis {
            label: y_label.to_string(),
            scale: Scale::Linear,
        },
        series,
        bands: Vec::new(),
    }
}

/// The charts to write under plots/.
pub fn pareto_charts(p: &Pareto) -> Vec<RenderedChart> {
    p.sections
        .iter()
        .map(|s| RenderedChart {
            title: s.data.title.clone(),
            file: s.data.chart_file.clone(),
            svg: s.chart_svg.clone(),
        })
        .collect()
}

/// Write `pareto.json` into `dir`: the SLOs and every group's points (frontier membership
/// and SLO verdict included).
pub fn write_json(p: &Pareto, dir: &Path) -> Result<PathBuf, ReportError> {
    #[derive(Serialize)]
    struct Json<'a> {
        slos: &'a [PercentileSlo],
        slo_text: &'a str,
        slo_source: &'a Option<String>,
        groups: Vec<&'a ParetoGroup>,
    }
    let json = Json {
        slos: &p.slos,
        slo_text: &p.slo_text,
        slo_source: &p.slo_source,
        groups: p.sections.iter().map(|s| &s.data).collect(),
    };
    let path = dir.join(PARETO_JSON);
    let text = serde_json::to_string_pretty(&json).expect("plain data serializes");
    std::fs::write(&path, text + "\n").map_err(|source| ReportError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

#[cfg(test)]
#[path = "pareto_tests.rs"]
mod tests;
