//! `orchestrate validate`: load and resolve each task file (the same checks as `plan`,
//! templates and matrix included) and print `ok: <file>` per good file. Starts nothing.

use std::path::{Path, PathBuf};

use super::{Exit, Failure, Outcome};
use crate::plan::{Plan, PlanContext};

const AFTER_HELP: &str = "\
Validation is everything `plan` checks (YAML, types, templates, matrix, secrets, hosts).

Exit codes:
  0  every task file is good (\"ok: <file>\" per file on stdout)
  2  bad input: at least one task file has errors (printed on stderr)";

/// Arguments of `orchestrate validate`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Task files to check (YAML). All errors are reported; exit code 2 if any file is bad.
    #[arg(required = true, value_name = "TASK")]
    pub tasks: Vec<PathBuf>,
    /// The hosts file (default: ./hosts.yaml when present). See docs/hosts.md.
    #[arg(long, value_name = "FILE", env = "ORCHESTRATE_HOSTS")]
    pub hosts: Option<PathBuf>,
    /// A benchmark profile for every task (replaces `benchmark.profile`); a dstack file,
    /// which has no `benchmark` section, needs one.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Run this many replicas of a single-server task (a dstack `replicas: A..B` range
    /// runs its lower bound otherwise; autoscaling is off during a benchmark).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: Option<u32>,
}

pub(super) fn run(args: Args) -> Outcome {
    let hosts = crate::hosts::discover(args.hosts.as_deref()).map_err(Failure::bad_input)?;
    let ctx = super::remote::plan_context(hosts.as_ref());
    let (plans, errors) = plan_all(&args.tasks, args.profile.as_deref(), args.replicas, &ctx);
    for p in &plans {
        println!("ok: {}", p.source.display());
    }
    finish(errors)
}

/// Load and plan every file (with `profile` from `--profile` and the replica count from
/// `--replicas`); the plans of good files and the errors of bad ones.
pub(crate) fn plan_all(
    tasks: &[PathBuf],
    profile: Option<&Path>,
    replicas: Option<u32>,
    ctx: &PlanContext,
) -> (Vec<Plan>, Vec<anyhow::Error>) {
    let mut plans = Vec::new();
    let mut errors = Vec::new();
    for path in tasks {
        let result = crate::spec::load_with(path, profile)
            .and_then(|mut task| {
                if let Some(n) = replicas {
                    task.set_replicas(n)?;
                }
                Ok(task)
            })
            .map_err(anyhow::Error::new)
            .and_then(|task| crate::plan::build(&task, ctx).map_err(anyhow::Error::new));
        match result {
            Ok(plan) => plans.push(plan),
            Err(e) => errors.push(e),
        }
    }
    (plans, errors)
}

/// Print every error on stderr; exit 2 if there was any.
pub(crate) fn finish(errors: Vec<anyhow::Error>) -> Outcome {
    if errors.is_empty() {
        return Ok(Exit::Ok);
    }
    let n = errors.len();
    for e in &errors {
        eprintln!("error: {e:#}\n");
    }
    Err(Failure::bad_input(anyhow::anyhow!(
        "{n} task file{} with errors; nothing was started",
        if n == 1 { "" } else { "s" }
    )))
}
