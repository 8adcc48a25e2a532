//! Rendering reports through minijinja templates: `templates/*.j2` ship in the repository and
//! are embedded as defaults; `--template DIR` replaces any of them by a file of the same name.
//! Owns the template context and writing report.md, report.html and plots/*.svg; the tables
//! and charts themselves come from `table` and `charts`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ReportError;
use super::charts::{RenderedChart, build_charts};
use super::data::{Run, label_runs, load_run};
use super::pareto::Pareto;
use super::side::side_by_side_tables;
use super::table::{Flagged, Table, build_tables, flagged_points, render_markdown};
use crate::load::search::PercentileSlo;

/// The default templates, embedded at build time.
pub const DEFAULT_TEMPLATES: &[(&str, &str)] = &[
    ("report.md.j2", include_str!("../../templates/report.md.j2")),
    (
        "report.html.j2",
        include_str!("../../templates/report.html.j2"),
    ),
    (
        "compare.md.j2",
        include_str!("../../templates/compare.md.j2"),
    ),
    (
        "compare.html.j2",
        include_str!("../../templates/compare.html.j2"),
    ),
    ("style.css.j2", include_str!("../../templates/style.css.j2")),
];

/// Where templates come from.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    /// A directory whose `*.j2` files replace the embedded ones of the same name.
    pub dir: Option<PathBuf>,
}

impl Templates {
    /// A minijinja environment with every template loaded (overrides first).
    pub fn environment(&self) -> Result<minijinja::Environment<'static>, ReportError> {
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
        for (name, default) in DEFAULT_TEMPLATES {
            let source = match &self.dir {
                Some(dir) if dir.join(name).is_file() => {
                    let path = dir.join(name);
                    std::fs::read_to_string(&path)
                        .map_err(|source| ReportError::TemplateRead { path, source })?
                }
                _ => default.to_string(),
            };
            env.add_template_owned(name.to_string(), source)
                .map_err(|source| ReportError::Template {
                    name: name.to_string(),
                    source,
                })?;
        }
        Ok(env)
    }

    /// Render one template with a context.
    pub fn render(&self, name: &str, context: &impl Serialize) -> Result<String, ReportError> {
        let env = self.environment()?;
        let map = |source| ReportError::Template {
            name: name.to_string(),
            source,
        };
        env.get_template(name)
            .map_err(map)?
            .render(minijinja::Value::from_serialize(context))
            .map_err(map)
    }
}

/// What `write_reports` wrote.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    pub markdown: PathBuf,
    pub html: PathBuf,
    pub plots: Vec<PathBuf>,
}

/// A run as the templates see it.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub label: String,
    pub task: String,
    pub run_id: String,
    pub backend: String,
    pub model: String,
    pub tag: Option<String>,
    pub status: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub hardware: String,
    pub tool_version: String,
    pub points: usize,
    pub deployments: Vec<DeploymentInfo>,
    /// What `report --goodput/--trim` re-scored; `None`: the figures as archived.
    pub rescored: Option<String>,
}

/// A deployment as the templates see it.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentInfo {
    pub id: String,
    /// `tp=8,image=x`, empty when the run has one deployment without axes.
    pub axes: String,
    pub status: String,
    /// Seconds from launch until ready, as text (`-` when it never was).
    pub time_to_ready: String,
    pub error: Option<String>,
}

impl RunInfo {
    pub fn of(run: &Run) -> Self {
        let m = &run.manifest;
        Self {
            label: run.label.clone(),
            task: m.task.clone(),
            run_id: m.run_id.clone(),
            backend: m.backend.clone(),
            model: m.model.clone(),
            tag: m.tag.clone(),
            status: m.status.to_string(),
            started_at: m.started_at.to_rfc3339(),
            ended_at: m.ended_at.map(|t| t.to_rfc3339()),
            hardware: crate::runs::hardware(&m.hosts),
            tool_version: m.tool.version.clone(),
            points: run.rows.len(),
            rescored: run.rescored.clone(),
            deployments: m
                .deployments
                .iter()
                .map(|d| DeploymentInfo {
                    id: d.id.clone(),
                    axes: super::data::axes_label(&d.axes),
                    status: d.status.to_string(),
                    time_to_ready: d
                        .time_to_ready_s
                        .map_or("-".into(), |t| format!("{} s", super::table::number(t))),
                    error: d.error.clone(),
                })
                .collect(),
        }
    }
}

/// A table as the templates see it: the data plus its markdown.
#[derive(Debug, Clone, Serialize)]
struct TableContext {
    #[serde(flatten)]
    table: Table,
    markdown: String,
}

/// The context of report.md.j2 / report.html.j2.
#[derive(Debug, Clone, Serialize)]
struct ReportContext {
    title: String,
    runs: Vec<RunInfo>,
    /// Per ISL:OSL, a run's deployments side by side (runs with several deployments).
    side_by_side: Vec<TableContext>,
    tables: Vec<TableContext>,
    charts: Vec<RenderedChart>,
    flagged: Vec<Flagged>,
    repeated: bool,
    /// Each deployment's capacity search (runs with `benchmark.search`).
    searches: Vec<super::search::SearchSection>,
    /// Throughput per GPU against interactivity, per ISL:OSL, with the frontiers.
    pareto: Pareto,
    style: String,
}

