//! `orchestrate run`: plan each task, deploy, sweep, archive, report. Turns signals into the
//! shutdown token, picks the provider for each instance, and maps the run's end to an exit code.
//! Several task files run at once, each in its own tokio task with its own archive: tasks on
//! disjoint hosts in parallel, tasks sharing a host one after the other (host locks, see
//! `remote`); local-only tasks share the host "local". One exit code: the worst.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use super::{Exit, Failure, Outcome};
use crate::archive::{Archive, PointStatus, RunStatus};
use crate::deploy::Network;
use crate::plan::preflight::local_docker_needs;
use crate::plan::{InstancePlan, Plan, PlanContext, RolePlan};
use crate::provider::docker::{
    DockerOptions, DockerProvider, PreflightCheck, PreflightProblem, preflight_local,
};
use crate::provider::local::LocalProvider;
use crate::provider::{Provider, ProviderError};
use crate::runner::{self, ProviderSet, TerminalReporter};
use crate::ssh::HostReport;

use super::remote::{Remote, RemoteProviders};
use crate::shutdown::Shutdown;

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
    /// Trust hosts whose key known_hosts does not list yet, and record their keys there
    /// (a changed key is still refused).
    #[arg(long)]
    pub accept_new_host_keys: bool,
    /// How long a task waits for a host another task or `orchestrate` holds (`90s`, `2h`);
    /// then it fails naming the holder.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = crate::units::parse_duration)]
    pub lock_wait: std::time::Duration,
}

pub fn run(args: Args) -> Outcome {
    let remote = Remote::load(args.hosts.as_deref(), args.accept_new_host_keys)?;
    let ctx = remote.plan_context();
    let jobs = match &args.resume {
        Some(dir) => vec![resume_job(dir, &ctx)?],
        None => {
            let (plans, errors) = super::validate::plan_all(&args.tasks, &ctx);
            if !errors.is_empty() {
                return super::validate::finish(errors);
            }
            plans
                .into_iter()
                .map(|plan| Job { plan, resume: None })
                .collect::<Vec<_>>()
        }
    };
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        let prefixed = jobs.len() > 1;
        let view = View::for_jobs(&jobs);
        let args = Arc::new(args);
        let remote = Arc::new(remote);
        let mut handles = Vec::new();
        for mut job in jobs {
            job.plan.stop_on_failure |= args.stop_on_failure;
            let task = job.plan.task.clone();
            let (args, remote, shutdown, view) =
                (args.clone(), remote.clone(), shutdown.clone(), view.clone());
            handles.push((
                task,
                tokio::spawn(async move { run_job(job, &args, &remote, &shutdown, &view).await }),
            ));
        }
        let mut worst = Exit::Ok;
        let mut interrupted = None;
        for (task, handle) in handles {
            let outcome = handle.await.unwrap_or_else(|e| {
                Err(Failure {
                    exit: Exit::Internal,
                    error: anyhow::anyhow!("task `{task}` panicked: {e}"),
                })
            });
            match outcome {
                Ok(_) => {}
                Err(failure) if failure.exit == Exit::Interrupted => interrupted = Some(failure),
                Err(failure) => {
                    if prefixed {
                        eprintln!("error: [{task}] {:#}", failure.error);
                    } else {
                        eprintln!("error: {:#}", failure.error);
                    }
                    worst = worse(worst, failure.exit);
                }
            }
        }
        match interrupted {
            Some(failure) => Err(failure),
            None => Ok(worst),
        }
    })
}

/// How progress is shown: one task's lines; several tasks' lines prefixed with `[task] `
/// (not a terminal); one combined block redrawn in place (a terminal).
#[derive(Clone)]
enum View {
    Single,
    Prefixed,
    Board(Arc<runner::Board>),
}

