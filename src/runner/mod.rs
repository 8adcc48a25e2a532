//! The run loop: for each deployment of the plan, launch its instances -> wait until ready ->
//! measure every point -> stop; the archive is updated after every step so a crash loses at
//! most the point in flight. The runner executes and emits events; it draws nothing itself
//! (see `progress`) and computes no statistics (see `metrics`).

mod board;
mod bookkeeping;
mod events;
mod external;
mod measure;
mod progress;
mod remote_client;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use futures_util::future::{BoxFuture, FutureExt, select_all};

use crate::archive::{
    Archive, ArchiveError, DeploymentRecord, DeploymentStatus, FORMAT_VERSION, Manifest,
    PointRecord, PointStatus, RunStatus, ToolInfo,
};
use crate::plan::{DeploymentPlan, InstancePlan, Plan, RolePlan};
use crate::provider::{
    ExitInfo, Instance, LaunchRequest, LogSink, Provider, ProviderError, error_chain,
};
use crate::readiness::{self, GenerateProbe};
use crate::shutdown::Shutdown;

pub use board::{Board, BoardReporter};
use bookkeeping::Slot;
pub use events::{Event, Reporter};
pub use progress::TerminalReporter;

/// Chooses the provider that runs an instance (local process, Docker, SSH host).
pub trait ProviderSet: Send + Sync {
    fn provider_for(
        &self,
        role: &RolePlan,
        instance: &InstancePlan,
    ) -> Result<Arc<dyn Provider>, ProviderError>;

    /// The SSH session to the plan's client host (`client.host`), when it names one.
    fn client_session(&self) -> Option<crate::ssh::Session> {
        None
    }
}

/// Run failures that stop the whole run (a failed point or deployment does not: it is
/// recorded and the sweep goes on).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// What a run ended as, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunResult {
    pub status: RunStatus,
    pub points_completed: usize,
    pub points_failed: usize,
    pub points_skipped: usize,
}

/// The first manifest of a run of `plan`: every deployment and point pending.
pub fn manifest_for(plan: &Plan, run_id: &str, tag: Option<String>) -> Manifest {
    let mut points = Vec::new();
    for deployment in &plan.deployments {
        for point in &deployment.points {
            for repetition in 1..=point.repetitions.max(1) {
                points.push(PointRecord {
                    id: point.id.clone(),
                    deployment: deployment.id.clone(),
                    repetition,
                    dir: PointRecord::dir_name(&point.id, repetition),
                    axes: point.axes.clone(),
                    load: serde_json::to_value(&point.load).expect("load serializes"),
                    status: PointStatus::Pending,
                    error: None,
                    started_at: None,
                    ended_at: None,
                    validity: None,
                });
            }
        }
    }
    Manifest {
        format_version: FORMAT_VERSION,
        tool: ToolInfo::current(),
        run_id: run_id.to_string(),
        task: plan.task.clone(),
        backend: serde_json::to_value(plan.backend)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        model: plan.model.clone(),
        tag,
        source: plan.source.clone(),
        spec_hash: plan.spec_hash.clone(),
        started_at: Utc::now(),
        ended_at: None,
        status: RunStatus::Running,
        resolved: plan.resolved.clone(),
        hosts: BTreeMap::new(),
        deployments: plan
            .deployments
            .iter()
            .map(|d| DeploymentRecord {
                id: d.id.clone(),
                axes: d.axes.clone(),
                status: DeploymentStatus::Pending,
                time_to_ready_s: None,
                error: None,
                instances: BTreeMap::new(),
            })
            .collect(),
        points,
    }
}

