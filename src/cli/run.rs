//! `orchestrate run`: plan each task, deploy, sweep, archive, report. Turns signals into the
//! shutdown token, picks the provider for each instance, and maps the run's end to an exit code.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::{Exit, Failure, Outcome};
use crate::archive::{Archive, RunStatus};
use crate::plan::{InstancePlan, Plan, PlanContext, RolePlan};
use crate::provider::docker::{
    DockerOptions, DockerProvider, PreflightCheck, PreflightProblem, preflight_local,
};
use crate::provider::local::LocalProvider;
use crate::provider::{Network, Provider, ProviderError};
use crate::runner::{self, ProviderSet, TerminalReporter};
use crate::shutdown::Shutdown;

/// Arguments of `orchestrate run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Task files to run, one after the other.
    #[arg(required = true, value_name = "TASK")]
    pub tasks: Vec<PathBuf>,
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
}

pub fn run(args: Args) -> Outcome {
    let (mut plans, errors) = super::validate::plan_all(&args.tasks, &PlanContext::new());
    if !errors.is_empty() {
        return super::validate::finish(errors);
    }
    for plan in &mut plans {
        plan.stop_on_failure |= args.stop_on_failure;
    }
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        let mut worst = Exit::Ok;
        for plan in &plans {
            match run_plan(plan, &args, &shutdown).await {
                Ok(_) => {}
                Err(failure) if failure.exit == Exit::Interrupted => return Err(failure),
                Err(failure) => {
                    eprintln!("error: {:#}", failure.error);
                    worst = Exit::RunFailed;
                }
            }
            if shutdown.token().is_cancelled() {
                break;
            }
        }
        Ok(worst)
    })
}

async fn run_plan(plan: &Plan, args: &Args, shutdown: &Shutdown) -> Outcome {
    let mut providers = Providers::new(shutdown.clone());
    if uses_docker(plan) {
        providers.docker = Some(Arc::new(docker_provider(plan, shutdown).await?));
    }
    let run_id = Archive::new_run_id(&args.results, &plan.task, chrono::Utc::now());
    let mut manifest = runner::manifest_for(plan, &run_id, args.tag.clone());
    manifest
        .hosts
        .insert("local".to_string(), providers.local.host_facts().await);
    if let Some(docker) = &providers.docker {
        manifest
            .hosts
            .insert("docker".to_string(), docker.host_facts().await);
    }
    let mut archive =
        Archive::create(&args.results, manifest).context("failed to create the run archive")?;
    let reporter = Arc::new(TerminalReporter::new(false));
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

fn uses_docker(plan: &Plan) -> bool {
    plan.deployments
        .iter()
        .flat_map(|d| &d.roles)
        .any(|r| r.provider == crate::plan::ProviderKind::Docker)
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
            .flat_map(|r| PreflightCheck::for_role(r, Network::default()))
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

/// The providers of one run: local processes always; Docker and SSH when a role asks.
struct Providers {
    local: Arc<LocalProvider>,
    docker: Option<Arc<DockerProvider>>,
}

impl Providers {
    fn new(shutdown: Shutdown) -> Self {
        Self {
            local: Arc::new(LocalProvider::new(shutdown)),
            docker: None,
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
            (kind, host) => Err(ProviderError::Other {
                message: format!("no provider for {kind:?} on {host:?} yet"),
            }),
        }
    }
}
