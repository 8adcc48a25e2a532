//! `orchestrate report RUN_DIR...`: write report.md, report.html and plots/*.svg.
//!
//! One run: the files go into that run's directory (unless `--out`). Several runs: one report
//! with their tables one after another and their curves overlaid, written to `--out`, which
//! is then required (so no run's own report is overwritten by a combined one). `--goodput`
//! and `--trim` re-score the runs from their request records first (`cli::rescore`); `--slo`
//! (here, also on `compare`) sets the SLOs the Pareto view judges points by.

use std::path::PathBuf;

use anyhow::Context as _;

use super::{Exit, Failure, Outcome};
use crate::load::search::PercentileSlo;
use crate::report::{self, Templates};

/// Arguments of `orchestrate report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run directories (results/<task>/<run-id>, or results/<task>/latest).
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// Where to write the report (default for one run: its directory; required for several).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// A directory of templates (report.md.j2, report.html.j2, style.css.j2) overriding the
    /// built-in ones; copy templates/ from the repository to start.
    #[arg(long, value_name = "DIR")]
    pub template: Option<PathBuf>,
    /// Also print the tables on stdout.
    #[arg(long)]
    pub print: bool,
    #[command(flatten)]
    pub rescore: super::rescore::RescoreArgs,
    #[command(flatten)]
    pub slo: SloArgs,
}

/// `--slo` of `report` and `compare`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SloArgs {
    /// A percentile SLO the Pareto view marks points and its SLO frontier by, `pP:METRIC:LIMIT`
    /// (METRIC ttft, tpot or e2el; e.g. `p99:tpot:50ms`, `p99:ttft:2s`); repeat for several.
    /// Default: the SLOs of the runs' capacity searches, if any.
    #[arg(long = "slo", value_name = "pP:METRIC:LIMIT")]
    pub slo: Vec<String>,
}

impl SloArgs {
    /// The SLOs parsed; a bad one is bad input naming the flag.
    pub fn slos(&self) -> anyhow::Result<Vec<PercentileSlo>> {
        self.slo
            .iter()
            .map(|s| PercentileSlo::parse(s).map_err(|e| anyhow::anyhow!("--slo {e}")))
            .collect()
    }
}

pub(super) fn run(args: Args) -> Outcome {
    for dir in &args.runs {
        if !dir.join(crate::archive::MANIFEST).is_file() {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "{} is not a run directory (no manifest.json); pass results/<task>/<run-id>",
                dir.display()
            )));
        }
    }
    if let Some(t) = &args.template
        && !t.is_dir()
    {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "--template {} is not a directory",
            t.display()
        )));
    }
    let out = match (&args.out, args.runs.len()) {
        (Some(out), _) => out.clone(),
        (None, 1) => args.runs[0].clone(),
        (None, n) => {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "{n} runs given: pass --out DIR for the combined report (one run's own report stays in its directory)"
            )));
        }
    };
    let templates = Templates {
        dir: args.template.clone(),
    };
    let how = args.rescore.rescore().map_err(Failure::bad_input)?;
    let slos = args.slo.slos().map_err(Failure::bad_input)?;
    let files = report::render::write_reports_rescored(&args.runs, &out, &templates, &how, &slos)
        .map_err(|e| {
        let exit = match e {
            report::ReportError::Write { .. } => Exit::RunFailed,
            _ => Exit::BadInput,
        };
        Failure {
            exit,
            error: anyhow::Error::new(e),
        }
    })?;
    if args.print {
        let mut runs = args
            .runs
            .iter()
            .map(|d| report::load_run(d))
            .collect::<Result<Vec<_>, _>>()
            .context("failed to read the runs")?;
        for run in &mut runs {
            crate::archive::rescore(run, &how).context("failed to re-score the runs")?;
        }
        report::data::label_runs(&mut runs);
        print!("{}", report::render_terminal(&report::build_tables(&runs)));
    }
    println!("{}", files.markdown.display());
    println!("{}", files.html.display());
    tracing::info!(
        "{} charts in {}",
        files.plots.len(),
        out.join("plots").display()
    );
    Ok(Exit::Ok)
}