/// Execute `plan` into `archive`. Points already completed in the archive are skipped (resume).
pub async fn run(
    plan: &Plan,
    providers: &dyn ProviderSet,
    archive: &mut Archive,
    reporter: Arc<dyn Reporter>,
    shutdown: &Shutdown,
) -> Result<RunResult, RunError> {
    let tokenizers = measure::Tokenizers::default();
    let cancel = shutdown.token();
    let total = archive
        .manifest()
        .points
        .iter()
        .filter(|p| p.status != PointStatus::Completed)
        .count();
    reporter.event(&Event::RunStarted {
        run_dir: archive.dir(),
        deployments: plan.deployments.len(),
        points: total,
    });
    let client = remote_client::prepare(plan, providers.client_session(), shutdown).await;
    if let Some(Ok(remote)) = &client {
        archive.update(|m| {
            m.hosts.insert("client".to_string(), remote.facts());
        })?;
    }
    let mut counter = 0usize;
    let mut any_failed = false;
    for deployment in &plan.deployments {
        let pending: Vec<usize> = archive
            .manifest()
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.deployment == deployment.id && p.status != PointStatus::Completed)
            .map(|(i, _)| i)
            .collect();
        if pending.is_empty() {
            continue;
        }
        if cancel.is_cancelled() || (any_failed && plan.stop_on_failure) {
            skip(archive, &pending, "the run stopped before this point")?;
            continue;
        }
        let ok = run_deployment(
            plan,
            deployment,
            &pending,
            providers,
            archive,
            reporter.clone(),
            &tokenizers,
            shutdown,
            &mut counter,
            total,
            &client,
        )
        .await?;
        any_failed |= !ok;
    }
    let status = if cancel.is_cancelled() {
        RunStatus::Interrupted
    } else if any_failed {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    archive.update(|m| {
        m.status = status;
        m.ended_at = Some(Utc::now());
    })?;
    archive.write_run_summaries()?;
    let count = |s: PointStatus| {
        archive
            .manifest()
            .points
            .iter()
            .filter(|p| p.status == s)
            .count()
    };
    let result = RunResult {
        status,
        points_completed: count(PointStatus::Completed),
        points_failed: count(PointStatus::Failed),
        points_skipped: count(PointStatus::Skipped) + count(PointStatus::Pending),
    };
    reporter.event(&Event::RunFinished {
        status,
        run_dir: archive.dir(),
    });
    Ok(result)
}

fn skip(archive: &mut Archive, points: &[usize], why: &str) -> Result<(), ArchiveError> {
    archive.update(|m| {
        for &i in points {
            m.points[i].status = PointStatus::Skipped;
            m.points[i].error = Some(why.to_string());
        }
    })
}

/// Launch, wait, measure, stop one deployment. Returns false when anything in it failed.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces are distinct"
)]
async fn run_deployment(
    plan: &Plan,
    deployment: &DeploymentPlan,
    pending: &[usize],
    providers: &dyn ProviderSet,
    archive: &mut Archive,
    reporter: Arc<dyn Reporter>,
    tokenizers: &measure::Tokenizers,
    shutdown: &Shutdown,
    counter: &mut usize,
    total: usize,
    client: &remote_client::RunClient,
) -> Result<bool, RunError> {
    let site = remote_client::site(client, deployment);
    let cancel = shutdown.token();
    let dep_index = archive
        .manifest()
        .deployments
        .iter()
        .position(|d| d.id == deployment.id)
        .expect("deployment in manifest");
    reporter.event(&Event::DeploymentStarting { id: &deployment.id });
    archive.update(|m| m.deployments[dep_index].status = DeploymentStatus::Starting)?;
    let started = Instant::now();
    let mut instances: Vec<(String, Box<dyn Instance>)> = Vec::new();
    let launched = launch_all(
        plan,
        deployment,
        providers,
        archive,
        &mut instances,
        &cancel,
    )
    .await;
    let ready = match launched {
        Ok(()) => Ok(started.elapsed()),
        Err(error) => Err(error),
    };
    let mut facts: BTreeMap<String, serde_json::Value> = instances
        .iter()
        .map(|(k, i)| (k.clone(), i.facts()))
        .collect();
    record_gpu_env(deployment, &mut facts);
    let mut ok = true;
    match ready {
        Ok(after) => {
            archive.update(|m| {
                let d = &mut m.deployments[dep_index];
                d.status = DeploymentStatus::Ready;
                d.time_to_ready_s = Some(after.as_secs_f64());
                d.instances = facts;
            })?;
            reporter.event(&Event::DeploymentReady {
                id: &deployment.id,
                after,
            });
            let entry = instances
                .iter()
                .find(|(key, _)| key.starts_with(&format!("{}-", deployment.entry_role)))
                .map(|(_, i)| i.base_url())
                .unwrap_or_default();
            let entry_role = deployment
                .roles
                .iter()
                .find(|r| r.name == deployment.entry_role)
                .unwrap_or(&deployment.roles[0]);
            for &index in pending {
                if cancel.is_cancelled() || (!ok && plan.stop_on_failure) {
                    skip(archive, &[index], "the run stopped before this point")?;
                    continue;
                }
                *counter += 1;
                let point_plan = deployment
                    .points
                    .iter()
                    .find(|p| p.id == archive.manifest().points[index].id)
                    .expect("manifest point in plan");
                let watch = any_exit(&instances);
                let slot = Slot {
                    index,
                    ordinal: *counter,
                    total,
                };
                if let Some(ext) = &point_plan.external {
                    let measured = match external::instance(deployment, &instances, &ext.role) {
                        Ok((instance, env)) => {
                            external::point(
                                external::ExternalContext {
                                    plan,
                                    external: ext,
                                    slot,
                                    instance,
                                    env,
                                    base_url: &entry,
                                    readiness: &entry_role.readiness,
                                    cancel: &cancel,
                                },
                                archive,
                                reporter.clone(),
                                watch,
                            )
                            .await?
                        }
                        Err(e) => {
                            bookkeeping::begin(archive, reporter.as_ref(), slot)?;
                            bookkeeping::finish(
                                archive,
                                reporter.as_ref(),
                                slot,
                                PointStatus::Failed,
                                Some(e),
                            )?
                        }
                    };
                    ok &= measured;
                    continue;
                }
                let measured = measure::point(
                    measure::PointContext {
                        plan,
                        point: point_plan,
                        slot,
                        base_url: &entry,
                        readiness: &entry_role.readiness,
                        cancel: &cancel,
                        client: site.as_ref(),
                    },
                    tokenizers,
                    archive,
                    reporter.clone(),
                    watch,
                )
                .await?;
                ok &= measured;
            }
        }
        Err(error) => {
            ok = false;
            reporter.event(&Event::DeploymentFailed {
                id: &deployment.id,
                error: &error,
            });
            archive.update(|m| {
                let d = &mut m.deployments[dep_index];
                d.status = DeploymentStatus::Failed;
                d.error = Some(error.clone());
                d.instances = facts;
            })?;
            skip(
                archive,
                pending,
                &format!("deployment {} failed to start", deployment.id),
            )?;
        }
    }
    stop_all(instances).await;
    archive.update(|m| {
        if m.deployments[dep_index].status == DeploymentStatus::Ready {
            m.deployments[dep_index].status = DeploymentStatus::Stopped;
        }
    })?;
    Ok(ok)
}