impl View {
    fn for_jobs(jobs: &[Job]) -> Self {
        use std::io::IsTerminal;
        if jobs.len() < 2 {
            return View::Single;
        }
        if !std::io::stderr().is_terminal() {
            return View::Prefixed;
        }
        let rows: Vec<(String, String)> = jobs
            .iter()
            .map(|j| {
                let hosts = super::remote::remote_hosts(&j.plan);
                let hosts = if hosts.is_empty() {
                    "local".to_string()
                } else {
                    hosts.join(",")
                };
                (j.plan.task.clone(), hosts)
            })
            .collect();
        View::Board(runner::Board::new(&rows))
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

/// One task: reach its hosts, take their locks (queueing behind other tasks there),
/// pre-flight, then run with providers on those hosts; the locks are released at the end.
async fn run_job(
    job: Job,
    args: &Args,
    remote: &Remote,
    shutdown: &Shutdown,
    view: &View,
) -> Outcome {
    remote.connect(&job.plan).await?;
    let owner = format!(
        "orchestrate task {} (pid {})",
        job.plan.task,
        std::process::id()
    );
    let token = shutdown.token();
    let locks = tokio::select! {
        locks = remote.lock(&job.plan, &owner, args.lock_wait) => locks?,
        () = token.cancelled() => {
            return Err(Failure {
                exit: Exit::Interrupted,
                error: anyhow::anyhow!("interrupted while task `{}` waited for its hosts", job.plan.task),
            });
        }
    };
    let result = async {
        let reports = remote.preflight(&job.plan).await?;
        let remote_providers = remote.providers(&job.plan, shutdown).await?;
        run_plan(job, args, shutdown, remote_providers, reports, view).await
    }
    .await;
    locks.release().await;
    result
}

/// A plan to run, fresh or into an existing run directory.
struct Job {
    plan: Plan,
    resume: Option<Archive>,
}

/// Re-plan the task of an interrupted run and reopen its archive with unfinished points pending.
fn resume_job(dir: &Path, ctx: &PlanContext) -> Result<Job, Failure> {
    let mut archive = Archive::open(dir).map_err(Failure::bad_input)?;
    let manifest = archive.manifest();
    if !manifest.source.exists() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "the run's task file {} is not there; run `orchestrate run --resume` from the directory the run was started in",
            manifest.source.display()
        )));
    }
    let (mut plans, errors) =
        super::validate::plan_all(std::slice::from_ref(&manifest.source), ctx);
    if !errors.is_empty() {
        return super::validate::finish(errors)
            .and(Err(Failure::bad_input(anyhow::anyhow!("cannot resume"))));
    }
    let plan = plans.remove(0);
    if plan.spec_hash != manifest.spec_hash {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "{} changed since run {} was started (sha256 {} then, {} now); start a new run instead of resuming",
            manifest.source.display(),
            manifest.run_id,
            manifest.spec_hash,
            plan.spec_hash
        )));
    }
    archive
        .update(|m| {
            m.status = RunStatus::Running;
            m.ended_at = None;
            for p in m
                .points
                .iter_mut()
                .filter(|p| p.status != PointStatus::Completed)
            {
                p.status = PointStatus::Pending;
                p.error = None;
            }
        })
        .context("failed to reopen the run")?;
    Ok(Job {
        plan,
        resume: Some(archive),
    })
}

async fn run_plan(
    job: Job,
    args: &Args,
    shutdown: &Shutdown,
    remote: RemoteProviders,
    reports: Vec<HostReport>,
    view: &View,
) -> Outcome {
    let plan = &job.plan;
    let mut providers = Providers::new(shutdown.clone(), remote);
    if uses_local_docker(plan) {
        providers.docker = Some(Arc::new(docker_provider(plan, shutdown).await?));
    }
    let mut archive = match job.resume {
        Some(archive) => archive,
        None => {
            let run_id = Archive::new_run_id(&args.results, &plan.task, chrono::Utc::now());
            let tag = args.tag.clone().or_else(|| plan.tag.clone());
            let mut manifest = runner::manifest_for(plan, &run_id, tag);
            manifest
                .hosts
                .insert("local".to_string(), providers.local.host_facts().await);
            if let Some(docker) = &providers.docker {
                manifest
                    .hosts
                    .insert("docker".to_string(), docker.host_facts().await);
            }
            for report in &reports {
                let facts = serde_json::to_value(report).unwrap_or_default();
                manifest.hosts.insert(report.host.clone(), facts);
            }
            Archive::create(&args.results, manifest).context("failed to create the run archive")?
        }
    };
    let reporter: Arc<dyn runner::Reporter> = match view {
        View::Board(board) => Arc::new(board.reporter(&plan.task)),
        View::Prefixed => Arc::new(TerminalReporter::new(false).with_prefix(&plan.task)),
        View::Single => Arc::new(TerminalReporter::new(false)),
    };
    let result = runner::run(plan, &providers, &mut archive, reporter, shutdown)
        .await
        .context("run failed")?;
    if !args.no_report {
        if let Err(e) = crate::report::print_table(archive.dir()) {
            tracing::warn!("failed to print the results table: {e:#}");
        }
        match crate::report::write_reports(archive.dir()) {
            Ok(files) => tracing::info!("report: {}", files.html.display()),
            Err(e) => tracing::warn!("failed to write the report: {e:#}"),
        }
    }
    let invalid: Vec<String> = archive
        .manifest()
        .points
        .iter()
        .filter(|p| {
            p.validity
                .as_ref()
                .is_some_and(|v| v["valid"] == serde_json::json!(false))
        })
        .map(|p| p.dir.clone())
        .collect();
    if !invalid.is_empty() {
        tracing::warn!(
            "{} point(s) failed their validity gates (see report): {}",
            invalid.len(),
            invalid.join(", ")
        );
    }
    println!("{}", archive.dir().display());
    match result.status {
        RunStatus::Completed => Ok(Exit::Ok),
        RunStatus::Interrupted => Err(Failure {
            exit: Exit::Interrupted,
            error: anyhow::anyhow!(
                "interrupted; the finished points are kept in {}",
                archive.dir().display()
            ),
        }),
        RunStatus::Failed | RunStatus::Running => Err(Failure::run_failed(anyhow::anyhow!(
            "{} point(s) failed and {} skipped; see {}",
            result.points_failed,
            result.points_skipped,
            archive.dir().join("manifest.json").display()
        ))),
    }
}