/// A report rendered: report.md, report.html, the charts to write under plots/ and the
/// Pareto view (for pareto.json).
#[derive(Debug, Clone)]
pub struct RenderedReport {
    pub markdown: String,
    pub html: String,
    pub charts: Vec<RenderedChart>,
    pub pareto: Pareto,
}

/// report.md, report.html and the charts of some runs, as strings; `slos` judge the Pareto
/// view's points (empty: the runs' capacity searches' SLOs, if any).
pub fn render_report(
    runs: &[Run],
    templates: &Templates,
    slos: &[PercentileSlo],
) -> Result<RenderedReport, ReportError> {
    let context_of = |table: Table| TableContext {
        markdown: render_markdown(&table),
        table,
    };
    let tables: Vec<TableContext> = build_tables(runs).into_iter().map(context_of).collect();
    let side_by_side: Vec<TableContext> = side_by_side_tables(runs)
        .into_iter()
        .map(context_of)
        .collect();
    let mut charts = build_charts(runs);
    charts.extend(super::power::power_charts(runs));
    charts.extend(super::timeseries::timeseries_charts(runs));
    let searches = super::search::search_sections(runs);
    let pareto = super::pareto::pareto(runs, slos);
    let mut tasks: Vec<&str> = runs.iter().map(|r| r.manifest.task.as_str()).collect();
    tasks.dedup();
    let context = ReportContext {
        title: format!("Benchmark report: {}", tasks.join(", ")),
        runs: runs.iter().map(RunInfo::of).collect(),
        repeated: tables.iter().any(|t| t.table.repeated),
        side_by_side,
        tables,
        charts: charts.clone(),
        flagged: flagged_points(runs),
        searches: searches.clone(),
        pareto: pareto.clone(),
        style: templates.render("style.css.j2", &())?,
    };
    let markdown = templates.render("report.md.j2", &context)?;
    let html = templates.render("report.html.j2", &context)?;
    charts.extend(super::search::search_charts(&searches));
    charts.extend(super::pareto::pareto_charts(&pareto));
    Ok(RenderedReport {
        markdown,
        html,
        charts,
        pareto,
    })
}

/// Write report.md, report.html and plots/*.svg of one run into its own directory, with the
/// embedded templates (what `orchestrate run` calls at the end).
pub fn write_reports(run_dir: &Path) -> Result<ReportFiles, ReportError> {
    write_reports_for(&[run_dir.to_path_buf()], run_dir, &Templates::default())
}

/// Write the report of one or more runs into `out` (created).
pub fn write_reports_for(
    run_dirs: &[PathBuf],
    out: &Path,
    templates: &Templates,
) -> Result<ReportFiles, ReportError> {
    write_reports_rescored(
        run_dirs,
        out,
        templates,
        &crate::archive::Rescore::default(),
        &[],
    )
}

/// [`write_reports_for`] with the runs re-scored by `how` first (`report --goodput/--trim`)
/// and the Pareto view's points judged by `slos` (`report --slo`; empty: the runs' searches').
pub fn write_reports_rescored(
    run_dirs: &[PathBuf],
    out: &Path,
    templates: &Templates,
    how: &crate::archive::Rescore,
    slos: &[PercentileSlo],
) -> Result<ReportFiles, ReportError> {
    let mut runs = run_dirs
        .iter()
        .map(|d| load_run(d))
        .collect::<Result<Vec<_>, _>>()?;
    for (run, dir) in runs.iter_mut().zip(run_dirs) {
        crate::archive::rescore(run, how).map_err(|source| ReportError::Archive {
            dir: dir.clone(),
            source,
        })?;
    }
    label_runs(&mut runs);
    let r = render_report(&runs, templates, slos)?;
    let files = write_outputs(out, "report", &r.markdown, &r.html, &r.charts)?;
    super::pareto::write_json(&r.pareto, out)?;
    Ok(files)
}

/// Write `<stem>.md`, `<stem>.html` and plots/*.svg into `out`.
pub fn write_outputs(
    out: &Path,
    stem: &str,
    md: &str,
    html: &str,
    charts: &[RenderedChart],
) -> Result<ReportFiles, ReportError> {
    let plots_dir = out.join("plots");
    std::fs::create_dir_all(&plots_dir).map_err(|source| ReportError::Write {
        path: plots_dir.clone(),
        source,
    })?;
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text)
            .map_err(|source| ReportError::Write {
                path: path.clone(),
                source,
            })
            .map(|()| path)
    };
    // The archive it reads is already redacted; known secrets are redacted again here, in
    // case error text reached a report another way.
    let redact = crate::plan::secrets::redact;
    let markdown = write(out.join(format!("{stem}.md")), &redact(md))?;
    let html = write(out.join(format!("{stem}.html")), &redact(html))?;
    let plots = charts
        .iter()
        .map(|c| write(plots_dir.join(&c.file), &c.svg))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ReportFiles {
        markdown,
        html,
        plots,
    })
}
