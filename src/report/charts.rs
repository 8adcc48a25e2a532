//! Which charts a report has, after the dstack seed: per ISL:OSL, throughput vs latency and
//! TTFT/TPOT vs concurrency; throughput, latency, TTFT and TPOT vs output length when output
//! length was swept; prefix-cached vs not when both were measured. One curve per run and
//! deployment. Owns the selection and the data of each chart; drawing is `svg`.

use super::data::{Group, Row, Run};
use super::svg::{self, Axis, Chart, Point, Scale, Series};

/// A chart with its file name (`plots/<file>`) and drawn SVG.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RenderedChart {
    pub title: String,
    /// `throughput-vs-latency_1000-1000.svg`
    pub file: String,
    pub svg: String,
}

/// A curve's rows: one run and deployment. Charts, the Pareto view and compare name their
/// series this way, so a run and deployment reads the same everywhere.
pub(super) struct Curve<'a> {
    /// The run's label, then the deployment's axes when it has any.
    pub name: String,
    pub run: &'a Run,
    pub rows: Vec<&'a Row>,
}

/// One curve per run and deployment, in run order and then the order the deployments'
/// points first appear.
pub(super) fn curves(runs: &[Run]) -> Vec<Curve<'_>> {
    let mut out: Vec<Curve<'_>> = Vec::new();
    for run in runs {
        let mut deployments: Vec<&str> = Vec::new();
        for row in &run.rows {
            if !deployments.contains(&row.deployment.as_str()) {
                deployments.push(&row.deployment);
            }
        }
        for dep in deployments {
            let rows: Vec<&Row> = run.rows.iter().filter(|r| r.deployment == dep).collect();
            let dep_label = rows[0].deployment_label();
            let name = if dep_label.is_empty() {
                run.label.clone()
            } else {
                format!("{} {dep_label}", run.label)
            };
            out.push(Curve { name, run, rows });
        }
    }
    out
}

/// What a point plots: a summary field, scaled.
#[derive(Clone, Copy)]
struct Metric {
    field: &'static str,
    fallback: Option<&'static str>,
    label: &'static str,
    title: &'static str,
    slug: &'static str,
    scale: f64,
}

const THROUGHPUT_TOTAL: Metric = Metric {
    field: "total_token_throughput",
    fallback: Some("output_throughput"),
    label: "Total token throughput (tok/s)",
    title: "Throughput",
    slug: "throughput",
    scale: 1.0,
};
const THROUGHPUT_OUT: Metric = Metric {
    field: "output_throughput",
    fallback: None,
    label: "Output token throughput (tok/s)",
    title: "Output throughput",
    slug: "throughput",
    scale: 1.0,
};
const E2E: Metric = Metric {
    field: "mean_e2el_ms",
    fallback: None,
    label: "Mean end-to-end latency (s)",
    title: "Latency",
    slug: "latency",
    scale: 0.001,
};
const TTFT: Metric = Metric {
    field: "mean_ttft_ms",
    fallback: None,
    label: "Mean TTFT (ms)",
    title: "TTFT",
    slug: "ttft",
    scale: 1.0,
};
const TPOT: Metric = Metric {
    field: "mean_tpot_ms",
    fallback: None,
    label: "Mean TPOT (ms)",
    title: "TPOT",
    slug: "tpot",
    scale: 1.0,
};

fn value(row: &Row, m: Metric) -> Option<f64> {
    row.metric(m.field)
        .or_else(|| m.fallback.and_then(|f| row.metric(f)))
        .map(|v| v * m.scale)
}

/// A point that completed and passed its validity gates (or was not judged).
pub(super) fn valid(row: &Row) -> bool {
    row.valid != Some(false) && row.status == crate::archive::PointStatus::Completed
}

fn concurrency_axis() -> Axis {
    Axis {
        label: "Concurrency (max requests in flight)".into(),
        scale: Scale::Log2,
    }
}

