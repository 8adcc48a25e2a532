//! `orchestrate run`: the arguments, planning (or reopening a run with `--resume`), signals
//! turned into the shutdown token, and each task's end mapped to an exit code (one for the
//! whole invocation: the worst). Running the tasks is `runner::scheduler`'s;
//! their progress is drawn here (`progress`, `board`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::board::Board;
use super::progress::TerminalReporter;
use super::{Exit, Failure, Outcome};
use crate::fleet::remote_hosts;
use crate::plan::PlanContext;
use crate::runner::Reporter;
use crate::runner::resume::{self, ResumeError};
use crate::runner::scheduler::{self, Job, JobError, Options};
use crate::shutdown::Shutdown;
use crate::telemetry::sampler::{GpuTool, TelemetryFlags};

/// Arguments of `orchestrate run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Task files to run: in parallel on disjoint hosts, queued on shared ones (tasks without
    /// `hosts` share this machine and run one after the other).
    #[arg(required_unless_present = "resume", value_name = "TASK")]
    pub tasks: Vec<PathBuf>,
    /// Finish an interrupted or failed run in place: only its unfinished points run, and only
    /// the deployments they need are started. The task file must be unchanged.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "tasks")]
    pub resume: Option<PathBuf>,
    /// Directory that holds the archive: results/<task>/<run-id>/.
    #[arg(
        long,
        default_value = "results",
        env = "ORCHESTRATE_RESULTS",
        value_name = "DIR"
    )]
    pub results: PathBuf,
    /// A label for this run in the run index (`orchestrate runs --tag`, `check --baseline TAG`).
    #[arg(long)]
    pub tag: Option<String>,
    /// Stop the sweep at the first failed point instead of recording it and going on.
    #[arg(long)]
    pub stop_on_failure: bool,
    /// Do not print the results table or write report files at the end.
    #[arg(long)]
    pub no_report: bool,
    /// The hosts file (default: ./hosts.yaml when present). See docs/hosts.md.
    #[arg(long, value_name = "FILE", env = "ORCHESTRATE_HOSTS")]
    pub hosts: Option<PathBuf>,
    /// A benchmark profile for every task (replaces `benchmark.profile`); a dstack file,
    /// which has no `benchmark` section, needs one. With `--resume`, the profile of the run.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Run this many replicas of a single-server task (a dstack `replicas: A..B` range
    /// runs its lower bound otherwise; autoscaling is off during a benchmark).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: Option<u32>,
    /// Trust hosts whose key known_hosts does not list yet, and record their keys there
    /// (a changed key is still refused).
    #[arg(long)]
    pub accept_new_host_keys: bool,
    /// How long a task waits for a host another task or `orchestrate` holds (`90s`, `2h`);
    /// then it fails naming the holder.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = crate::units::parse_duration)]
    pub lock_wait: std::time::Duration,
    /// Sample the GPUs of every host of a deployment during each point (nvidia-smi's query
    /// loop, over SSH and as a Slurm step where the instances run there): energy, J/token,
    /// power, utilization and memory per point in summary.json.
    #[arg(long)]
    pub telemetry: bool,
    /// No GPU telemetry, whatever the task's `telemetry:` says.
    #[arg(long, conflicts_with_all = ["telemetry", "telemetry_interval", "telemetry_command", "telemetry_tool", "price_per_gpu_hour"])]
    pub no_telemetry: bool,
    /// The tool that samples the GPUs: nvidia-smi (default), dcgm (the DCGM exporter's
    /// /metrics on each host) or amd-smi (rocm-smi where amd-smi is missing); implies
    /// --telemetry.
    #[arg(long, value_name = "TOOL", value_parser = gpu_tool)]
    pub telemetry_tool: Option<GpuTool>,
    /// Time between two GPU samples (`500ms`, `1s`); implies --telemetry.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration)]
    pub telemetry_interval: Option<std::time::Duration>,
    /// Run this shell command on each host instead of the tool; it must print what the
    /// tool's sampler prints (nvidia-smi's `--format=csv,noheader,nounits` lines of the
    /// sampler's fields, or the framed documents of the others: docs/metrics.md). Implies
    /// --telemetry.
    #[arg(long, value_name = "COMMAND")]
    pub telemetry_command: Option<String>,
    /// Dollars per GPU-hour of every host, over the hosts file's `price_per_gpu_hour`: cost
    /// per million output tokens and output tokens per dollar. Implies --telemetry.
    #[arg(long, value_name = "DOLLARS", value_parser = positive_price)]
    pub price_per_gpu_hour: Option<f64>,
}

