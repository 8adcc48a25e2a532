//! Several tasks at once, each in its own tokio task with its own archive: tasks on disjoint
//! hosts in parallel, tasks sharing a host one after the other (host locks, `fleet::hosts`);
//! local-only tasks share the host "local". A task: reach its hosts, take their locks,
//! pre-flight, connect its providers, run, report, release.
//!
//! Does not own: planning (the caller hands in plans), signals (the caller's shutdown
//! token), or exit codes (the caller maps [`JobError`] to them).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::bookkeeping::RunError;
use super::events::Reporter;
use super::processes::invocation;
use super::run::{manifest_for, run};
use super::telemetry::Telemetry;
use crate::archive::{Archive, ArchiveError, PointStatus, RunStatus};
use crate::fleet::{HostError, Providers, ProvidersError, Remote};
use crate::hosts::HostsFile;
use crate::plan::{HostPlan, Plan};
use crate::provider::Provider;
use crate::shutdown::Shutdown;
use crate::ssh::HostReport;
use crate::units::error_chain;

/// A plan to run, fresh or into an existing run directory (resume).
pub struct Job {
    pub plan: Plan,
    pub resume: Option<Archive>,
}

/// How every task of one invocation runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory that holds the archive: `results/<task>/<run-id>/`.
    pub results: PathBuf,
    /// The run index label (`--tag`); else the task's `tag`.
    pub tag: Option<String>,
    /// Stop each sweep at its first failed point.
    pub stop_on_failure: bool,
    /// Print no results table and write no report files at the end.
    pub no_report: bool,
    /// How long a task waits for a host another task holds.
    pub lock_wait: Duration,
    /// GPU telemetry beside every point: `run`'s flags, over each task's `telemetry:`.
    pub telemetry: crate::telemetry::sampler::TelemetryFlags,
}

/// The reporter of each task's events, by task name.
pub type Reporters = Arc<dyn Fn(&str) -> Arc<dyn Reporter> + Send + Sync>;

