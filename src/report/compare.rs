//! Runs side by side: points matched by their load parameters (ISL:OSL group and load axes
//! such as concurrency) across runs and deployments, one table per ISL:OSL and metric with
//! each series' value and its change against the first series, and the report charts with
//! every series overlaid. Points present in only some series are shown as absent there and
//! listed. Owns the comparison data; rendering goes through `render` templates.

use std::fmt::Write as _;

use serde::Serialize;

use super::ReportError;
use super::charts::{RenderedChart, build_charts, curves};
use super::data::{Row, Run};
use super::pareto::{Pareto, pareto, pareto_charts};
use super::render::{RunInfo, Templates};
use super::table::{markdown_grid, number};
use crate::load::search::PercentileSlo;

/// Metrics compared, with their direction (true = higher is better).
pub const COMPARE_METRICS: &[(&str, &str, bool)] = &[
    ("output_throughput", "Output token throughput (tok/s)", true),
    ("request_throughput", "Request throughput (req/s)", true),
    ("mean_ttft_ms", "Mean TTFT (ms)", false),
    ("p99_ttft_ms", "P99 TTFT (ms)", false),
    ("mean_tpot_ms", "Mean TPOT (ms)", false),
    ("mean_e2el_ms", "Mean E2E latency (ms)", false),
    ("request_goodput", "Request goodput (req/s)", true),
    ("joules_per_token", "GPU energy per output token (J)", false),
    ("gpu_mean_power_w", "Mean power per GPU (W)", false),
    (
        "cost_per_million_output_tokens",
        "Cost per million output tokens ($)",
        false,
    ),
    ("output_tokens_per_dollar", "Output tokens per dollar", true),
    (
        "mean_ttfot_ms",
        "Mean time to first output token (ms)",
        false,
    ),
    ("prefix_cache_hit_rate", "Prefix cache hit rate", true),
    (
        "prefix_cache_hit_vs_ideal",
        "Prefix cache hit rate / ideal",
        true,
    ),
];

/// One comparison table: one ISL:OSL group, one metric.
#[derive(Debug, Clone, Serialize)]
pub struct CompareTable {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub markdown: String,
}

/// Everything a comparison shows.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub title: String,
    pub runs: Vec<RunInfo>,
    /// Series names: run label plus deployment axes.
    pub series: Vec<String>,
    pub tables: Vec<CompareTable>,
    /// `point: only in a, b`.
    pub partial: Vec<String>,
    /// Which window throughput and latencies come from, when some point trimmed one.
    pub window: Option<String>,
    pub charts: Vec<RenderedChart>,
    /// Throughput per GPU against interactivity over every series, with the frontiers (its
    /// charts are not in `charts`: see [`Comparison::all_charts`]).
    pub pareto: Pareto,
    pub style: String,
}

impl Comparison {
    /// Every chart to write under plots/: the overlaid ones, then the Pareto view's.
    pub fn all_charts(&self) -> Vec<RenderedChart> {
        let mut out = self.charts.clone();
        out.extend(pareto_charts(&self.pareto));
        out
    }
}

/// A matched point: its key, group, sort position and row per series.
struct Matched<'a> {
    group: String,
    load: String,
    order: (super::data::Group, f64, String),
    rows: Vec<Option<&'a Row>>,
}