/// Some docker role runs an instance on this machine.
fn uses_local_docker(plan: &Plan) -> bool {
    plan.deployments
        .iter()
        .flat_map(|d| &d.roles)
        .filter(|r| r.provider == crate::plan::ProviderKind::Docker)
        .flat_map(|r| &r.instances)
        .any(|i| matches!(i.host, crate::plan::HostPlan::Local))
}

/// The local Docker engine, after a pre-flight of every deployment's docker roles (engine,
/// images, GPUs, ports): every problem is reported together and nothing is started.
async fn docker_provider(plan: &Plan, shutdown: &Shutdown) -> Result<DockerProvider, Failure> {
    let options = DockerOptions::default();
    let mut problems: Vec<PreflightProblem> = Vec::new();
    for deployment in &plan.deployments {
        let checks: Vec<PreflightCheck> = deployment
            .roles
            .iter()
            .filter(|r| r.provider == crate::plan::ProviderKind::Docker)
            .filter(|r| {
                r.instances
                    .iter()
                    .any(|i| matches!(i.host, crate::plan::HostPlan::Local))
            })
            .flat_map(|r| {
                let needs = local_docker_needs(r);
                PreflightCheck::list(
                    needs.image.as_deref(),
                    needs.gpus.as_ref(),
                    &needs.ports,
                    Network::default(),
                )
            })
            .collect();
        if let Err(found) = preflight_local(&options, &checks).await {
            for problem in found {
                if !problems.contains(&problem) {
                    problems.push(problem);
                }
            }
        }
    }
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        return Err(Failure::run_failed(anyhow::anyhow!(
            "pre-flight of task `{}` failed; nothing was started:\n{}",
            plan.task,
            list.join("\n")
        )));
    }
    Ok(DockerProvider::connect(shutdown.clone(), options).await?)
}

/// The providers of one run: local processes always; Docker and remote hosts when a role asks.
struct Providers {
    local: Arc<LocalProvider>,
    docker: Option<Arc<DockerProvider>>,
    remote: RemoteProviders,
}

impl Providers {
    fn new(shutdown: Shutdown, remote: RemoteProviders) -> Self {
        Self {
            local: Arc::new(LocalProvider::new(shutdown)),
            docker: None,
            remote,
        }
    }
}

impl ProviderSet for Providers {
    fn provider_for(
        &self,
        role: &RolePlan,
        instance: &InstancePlan,
    ) -> Result<Arc<dyn Provider>, ProviderError> {
        use crate::plan::{HostPlan, ProviderKind};
        match (&role.provider, &instance.host) {
            (ProviderKind::Local, HostPlan::Local) => Ok(self.local.clone()),
            (ProviderKind::Docker, HostPlan::Local) => match &self.docker {
                Some(docker) => Ok(docker.clone()),
                None => Err(ProviderError::Other {
                    message: "the docker provider was not connected".into(),
                }),
            },
            (ProviderKind::Local, HostPlan::Remote { name, .. }) => {
                match self.remote.processes.get(name) {
                    Some(ssh) => Ok(ssh.clone()),
                    None => Err(ProviderError::Other {
                        message: format!("no ssh session to host `{name}`"),
                    }),
                }
            }
            (ProviderKind::Docker, HostPlan::Remote { name, .. }) => {
                match self.remote.docker.get(name) {
                    Some((docker, _tunnel)) => Ok(docker.clone()),
                    None => Err(ProviderError::Other {
                        message: format!("no docker engine connected on host `{name}`"),
                    }),
                }
            }
        }
    }

    fn client_session(&self) -> Option<crate::ssh::Session> {
        self.remote.client.clone()
    }
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
