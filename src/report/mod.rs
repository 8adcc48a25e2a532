//! Reports: terminal and markdown tables, SVG charts and a self-contained HTML page, written
//! from archived runs through minijinja templates (templates/*.j2, embedded as defaults,
//! overridable with `--template DIR`). Input is the archive only; never runs anything.
//!
//! Submodules: `data` (runs as the archive folds them, and their labels), `table`
//! (Dynamo-style tables), `side` (a run's deployments side by side), `svg` (charts; `scale`
//! their axes),
//! `charts` (which charts a report has), `power` (GPU power over time, from the points' GPU
//! samples), `timeseries` (each point's client and server series over time), `render`
//! (templates), `compare` (runs side by side), `search` (each deployment's capacity search:
//! interval, history, chart), `pareto` (throughput per GPU against interactivity, with the
//! Pareto and SLO frontiers), `slo` (percentile SLOs a point is judged by).

pub mod charts;
pub mod compare;

pub mod data;
pub mod pareto;
pub mod power;
pub mod render;
mod scale;
pub mod search;
pub mod side;
pub mod slo;
pub mod svg;
pub mod table;
pub mod timeseries;

use std::path::{Path, PathBuf};

pub use data::{Run, load_run};
pub use render::{ReportFiles, Templates, write_reports, write_reports_for};
pub use table::{Table, build_tables, render_terminal};

/// Report failures.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("failed to read the run in {dir}")]
    Archive {
        dir: PathBuf,
        #[source]
        source: crate::archive::ArchiveError,
    },
    #[error("failed to write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read template {path}")]
    TemplateRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to render template {name}")]
    Template {
        name: String,
        #[source]
        source: minijinja::Error,
    },
}

/// The terminal table of one run directory, as printed at the end of `orchestrate run`.
pub fn terminal_table(run_dir: &Path) -> Result<String, ReportError> {
    let mut runs = vec![load_run(run_dir)?];
    data::label_runs(&mut runs);
    Ok(render_terminal(&build_tables(&runs)))
}

/// Print the terminal table of one run directory on stdout.
pub fn print_table(run_dir: &Path) -> Result<(), ReportError> {
    print!("{}", terminal_table(run_dir)?);
    Ok(())
}