/// Launch every instance role by role, each role ready before the next starts.
async fn launch_all(
    plan: &Plan,
    deployment: &DeploymentPlan,
    providers: &dyn ProviderSet,
    archive: &Archive,
    instances: &mut Vec<(String, Box<dyn Instance>)>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    for role in &deployment.roles {
        let first_of_role = instances.len();
        for instance in &role.instances {
            let provider = providers
                .provider_for(role, instance)
                .map_err(|e| format!("{e:#}"))?;
            let mut env: Vec<(String, String)> = instance
                .env
                .iter()
                .map(|e| (e.name.clone(), e.value.expose().to_string()))
                .collect();
            env.extend(process_gpu_env(role, &env));
            let path = archive.log_path(&deployment.id, &role.name, instance.index);
            let log = LogSink::create(&path)
                .map_err(|e| format!("failed to create log {}: {e}", path.display()))?;
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
            let launched = provider
                .launch(request)
                .await
                .map_err(|e| error_chain(&e))?;
            instances.push((format!("{}-{}", role.name, instance.index), launched));
        }
        let generate = role.readiness.generate.then(|| GenerateProbe {
            model: plan.model.clone(),
        });
        for (_, instance) in &instances[first_of_role..] {
            readiness::wait(
                instance.as_ref(),
                &role.readiness,
                generate.as_ref(),
                cancel,
            )
            .await
            .map_err(|e| e.to_string())?;
            instance.ready().await;
        }
    }
    Ok(())
}

/// GPU pinning variables of a process role (`container.gpu_ids`); containers are pinned by
/// their provider instead.
fn process_gpu_env(role: &RolePlan, env: &[(String, String)]) -> Vec<(String, String)> {
    match role.provider {
        crate::plan::ProviderKind::Local => {
            crate::provider::gpu_env::pinning(&role.resources, &role.container, env)
        }
        _ => Vec::new(),
    }
}

/// The pinning variables each process got, in its facts (`gpu_env`).
fn record_gpu_env(deployment: &DeploymentPlan, facts: &mut BTreeMap<String, serde_json::Value>) {
    for role in &deployment.roles {
        for instance in &role.instances {
            let env: Vec<(String, String)> = instance
                .env
                .iter()
                .map(|e| (e.name.clone(), String::new()))
                .collect();
            let pinned = process_gpu_env(role, &env);
            let key = format!("{}-{}", role.name, instance.index);
            if let (false, Some(map)) = (
                pinned.is_empty(),
                facts.get_mut(&key).and_then(|f| f.as_object_mut()),
            ) {
                let pinned: serde_json::Map<String, serde_json::Value> =
                    pinned.into_iter().map(|(k, v)| (k, v.into())).collect();
                map.insert("gpu_env".into(), pinned.into());
            }
        }
    }
}

/// Resolves with the first instance that exits (never, when there are none).
fn any_exit(
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

async fn stop_all(instances: Vec<(String, Box<dyn Instance>)>) {
    // Reverse start order: dependants first.
    for (key, instance) in instances.into_iter().rev() {
        let what = instance.describe();
        if let Err(e) = instance.stop().await {
            tracing::warn!("failed to stop {key} ({what}): {}", error_chain(&e));
        }
    }
}