/// Build the comparison of some runs (labelled with `data::label_runs`); `slos` judge the
/// Pareto view's points (empty: the runs' capacity searches' SLOs, if any).
pub fn compare(
    runs: &[Run],
    templates: &Templates,
    slos: &[PercentileSlo],
) -> Result<Comparison, ReportError> {
    let series = curves(runs);
    let mut matched: Vec<Matched<'_>> = Vec::new();
    for (i, s) in series.iter().enumerate() {
        for row in &s.rows {
            let key = row.match_key();
            let m = match matched.iter_mut().position(|m| m.order.2 == key) {
                Some(p) => &mut matched[p],
                None => {
                    let load = super::data::axes_label(&row.load_axes());
                    matched.push(Matched {
                        group: row.group.label(),
                        load: if load.is_empty() {
                            row.id.clone()
                        } else {
                            load
                        },
                        order: (row.group.clone(), row.concurrency.unwrap_or(f64::MAX), key),
                        rows: vec![None; series.len()],
                    });
                    matched.last_mut().expect("pushed")
                }
            };
            m.rows[i] = Some(row);
        }
    }
    matched.sort_by(|a, b| {
        a.order
            .0
            .cmp(&b.order.0)
            .then(a.order.1.total_cmp(&b.order.1))
            .then(a.order.2.cmp(&b.order.2))
    });
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let mut groups: Vec<String> = matched.iter().map(|m| m.group.clone()).collect();
    groups.dedup();
    let mut tables = Vec::new();
    for group in &groups {
        for (field, label, higher_better) in COMPARE_METRICS {
            let mut headers = vec!["Point".to_string()];
            headers.extend(names.iter().cloned());
            headers.extend(names.iter().skip(1).map(|n| format!("{n} vs {}", names[0])));
            let mut rows = Vec::new();
            for m in matched.iter().filter(|m| &m.group == group) {
                let values: Vec<Option<f64>> = m
                    .rows
                    .iter()
                    .map(|r| r.and_then(|r| r.metric(field)))
                    .collect();
                let mut cells = vec![m.load.clone()];
                for (r, v) in m.rows.iter().zip(&values) {
                    cells.push(match (r, v) {
                        (None, _) => "absent".into(),
                        (Some(r), Some(v)) if r.valid == Some(false) => {
                            format!("{} (invalid)", number(*v))
                        }
                        (Some(_), Some(v)) => number(*v),
                        (Some(_), None) => "-".into(),
                    });
                }
                for v in values.iter().skip(1) {
                    cells.push(match (values[0], v) {
                        (Some(b), Some(c)) if b != 0.0 => {
                            let d = (c - b) / b;
                            let better = (d > 0.0) == *higher_better;
                            let word = if d.abs() < 0.0005 {
                                ""
                            } else if better {
                                " better"
                            } else {
                                " worse"
                            };
                            format!("{:+.1}%{word}", d * 100.0)
                        }
                        _ => "-".into(),
                    });
                }
                rows.push(cells);
            }
            // A metric no point of the group has (goodput without SLOs) gets no table.
            if rows
                .iter()
                .all(|r| r[1..].iter().all(|c| c == "-" || c == "absent"))
            {
                continue;
            }
            let title = format!("{label}, ISL:OSL={group}");
            let markdown = markdown_grid(&headers, &rows);
            tables.push(CompareTable {
                title,
                headers,
                rows,
                markdown,
            });
        }
    }
    let partial = matched
        .iter()
        .filter(|m| m.rows.iter().any(Option::is_none))
        .map(|m| {
            let present: Vec<&str> = m
                .rows
                .iter()
                .zip(&names)
                .filter(|(r, _)| r.is_some())
                .map(|(_, n)| n.as_str())
                .collect();
            format!("{} ({}): only in {}", m.load, m.group, present.join(", "))
        })
        .collect();
    Ok(Comparison {
        title: format!("Comparison: {}", names.join(" vs ")),
        runs: runs.iter().map(RunInfo::of).collect(),
        series: names,
        tables,
        partial,
        window: super::table::window_note(runs.iter().flat_map(|r| &r.rows)),
        charts: build_charts(runs),
        pareto: pareto(runs, slos),
        style: templates.render("style.css.j2", &())?,
    })
}

/// Aligned plain text for a terminal.
pub fn render_terminal(c: &Comparison) -> String {
    let mut out = String::new();
    if let Some(window) = &c.window {
        let _ = writeln!(out, "{window}\n");
    }
    for t in &c.tables {
        let _ = writeln!(out, "{}", t.title);
        let mut widths: Vec<usize> = t.headers.iter().map(|h| h.chars().count()).collect();
        for row in &t.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
        let _ = writeln!(out, "{}", line(&t.headers));
        for row in &t.rows {
            let _ = writeln!(out, "{}", line(row));
        }
        out.push('\n');
    }
    for p in &c.partial {
        let _ = writeln!(out, "{p}");
    }
    out
}
