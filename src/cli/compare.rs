//! `orchestrate compare RUN_DIR|TASK...`: runs side by side.
//!
//! Each argument is a run directory or a task name (its latest run under `--results`).
//! Prints the comparison tables on stdout; with `--out DIR` also writes compare.md,
//! compare.html, plots/*.svg and pareto.json there. `--goodput` and `--trim` re-score the runs
//! first; `--slo` sets the SLOs of the Pareto view.

use std::path::PathBuf;

use super::{Exit, Failure, Outcome};
use crate::report::{self, Templates, compare};

/// Arguments of `orchestrate compare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run directories, or task names (their latest run). At least two series are needed:
    /// two runs, or one run with several deployments.
    #[arg(required = true, value_name = "RUN_DIR|TASK")]
    pub runs: Vec<String>,
    /// Write compare.md, compare.html and plots/ into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The archive root where task names are looked up.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results: PathBuf,
    /// A directory of templates overriding the built-in compare.md.j2 / compare.html.j2.
    #[arg(long, value_name = "DIR")]
    pub template: Option<PathBuf>,
    #[command(flatten)]
    pub rescore: super::rescore::RescoreArgs,
    #[command(flatten)]
    pub slo: super::report::SloArgs,
}

pub(super) fn run(args: Args) -> Outcome {
    let bad = |e: anyhow::Error| Failure::bad_input(e);
    let mut dirs = Vec::new();
    for arg in &args.runs {
        let path = PathBuf::from(arg);
        if path.join(crate::archive::MANIFEST).is_file() {
            dirs.push(path);
        } else {
            let dir = crate::runs::resolve(&args.results, arg, "latest", None).map_err(|e| {
                bad(anyhow::Error::new(e).context(format!(
                    "`{arg}` is neither a run directory nor a task with runs"
                )))
            })?;
            dirs.push(dir);
        }
    }
    let mut runs = dirs
        .iter()
        .map(|d| report::load_run(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.into()))?;
    let how = args.rescore.rescore().map_err(bad)?;
    let slos = args.slo.slos().map_err(bad)?;
    for run in &mut runs {
        crate::archive::rescore(run, &how).map_err(|e| bad(e.into()))?;
    }
    report::data::label_runs(&mut runs);
    let templates = Templates {
        dir: args.template.clone(),
    };
    let comparison = compare::compare(&runs, &templates, &slos).map_err(|e| bad(e.into()))?;
    if comparison.series.len() < 2 {
        return Err(bad(anyhow::anyhow!(
            "nothing to compare: give at least two runs (or a run with several deployments)"
        )));
    }
    print!("{}", compare::render_terminal(&comparison));
    if let Some(out) = &args.out {
        let md = templates
            .render("compare.md.j2", &comparison)
            .map_err(|e| bad(e.into()))?;
        let html = templates
            .render("compare.html.j2", &comparison)
            .map_err(|e| bad(e.into()))?;
        let files =
            report::render::write_outputs(out, "compare", &md, &html, &comparison.all_charts())?;
        report::pareto::write_json(&comparison.pareto, out)?;
        println!("{}", files.markdown.display());
        println!("{}", files.html.display());
    }
    Ok(Exit::Ok)
}