fn draw(title: String, file: String, chart: Chart) -> Option<RenderedChart> {
    if chart.series.iter().all(|s| s.points.is_empty()) {
        return None;
    }
    Some(RenderedChart {
        svg: svg::render(&chart),
        title,
        file,
    })
}

/// The distinct ISL:OSL groups of `curves`' rows, sorted.
pub(super) fn groups(curves: &[Curve<'_>]) -> Vec<Group> {
    let mut groups: Vec<Group> = curves
        .iter()
        .flat_map(|c| c.rows.iter().map(|r| r.group.clone()))
        .collect();
    groups.sort();
    groups.dedup();
    groups
}

/// Every chart of a report over these runs.
pub fn build_charts(runs: &[Run]) -> Vec<RenderedChart> {
    let curves = curves(runs);
    let groups = groups(&curves);
    let mut out = Vec::new();
    for group in &groups {
        let label = group.label();
        let slug = group.slug();
        // Throughput vs latency: one point per concurrency, in concurrency order.
        let tvl = Chart {
            title: format!("Throughput vs latency, ISL:OSL={label}"),
            x: Axis {
                label: E2E.label.into(),
                scale: Scale::Linear,
            },
            y: Axis {
                label: THROUGHPUT_TOTAL.label.into(),
                scale: Scale::Linear,
            },
            series: series_of(
                &curves,
                |r| r.group == *group,
                |r| value(r, E2E),
                THROUGHPUT_TOTAL,
            ),
            bands: Vec::new(),
        };
        out.extend(draw(
            tvl.title.clone(),
            format!("throughput-vs-latency_{slug}.svg"),
            tvl,
        ));
        let has_concurrency = curves
            .iter()
            .flat_map(|c| &c.rows)
            .filter(|r| r.group == *group)
            .any(|r| r.concurrency.is_some());
        if has_concurrency {
            for m in [TTFT, TPOT] {
                let chart = Chart {
                    title: format!("{} vs concurrency, ISL:OSL={label}", m.title),
                    x: concurrency_axis(),
                    y: Axis {
                        label: m.label.into(),
                        scale: Scale::Linear,
                    },
                    series: series_of(&curves, |r| r.group == *group, |r| r.concurrency, m),
                    bands: Vec::new(),
                };
                out.extend(draw(
                    chart.title.clone(),
                    format!("{}-vs-concurrency_{slug}.svg", m.slug),
                    chart,
                ));
            }
        }
    }
    out.extend(output_length_charts(&curves));
    out.extend(prefix_charts(&curves, &groups));
    out
}

/// Curves over rows that pass `keep`, x from `x`, y the metric; ordered by x.
fn series_of(
    curves: &[Curve<'_>],
    keep: impl Fn(&Row) -> bool,
    x: impl Fn(&Row) -> Option<f64>,
    m: Metric,
) -> Vec<Series> {
    curves
        .iter()
        .enumerate()
        .map(|(style, c)| {
            let mut rows: Vec<&Row> = c.rows.iter().copied().filter(|r| keep(r)).collect();
            rows.sort_by(|a, b| {
                a.concurrency
                    .unwrap_or(0.0)
                    .total_cmp(&b.concurrency.unwrap_or(0.0))
            });
            let points = rows
                .iter()
                .filter_map(|r| {
                    Some(Point {
                        x: x(r)?,
                        y: value(r, m)?,
                        valid: valid(r),
                        label: r.id.clone(),
                    })
                })
                .collect();
            Series {
                name: c.name.clone(),
                style,
                points,
            }
        })
        .filter(|s: &Series| !s.points.is_empty())
        .collect()
}

/// (input_len, note, concurrency, distinct output lengths seen).
type Slice = (Option<u64>, Option<String>, u64, Vec<u64>);

/// When output length was swept at a fixed input length and concurrency (the dstack seed
/// fixes concurrency at 128): throughput, latency, TTFT and TPOT vs output length.
fn output_length_charts(curves: &[Curve<'_>]) -> Vec<RenderedChart> {
    // Candidate slices: (input_len, note, concurrency) -> distinct output lengths.
    let mut slices: Vec<Slice> = Vec::new();
    for row in curves.iter().flat_map(|c| &c.rows) {
        let (Some(osl), Some(conc)) = (row.group.output_len, row.concurrency) else {
            continue;
        };
        let key = (row.group.input_len, row.group.note.clone(), conc as u64);
        match slices
            .iter_mut()
            .find(|s| (s.0, &s.1, s.2) == (key.0, &key.1, key.2))
        {
            Some(s) if !s.3.contains(&osl) => s.3.push(osl),
            Some(_) => {}
            None => slices.push((key.0, key.1, key.2, vec![osl])),
        }
    }
    slices.retain(|s| s.3.len() >= 2);
    // Per input length (and note), the concurrency with the most output lengths, highest first.
    slices.sort_by(|a, b| {
        (a.0, &a.1)
            .cmp(&(b.0, &b.1))
            .then(b.3.len().cmp(&a.3.len()))
            .then(b.2.cmp(&a.2))
    });
    slices.dedup_by(|b, a| (a.0, &a.1) == (b.0, &b.1));
    let mut out = Vec::new();
    for (isl, note, conc, _) in slices {
        let isl_text = isl.map_or("?".to_string(), |v| v.to_string());
        let suffix = note.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
        for m in [THROUGHPUT_OUT, E2E, TTFT, TPOT] {
            let keep = |r: &Row| {
                r.group.input_len == isl
                    && r.group.note == note
                    && r.concurrency.map(|c| c as u64) == Some(conc)
            };
            let mut series = series_of(curves, keep, |r| r.group.output_len.map(|v| v as f64), m);
            for s in &mut series {
                s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
            }
            let chart = Chart {
                title: format!(
                    "{} vs output length, ISL={isl_text}{suffix}, concurrency {conc}",
                    m.title
                ),
                x: Axis {
                    label: "Output length (tokens)".into(),
                    scale: Scale::Linear,
                },
                y: Axis {
                    label: m.label.into(),
                    scale: Scale::Linear,
                },
                series,
                bands: Vec::new(),
            };
            let slug = note
                .as_deref()
                .map(|n| format!("-{}", n.replace(' ', "-")))
                .unwrap_or_default();
            out.extend(draw(
                chart.title.clone(),
                format!("{}-vs-output-length_{isl_text}{slug}_c{conc}.svg", m.slug),
                chart,
            ));
        }
    }
    out
}

/// Prefix-cached (shared prefix dataset) next to the same lengths without a shared prefix.
fn prefix_charts(curves: &[Curve<'_>], groups: &[Group]) -> Vec<RenderedChart> {
    let mut out = Vec::new();
    for cached in groups
        .iter()
        .filter(|g| g.note.as_deref() == Some("shared prefix"))
    {
        let Some(plain) = groups.iter().find(|g| {
            g.note.is_none()
                && !g.achieved
                && g.input_len == cached.input_len
                && g.output_len == cached.output_len
        }) else {
            continue;
        };
        for m in [THROUGHPUT_OUT, TTFT, TPOT, E2E] {
            let mut series = Vec::new();
            for (k, (group, tag)) in [(plain, "no cache"), (cached, "prefix cached")]
                .into_iter()
                .enumerate()
            {
                for mut s in series_of(curves, |r| r.group == *group, |r| r.concurrency, m) {
                    s.name = format!("{} · {tag}", s.name);
                    s.style = s.style * 2 + k;
                    series.push(s);
                }
            }
            let chart = Chart {
                title: format!(
                    "{}: prefix cached vs not, ISL:OSL={}",
                    m.title,
                    plain.label()
                ),
                x: concurrency_axis(),
                y: Axis {
                    label: m.label.into(),
                    scale: Scale::Linear,
                },
                series,
                bands: Vec::new(),
            };
            out.extend(draw(
                chart.title.clone(),
                format!("prefix-cache-{}_{}.svg", m.slug, plain.slug()),
                chart,
            ));
        }
    }
    out
}