/// A GPU telemetry tool by name.
fn gpu_tool(text: &str) -> Result<GpuTool, String> {
    [GpuTool::NvidiaSmi, GpuTool::Dcgm, GpuTool::AmdSmi]
        .into_iter()
        .find(|t| t.name() == text.trim())
        .ok_or_else(|| format!("`{text}` is not a GPU telemetry tool: nvidia-smi, dcgm or amd-smi"))
}

/// A price above zero.
fn positive_price(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!(
            "`{text}` is not a price: dollars per GPU-hour above 0, e.g. 2.49"
        )),
    }
}

impl Args {
    /// What the flags say about GPU telemetry (each task's `telemetry:` fills the rest).
    fn telemetry(&self) -> TelemetryFlags {
        TelemetryFlags {
            on: self.telemetry
                || self.telemetry_tool.is_some()
                || self.telemetry_interval.is_some()
                || self.telemetry_command.is_some()
                || self.price_per_gpu_hour.is_some(),
            off: self.no_telemetry,
            tool: self.telemetry_tool,
            interval_ms: self
                .telemetry_interval
                .map(|d| (d.as_millis() as u64).max(1)),
            command: self.telemetry_command.clone(),
            price_per_gpu_hour: self.price_per_gpu_hour,
        }
    }
}

/// How progress is shown: one task's lines; several tasks' lines prefixed with `[task] `
/// (not a terminal); one combined block redrawn in place (a terminal).
enum View {
    Single,
    Prefixed,
    Board(Arc<Board>),
    /// `-q`: nothing.
    Quiet,
}

impl View {
    fn for_jobs(jobs: &[Job], quiet: bool) -> Self {
        use std::io::IsTerminal;
        if quiet {
            return View::Quiet;
        }
        if jobs.len() < 2 {
            return View::Single;
        }
        if !std::io::stderr().is_terminal() {
            return View::Prefixed;
        }
        let rows: Vec<(String, String)> = jobs
            .iter()
            .map(|j| {
                let hosts = remote_hosts(&j.plan);
                let hosts = if hosts.is_empty() {
                    "local".to_string()
                } else {
                    hosts.join(",")
                };
                (j.plan.task.clone(), hosts)
            })
            .collect();
        View::Board(Board::new(&rows))
    }

    fn reporter(&self, task: &str) -> Arc<dyn Reporter> {
        match self {
            View::Board(board) => Arc::new(board.reporter(task)),
            View::Prefixed => Arc::new(TerminalReporter::new(false).with_prefix(task)),
            View::Single => Arc::new(TerminalReporter::new(false)),
            View::Quiet => Arc::new(TerminalReporter::new(true)),
        }
    }
}