/// Why a task did not complete.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Hosts(#[from] HostError),
    #[error(transparent)]
    Providers(#[from] ProvidersError),
    #[error("interrupted while task `{0}` waited for its hosts")]
    InterruptedWaiting(String),
    #[error("failed to create the run archive")]
    CreateArchive(#[source] ArchiveError),
    #[error("run failed")]
    Run(#[source] RunError),
    /// Ctrl-C or SIGTERM during the run; the finished points are kept.
    #[error("interrupted; the finished points are kept in {}", .0.display())]
    Interrupted(PathBuf),
    #[error("{failed} point(s) failed and {skipped} skipped; see {}", .manifest.display())]
    Failed {
        failed: usize,
        skipped: usize,
        manifest: PathBuf,
    },
    #[error("task `{task}` panicked: {message}")]
    Panicked { task: String, message: String },
}

/// Run every job, each in its own tokio task, its events to `reporters(task)`; the outcome of
/// each, by task name, in order.
pub async fn run_all(
    jobs: Vec<Job>,
    remote: Arc<Remote>,
    options: Options,
    reporters: Reporters,
    shutdown: &Shutdown,
) -> Vec<(String, Result<(), JobError>)> {
    let options = Arc::new(options);
    let mut handles = Vec::new();
    for mut job in jobs {
        job.plan.stop_on_failure |= options.stop_on_failure;
        let task = job.plan.task.clone();
        let reporter = reporters(&task);
        let (options, remote, shutdown) = (options.clone(), remote.clone(), shutdown.clone());
        handles.push((
            task,
            tokio::spawn(async move { run_job(job, &options, &remote, &shutdown, reporter).await }),
        ));
    }
    let mut outcomes = Vec::new();
    for (task, handle) in handles {
        let outcome = handle.await.unwrap_or_else(|e| {
            Err(JobError::Panicked {
                task: task.clone(),
                message: e.to_string(),
            })
        });
        outcomes.push((task, outcome));
    }
    outcomes
}

/// One task: reach its hosts, take their locks (queueing behind other tasks there),
/// pre-flight, then run with providers on those hosts; the locks are released at the end.
async fn run_job(
    job: Job,
    options: &Options,
    remote: &Remote,
    shutdown: &Shutdown,
    reporter: Arc<dyn Reporter>,
) -> Result<(), JobError> {
    let hosts = remote.connect(&job.plan).await?;
    let owner = format!(
        "orchestrate task {} (pid {})",
        job.plan.task,
        std::process::id()
    );
    let token = shutdown.token();
    let locks = tokio::select! {
        locks = hosts.lock(&owner, options.lock_wait) => locks?,
        () = token.cancelled() => {
            return Err(JobError::InterruptedWaiting(job.plan.task.clone()));
        }
    };
    let result = async {
        let reports = hosts.preflight(&job.plan).await?;
        let remote_providers = hosts.providers(&job.plan, shutdown).await?;
        let providers = Providers::connect(&job.plan, shutdown, remote_providers).await?;
        let hosts_file = remote.hosts.as_ref();
        run_plan(
            job, options, shutdown, &providers, &reports, reporter, hosts_file,
        )
        .await
    }
    .await;
    locks.release().await;
    result
}

/// Run one plan into a new archive (or the resumed one), then report and print its
/// directory on stdout.
async fn run_plan(
    job: Job,
    options: &Options,
    shutdown: &Shutdown,
    providers: &Providers,
    reports: &[HostReport],
    reporter: Arc<dyn Reporter>,
    hosts_file: Option<&HostsFile>,
) -> Result<(), JobError> {
    let plan = &job.plan;
    let mut archive = match job.resume {
        Some(archive) => archive,
        None => {
            let path = hosts_file.map(|h| h.path.as_path());
            new_archive(plan, options, providers, reports, path).await?
        }
    };
    let telemetry = options
        .telemetry
        .resolve(plan.telemetry.as_ref())
        .map(|o| Telemetry {
            options: o,
            prices: prices(plan, hosts_file),
            missing: BTreeMap::new(),
        });
    let run_with = (shutdown, telemetry.as_ref());
    let result = match run(plan, providers, &mut archive, reporter, run_with).await {
        Ok(result) => result,
        Err(e) => {
            // The archive could not be written (a full disk): its last manifest says so.
            let reason = format!("the archive could not be written: {}", error_chain(&e));
            if let Err(e2) = archive.fail(&reason) {
                tracing::warn!("could not record the failure: {}", error_chain(&e2));
            }
            return Err(JobError::Run(e));
        }
    };
    if let Err(e) = archive.write_repro() {
        tracing::warn!("failed to write repro.md: {e}");
    }
    if !options.no_report {
        if let Err(e) = crate::report::print_table(archive.dir()) {
            tracing::warn!("failed to print the results table: {e:#}");
        }
        match crate::report::write_reports(archive.dir()) {
            Ok(files) => tracing::info!("report: {}", files.html.display()),
            Err(e) => tracing::warn!("failed to write the report: {e:#}"),
        }
    }
    warn_invalid(&archive);
    println!("{}", archive.dir().display());
    match result.status {
        RunStatus::Completed => Ok(()),
        RunStatus::Interrupted => Err(JobError::Interrupted(archive.dir().to_path_buf())),
        RunStatus::Failed | RunStatus::Running => Err(JobError::Failed {
            failed: result.points_failed,
            skipped: result.points_skipped,
            manifest: archive.dir().join("manifest.json"),
        }),
    }
}

/// The `price_per_gpu_hour` of every remote host and Slurm cluster `plan` uses that sets one.
fn prices(plan: &Plan, hosts_file: Option<&HostsFile>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Some(file) = hosts_file else {
        return out;
    };
    let places = plan
        .deployments
        .iter()
        .flat_map(|d| &d.roles)
        .flat_map(|r| &r.instances)
        .map(|i| &i.host);
    for place in places {
        let name = match place {
            HostPlan::Local => continue,
            HostPlan::Remote { name, .. } => name,
            HostPlan::Slurm(p) => &p.cluster.name,
            HostPlan::Kubernetes(p) => &p.cluster.name,
        };
        if let Some(price) = file.price_per_gpu_hour(name) {
            out.insert(name.clone(), price);
        }
    }
    out
}

/// A new run directory for `plan`, its manifest holding the facts of every host used.
async fn new_archive(
    plan: &Plan,
    options: &Options,
    providers: &Providers,
    reports: &[HostReport],
    hosts_file: Option<&std::path::Path>,
) -> Result<Archive, JobError> {
    let run_id = Archive::new_run_id(&options.results, &plan.task, chrono::Utc::now());
    let tag = options.tag.clone().or_else(|| plan.tag.clone());
    let mut manifest = manifest_for(plan, &run_id, tag);
    manifest.invocation = Some(invocation(hosts_file));
    manifest
        .hosts
        .insert("local".to_string(), providers.local.host_facts().await);
    if let Some(docker) = &providers.docker {
        manifest
            .hosts
            .insert("docker".to_string(), docker.host_facts().await);
    }
    for report in reports {
        let facts = serde_json::to_value(report).unwrap_or_default();
        manifest.hosts.insert(report.host.clone(), facts);
    }
    Archive::create(&options.results, manifest).map_err(JobError::CreateArchive)
}

/// Warn about completed points that failed their validity gates (a point that failed or
/// was interrupted is told as such already, and its gates judge a partial measurement).
fn warn_invalid(archive: &Archive) {
    let invalid: Vec<String> = archive
        .manifest()
        .points
        .iter()
        .filter(|p| p.status == PointStatus::Completed)
        .filter(|p| p.validity.as_ref().is_some_and(|v| !v.valid))
        .map(|p| p.dir.clone())
        .collect();
    if !invalid.is_empty() {
        tracing::warn!(
            "{} point(s) failed their validity gates (see report): {}",
            invalid.len(),
            invalid.join(", ")
        );
    }
}
