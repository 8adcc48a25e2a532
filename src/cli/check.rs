//! `orchestrate check RUN --baseline RUN|previous|latest|TAG`: the regression gate.
//!
//! Prints a markdown summary on stdout, writes it to `--markdown` (default RUN/check.md),
//! appends it to `$GITHUB_STEP_SUMMARY` when set, writes JUnit XML to `--junit` (default
//! RUN/check.junit.xml). Exit 0 when nothing regressed, 3 on a regression, a missing or an
//! invalid point, 2 on bad input (unknown run, bad threshold, a baseline that is the run
//! itself or has no valid completed point).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Exit, Failure, Outcome};
use crate::check;

/// Arguments of `orchestrate check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run to judge (results/<task>/<run-id> or results/<task>/latest).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
    /// The baseline: a run directory, `previous` (the newest earlier run of the same task,
    /// completed ones preferred), `latest`, a run id, or a tag (newest run with that tag).
    #[arg(long, value_name = "RUN|previous|TAG")]
    pub baseline: String,
    /// `METRIC=+N%` (a rise of more than N% regresses: latencies) or `METRIC=-N%` (a drop
    /// regresses: throughputs). Repeatable. Default: the task's `check.thresholds`, else
    /// output_throughput=-5%, p99_ttft_ms=+10%, p99_tpot_ms=+10%, mean_e2el_ms=+10%, and
    /// for a capacity search capacity=-5% (`capacity`: the interval's lower bound).
    #[arg(long = "threshold", value_name = "METRIC=±N%")]
    pub thresholds: Vec<String>,
    /// Widen a threshold to K x the observed spread of repetitions when that is larger.
    #[arg(long, default_value_t = 2.0, value_name = "K")]
    pub noise_k: f64,
    /// The archive root holding the runs (default: two levels above RUN).
    #[arg(long, value_name = "DIR")]
    pub results: Option<PathBuf>,
    /// Where to write the markdown summary (default: RUN/check.md).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Where to write JUnit XML (default: RUN/check.junit.xml).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Both runs re-scored from their request records first (new goodput SLOs, trims).
    #[command(flatten)]
    pub rescore: super::rescore::RescoreArgs,
}

pub(super) fn run(args: Args) -> Outcome {
    let bad = |e: anyhow::Error| Failure::bad_input(e);
    if !args.run.join(crate::archive::MANIFEST).is_file() {
        return Err(bad(anyhow::anyhow!(
            "{} is not a run directory (no manifest.json)",
            args.run.display()
        )));
    }
    if !args.noise_k.is_finite() || args.noise_k < 0.0 {
        return Err(bad(anyhow::anyhow!("--noise-k must be a number >= 0")));
    }
    let how = args.rescore.rescore().map_err(bad)?;
    let mut current = crate::archive::read_run(&args.run).map_err(|e| bad(e.into()))?;
    crate::archive::rescore(&mut current, &how).map_err(|e| bad(e.into()))?;
    let thresholds = if !args.thresholds.is_empty() {
        check::parse_thresholds(&args.thresholds).map_err(|e| bad(e.into()))?
    } else if let Some(from_task) = check::thresholds_from_task(&current.manifest.resolved) {
        from_task
            .map_err(|e| bad(anyhow::Error::new(e).context("in the task's check.thresholds")))?
    } else {
        let mut defaults = check::DEFAULT_THRESHOLDS.to_vec();
        if !current.searches.is_empty() {
            defaults.push(check::DEFAULT_SEARCH_THRESHOLD);
        }
        check::parse_thresholds(&defaults).expect("defaults parse")
    };
    let results = args
        .results
        .clone()
        .unwrap_or_else(|| results_root(&args.run));
    let baseline_dir = crate::runs::resolve(
        &results,
        &current.manifest.task,
        &args.baseline,
        Some(&args.run),
    )
    .map_err(|e| bad(e.into()))?;
    let mut baseline = crate::archive::read_run(&baseline_dir).map_err(|e| bad(e.into()))?;
    crate::archive::rescore(&mut baseline, &how).map_err(|e| bad(e.into()))?;
    current.label = "current".into();
    baseline.label = "baseline".into();
    tracing::info!(
        "checking {} against {}",
        args.run.display(),
        baseline_dir.display()
    );
    let verdict =
        check::check(&current, &baseline, &thresholds, args.noise_k).map_err(|e| bad(e.into()))?;
    let md = check::markdown(&verdict);
    print!("{md}");
    let md_path = args.markdown.unwrap_or_else(|| args.run.join("check.md"));
    std::fs::write(&md_path, &md)
        .with_context(|| format!("failed to write {}", md_path.display()))?;
    let junit_path = args
        .junit
        .unwrap_or_else(|| args.run.join("check.junit.xml"));
    std::fs::write(&junit_path, check::junit(&verdict))
        .with_context(|| format!("failed to write {}", junit_path.display()))?;
    if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY") {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&summary)
            .with_context(|| format!("failed to open $GITHUB_STEP_SUMMARY ({summary:?})"))?;
        writeln!(file, "{md}").context("failed to append to $GITHUB_STEP_SUMMARY")?;
    }
    if verdict.passed() {
        Ok(Exit::Ok)
    } else {
        tracing::error!(
            "{} failing comparisons (see {})",
            verdict.failures(),
            md_path.display()
        );
        Ok(Exit::Regression)
    }
}

/// `results/` of `results/<task>/<run-id>`.
fn results_root(run: &Path) -> PathBuf {
    let canonical = run.canonicalize().unwrap_or_else(|_| run.to_path_buf());
    canonical
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("results"))
}