pub(super) fn run(args: Args, quiet: bool) -> Outcome {
    let remote = super::remote::load(args.hosts.as_deref(), args.accept_new_host_keys)?;
    let ctx = remote.plan_context();
    let jobs = match &args.resume {
        Some(dir) => vec![resume_job(
            dir,
            args.profile.as_deref(),
            args.replicas,
            &ctx,
        )?],
        None => {
            let (plans, errors) = super::validate::plan_all(
                &args.tasks,
                args.profile.as_deref(),
                args.replicas,
                &ctx,
            );
            if !errors.is_empty() {
                return super::validate::finish(errors);
            }
            plans
                .into_iter()
                .map(|plan| Job { plan, resume: None })
                .collect::<Vec<_>>()
        }
    };
    let telemetry = args.telemetry();
    let options = Options {
        results: args.results,
        tag: args.tag,
        stop_on_failure: args.stop_on_failure,
        no_report: args.no_report,
        lock_wait: args.lock_wait,
        telemetry,
    };
    let prefixed = jobs.len() > 1;
    let view = View::for_jobs(&jobs, quiet);
    let runtime = super::runtime()?;
    let shutdown = Shutdown::new();
    let outcomes = runtime.block_on(async {
        shutdown.listen_for_signals();
        let reporters = Arc::new(move |task: &str| view.reporter(task));
        scheduler::run_all(jobs, Arc::new(remote), options, reporters, &shutdown).await
    });
    let mut worst = Exit::Ok;
    let mut interrupted = None;
    for (task, outcome) in outcomes {
        let Err(error) = outcome else { continue };
        let failure = failure(error);
        if failure.exit == Exit::Interrupted {
            interrupted = Some(failure);
        } else {
            if prefixed {
                eprintln!("error: [{task}] {:#}", failure.error);
            } else {
                eprintln!("error: {:#}", failure.error);
            }
            worst = worse(worst, failure.exit);
        }
    }
    match interrupted {
        Some(failure) => Err(failure),
        // A signal after the last point (while reports were written) still ends the
        // invocation as interrupted: the report files may be partial.
        None if shutdown.token().is_cancelled() && worst == Exit::Ok => Err(Failure {
            exit: Exit::Interrupted,
            error: anyhow::anyhow!(
                "interrupted after the last point; the archive is complete, write the report again with `orchestrate report`"
            ),
        }),
        None => Ok(worst),
    }
}

/// The exit code of a task's failure.
fn failure(error: JobError) -> Failure {
    let exit = match &error {
        JobError::Hosts(e) if e.is_bad_input() => Exit::BadInput,
        JobError::InterruptedWaiting(_) | JobError::Interrupted(_) => Exit::Interrupted,
        JobError::Panicked { .. } => Exit::Internal,
        _ => Exit::RunFailed,
    };
    Failure {
        exit,
        error: error.into(),
    }
}

/// The exit code of two failures together: bad input over a failed run over success.
fn worse(a: Exit, b: Exit) -> Exit {
    let rank = |e: Exit| match e {
        Exit::Ok => 0,
        Exit::Regression => 1,
        Exit::RunFailed => 2,
        Exit::BadInput => 3,
        Exit::Internal => 4,
        Exit::Interrupted => 5,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// Re-plan the task of an interrupted run and reopen its archive with unfinished points pending.
fn resume_job(
    dir: &Path,
    profile: Option<&Path>,
    replicas: Option<u32>,
    ctx: &PlanContext,
) -> Result<Job, Failure> {
    let mut archive = resume::open(dir).map_err(Failure::bad_input)?;
    let source = archive.manifest().source.clone();
    let (mut plans, errors) =
        super::validate::plan_all(std::slice::from_ref(&source), profile, replicas, ctx);
    if !errors.is_empty() {
        return super::validate::finish(errors)
            .and(Err(Failure::bad_input(anyhow::anyhow!("cannot resume"))));
    }
    let plan = plans.remove(0);
    resume::reopen(&mut archive, &plan).map_err(|e| match e {
        ResumeError::Reopen(_) => Failure::run_failed(e),
        _ => Failure::bad_input(e),
    })?;
    Ok(Job {
        plan,
        resume: Some(archive),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_exit_of_several_tasks_wins() {
        assert_eq!(worse(Exit::Ok, Exit::RunFailed), Exit::RunFailed);
        assert_eq!(worse(Exit::BadInput, Exit::RunFailed), Exit::BadInput);
        assert_eq!(worse(Exit::RunFailed, Exit::Ok), Exit::RunFailed);
        assert_eq!(worse(Exit::Ok, Exit::Ok), Exit::Ok);
    }
}
