//! A deployment's running instances: launching one (its log, env and GPU pinning, through
//! the provider the run's provider set picks), the first of them to exit, and stopping them
//! all. Shared by the start of a role (`gang`) and the deployment around it.

use std::path::PathBuf;

use futures_util::future::{BoxFuture, FutureExt, select_all};

use crate::archive::Archive;
use crate::fleet::ProviderSet;
use crate::plan::{DeploymentPlan, InstancePlan, Plan, RolePlan};
use crate::provider::{ExitInfo, Instance, LaunchRequest, LogSink, ProviderError};
use crate::readiness::{self, ReadinessError, workers::TopologyError};
use crate::units::error_chain;

/// A deployment's running instances, by `<role>-<index>`, in start order.
pub(super) type Instances = Vec<(String, Box<dyn Instance>)>;

/// Why a deployment's instances did not start; its text is the deployment's error.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// The run's providers have none for the instance.
    #[error("{0:#}")]
    NoProvider(ProviderError),
    #[error("failed to create log {}: {error}", .path.display())]
    Log {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}", error_chain(.0))]
    Launch(ProviderError),
    #[error(transparent)]
    Exited(#[from] Exited),
    #[error("cancelled while the deployment was starting")]
    Cancelled,
    #[error("{0}")]
    Readiness(ReadinessError),
    #[error("{0}")]
    Topology(TopologyError),
    /// A replica's Ray cluster did not count its nodes: the error with what to check and the
    /// ranks' last log lines.
    #[error("{0}")]
    Ray(String),
}

/// An instance that exited: `<key> exited (<exit>) <when>; last log lines: ...`.
#[derive(Debug, thiserror::Error)]
#[error("{key} exited ({exit}) {when}; last log lines:\n{}", readiness::tail_text(.tail))]
pub(super) struct Exited {
    pub key: String,
    pub exit: ExitInfo,
    pub tail: Vec<String>,
    /// `while the deployment was starting`, `... running`.
    pub when: &'static str,
}

impl Exited {
    pub(super) const STARTING: &str = "while the deployment was starting";
    pub(super) const RUNNING: &str = "while the deployment was running";
}

/// Start one instance of `role` with its log, env and GPU pinning.
pub(super) async fn launch_one(
    plan: &Plan,
    deployment: &DeploymentPlan,
    role: &RolePlan,
    instance: &InstancePlan,
    providers: &dyn ProviderSet,
    archive: &Archive,
) -> Result<Box<dyn Instance>, StartError> {
    let provider = providers
        .provider_for(role, instance)
        .map_err(StartError::NoProvider)?;
    let mut env: Vec<(String, String)> = instance
        .env
        .iter()
        .map(|e| (e.name.clone(), e.value.expose().to_string()))
        .collect();
    env.extend(process_gpu_env(role, &env));
    let path = archive.log_path(&deployment.id, &instance.name(&role.name));
    let log = LogSink::create(&path).map_err(|error| StartError::Log {
        path: path.clone(),
        error,
    })?;
    let request = LaunchRequest {
        run_id: archive.manifest().run_id.clone(),
        task: plan.task.clone(),
        deployment: deployment.id.clone(),
        role: role.name.clone(),
        index: instance.index,
        image: role.image.clone(),
        commands: instance.commands.clone(),
        env,
        port: instance.port,
        volumes: role.volumes.clone(),
        resources: role.resources.clone(),
        log,
        container: role.container.clone(),
    };
    provider.launch(request).await.map_err(StartError::Launch)
}

/// GPU pinning variables of a process role (`container.gpu_ids`); containers are pinned by
/// their provider instead.
pub(super) fn process_gpu_env(role: &RolePlan, env: &[(String, String)]) -> Vec<(String, String)> {
    match role.provider {
        crate::plan::ProviderKind::Local => {
            crate::provider::gpu_env::pinning(&role.resources, &role.container, env)
        }
        _ => Vec::new(),
    }
}

/// The first instance of `role`, `<role>-0` (node 0 of replica 0, whatever order the gang
/// started in).
pub(super) fn first_of<'a>(instances: &'a Instances, role: &str) -> Option<&'a dyn Instance> {
    let key = format!("{role}-0");
    instances
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, i)| i.as_ref())
}

/// Resolves with the first instance that exits (never, when there are none).
pub(super) fn any_exit(
    instances: &[(String, Box<dyn Instance>)],
) -> BoxFuture<'_, (String, ExitInfo, Vec<String>)> {
    if instances.is_empty() {
        return futures_util::future::pending().boxed();
    }
    let futures = instances.iter().map(|(key, instance)| {
        async move {
            let exit = instance.exited().await;
            (
                key.clone(),
                exit,
                instance.log().tail(readiness::TAIL_LINES),
            )
        }
        .boxed()
    });
    select_all(futures).map(|(first, _, _)| first).boxed()
}

/// Stop every instance, in reverse start order (dependants first).
pub(super) async fn stop_all(instances: Instances) {
    // Reverse start order: dependants first.
    for (key, instance) in instances.into_iter().rev() {
        let what = instance.describe();
        if let Err(e) = instance.stop().await {
            tracing::warn!("failed to stop {key} ({what}): {}", error_chain(&e));
        }
    }
}
