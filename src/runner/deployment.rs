//! One deployment of a run: launch its instances role by role (each role ready before the
//! next starts), measure its pending points (a sweep point or an external command), stop it.
//! The archive records every step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::bookkeeping::{self, RunError, Slot, skip};
use super::events::{Event, Reporter};
use super::failure::{self, Running, fail, not_run, slurm_ended};
use super::instances::{
    ExitOrder, Exited, Instances, StartError, any_exit, first_of, named, process_gpu_env, stop_all,
};
use super::{external, gang, measure, processes, topology};
use crate::archive::{Archive, DeploymentStatus, PointStatus};
use crate::client::MetricsSource;
use crate::fleet::slurm::{self, SlurmAllocation, WithSlurm};
use crate::fleet::{ProviderSet, RunClient};
use crate::plan::{DeploymentPlan, Plan};
use crate::readiness::{self, GenerateProbe};
use crate::shutdown::Shutdown;

/// What every deployment of one run shares.
pub(super) struct RunState<'a> {
    pub plan: &'a Plan,
    pub providers: &'a dyn ProviderSet,
    pub reporter: Arc<dyn Reporter>,
    pub tokenizers: measure::Tokenizers,
    pub shutdown: &'a Shutdown,
    pub client: RunClient,
    /// GPU telemetry beside every point (`run --telemetry`).
    pub telemetry: Option<&'a super::telemetry::Telemetry>,
    /// Points to measure in this run, and how many have begun.
    pub total: usize,
    pub counter: usize,
}

/// Launch, wait, measure, stop one deployment. Returns false when anything in it failed.
pub(super) async fn run_deployment(
    state: &mut RunState<'_>,
    archive: &mut Archive,
    deployment: &DeploymentPlan,
    pending: &[usize],
) -> Result<bool, RunError> {
    let dep_index = archive
        .manifest()
        .deployments
        .iter()
        .position(|d| d.id == deployment.id)
        .expect("deployment in manifest");
    state
        .reporter
        .event(&Event::DeploymentStarting { id: &deployment.id });
    archive.update(|m| m.deployments[dep_index].status = DeploymentStatus::Starting)?;
    let started = Instant::now();
    // Slurm nodes are allocated first: the deployment then runs on them (tokens replaced).
    let mut on_nodes = deployment.clone();
    let allocated = match allocate(state, archive, &mut on_nodes).await? {
        SlurmAllocation::None => None,
        SlurmAllocation::Granted(allocated) => Some(allocated),
        SlurmAllocation::Failed(error) => {
            let error = error.to_string();
            start_failed(
                state,
                archive,
                (dep_index, deployment),
                &error,
                None,
                pending,
            )?;
            return Ok(false);
        }
    };
    let deployment = &on_nodes;
    let providers = WithSlurm {
        inner: state.providers,
        allocated: allocated.as_ref(),
    };
    let mut instances: Instances = Vec::new();
    let cancel = state.shutdown.token();
    let base: &Plan = state.plan;
    let mut plan = base.for_deployment(deployment);
    let mut timings = processes::Timings::default();
    let launched = launch_all(
        &plan,
        deployment,
        (&providers, state.reporter.as_ref()),
        archive,
        (&mut instances, &mut timings),
        &cancel,
    )
    .await;
    let versions = match &launched {
        Ok(_) => processes::versions(deployment, &instances).await,
        Err(_) => BTreeMap::new(),
    };
    let mut facts = processes::records(deployment, &instances, &timings, &versions);
    record_gpu_env(deployment, &mut facts);
    if let Ok(launched) = &launched {
        record_readiness(deployment, launched, &mut facts);
    }
    let ok = match launched {
        Ok(launched) => {
            let after = started.elapsed();
            if let Some(model) = &launched.model {
                plan.to_mut().model.clone_from(model);
            }
            archive.update(|m| {
                if m.model.is_empty() {
                    m.model = plan.model.clone();
                }
                let d = &mut m.deployments[dep_index];
                d.served_model.clone_from(&launched.model);
                d.status = DeploymentStatus::Ready;
                d.time_to_ready_s = Some(after.as_secs_f64());
                d.instances = facts;
            })?;
            state.reporter.event(&Event::DeploymentReady {
                id: &deployment.id,
                after,
            });
            let running = Running {
                instances: &instances,
                allocated: allocated.as_ref(),
                order: ExitOrder::watch(&instances),
            };
            measure_points(
                (state, &providers),
                &plan,
                archive,
                (dep_index, deployment),
                &running,
                pending,
            )
            .await?
        }
        Err(error) => {
            let error = failure::start_error(allocated.as_ref(), &error).await;
            let dep = (dep_index, deployment);
            start_failed(state, archive, dep, &error, Some(facts), pending)?;
            false
        }
    };
    let ok = match &allocated {
        Some(allocated) => {
            let reporter = state.reporter.as_ref();
            slurm_ended(reporter, archive, (dep_index, deployment), allocated, ok).await?
        }
        None => ok,
    };
    let watches = processes::exit_watches(&instances);
    stop_all(instances).await;
    if let Some(allocated) = allocated {
        allocated.release().await;
    }
    let exits = processes::exits(&watches);
    archive.update(|m| {
        if m.deployments[dep_index].status == DeploymentStatus::Ready {
            m.deployments[dep_index].status = DeploymentStatus::Stopped;
        }
        processes::record_exits(&mut m.deployments[dep_index].instances, &exits);
    })?;
    Ok(ok)
}

/// A deployment that did not start: failed with `error` (and the instances' `facts`), its
/// points not run.
fn start_failed(
    state: &RunState<'_>,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    error: &str,
    facts: Option<BTreeMap<String, serde_json::Value>>,
    pending: &[usize],
) -> Result<(), RunError> {
    let reporter = state.reporter.as_ref();
    fail(
        reporter,
        archive,
        (dep_index, deployment),
        error,
        facts,
        false,
    )?;
    skip(
        archive,
        pending,
        &format!("deployment {} failed to start", deployment.id),
    )?;
    Ok(())
}

/// Allocate `deployment`'s Slurm nodes (see `fleet::slurm::allocate`), each job recorded in
/// the manifest's hosts as it goes.
async fn allocate(
    state: &RunState<'_>,
    archive: &mut Archive,
    deployment: &mut DeploymentPlan,
) -> Result<SlurmAllocation, RunError> {
    let run_id = archive.manifest().run_id.clone();
    let allocation = slurm::allocate(
        (state.plan, state.shutdown, state.providers),
        deployment,
        &run_id,
        |key, facts| {
            archive.update(|m| {
                m.hosts.insert(key.to_string(), facts);
            })
        },
    )
    .await?;
    Ok(allocation)
}

/// The entry's URL (the first instance of `entry_role`) and the other instances: their
/// /metrics join the entry's in every point's time series.
fn entry_and_others(instances: &Instances, entry_role: &str) -> (String, Vec<MetricsSource>) {
    let entry = first_of(instances, entry_role)
        .map(|i| i.base_url())
        .unwrap_or_default();
    let others = instances
        .iter()
        .filter(|(_, i)| i.base_url() != entry)
        .map(|(key, i)| MetricsSource {
            name: key.clone(),
            base_url: i.base_url(),
        })
        .collect();
    (entry, others)
}

/// Measure the pending points of a ready deployment (`plan` as it runs this deployment), in
/// order; after a failure with `stop_on_failure`, or once cancelled, the rest are skipped.
/// The deployment's first failure (an instance found dead, the Slurm job ended, the server
/// silent or down) fails it once, with its first cause and when, and the rest are recorded
/// as not run, with that reason. False when one failed.
async fn measure_points(
    (state, providers): (&mut RunState<'_>, &dyn ProviderSet),
    plan: &Plan,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    running: &Running<'_>,
    pending: &[usize],
) -> Result<bool, RunError> {
    let cancel = state.shutdown.token();
    let instances = running.instances;
    let site = state.client.site(deployment);
    let (entry, metrics_sources) = entry_and_others(instances, &deployment.entry_role);
    let entry_role = deployment
        .roles
        .iter()
        .find(|r| r.name == deployment.entry_role)
        .unwrap_or(&deployment.roles[0]);
    let mut ok = true;
    let mut dead: Option<String> = None;
    // When a failure found between points came: after the last point measured.
    let mut last: Option<String> = None;
    let failed = |state: &RunState<'_>, archive: &mut Archive, cause: &str| {
        fail(
            state.reporter.as_ref(),
            archive,
            (dep_index, deployment),
            cause,
            None,
            true,
        )
        .map(|()| not_run(&deployment.id, cause))
    };
    for &index in pending {
        if dead.is_none()
            && !cancel.is_cancelled()
            && let Some(cause) = running.cause(&failure::after(last.as_deref())).await
        {
            dead = Some(failed(state, archive, &cause)?);
        }
        if let Some(reason) = &dead {
            skip(archive, &[index], reason)?;
            ok = false;
            continue;
        }
        if cancel.is_cancelled() || (!ok && state.plan.stop_on_failure) {
            skip(archive, &[index], "the run stopped before this point")?;
            continue;
        }
        state.counter += 1;
        let point_id = archive.manifest().points[index].id.clone();
        let point_plan = deployment
            .points
            .iter()
            .find(|p| p.id == point_id)
            .expect("manifest point in plan");
        let watch = running.order.first_exit(instances);
        let slot = Slot {
            index,
            ordinal: state.counter,
            total: state.total,
        };
        let during = format!("during point {point_id}");
        let telemetry =
            super::telemetry::PointTelemetry::of(state.telemetry, deployment, providers);
        let measured = match &point_plan.external {
            Some(ext) => match external::instance(deployment, instances, &ext.role) {
                Ok((instance, env)) => {
                    let ctx = external::ExternalContext {
                        plan,
                        external: ext,
                        slot,
                        instance,
                        env,
                        base_url: &entry,
                        readiness: &entry_role.readiness,
                        cancel: &cancel,
                        telemetry,
                    };
                    external::point(ctx, archive, state.reporter.clone(), watch).await?
                }
                Err(e) => {
                    let reporter = state.reporter.as_ref();
                    bookkeeping::begin(archive, reporter, slot)?;
                    bookkeeping::finish(archive, reporter, slot, PointStatus::Failed, Some(e))?
                }
            },
            None => {
                let ctx = measure::PointContext {
                    plan,
                    point: point_plan,
                    slot,
                    base_url: &entry,
                    readiness: &entry_role.readiness,
                    cancel: &cancel,
                    client: site.as_ref(),
                    telemetry,
                    slurm: running.allocated,
                    metrics_sources: &metrics_sources,
                };
                let measured = measure::point(
                    ctx,
                    &state.tokenizers,
                    archive,
                    state.reporter.clone(),
                    watch,
                )
                .await?;
                let why = running.point_cause(&measured, &during).await;
                if let Some(cause) = why {
                    // The deployment fails once; the points left are not run.
                    dead = Some(failed(state, archive, &cause)?);
                }
                measured.ok
            }
        };
        last = Some(point_id);
        ok &= measured;
    }
    if dead.is_none() && !cancel.is_cancelled() {
        // An instance that died during or after the last point fails the deployment too.
        if let Some(cause) = running.cause(&failure::after(last.as_deref())).await {
            failed(state, archive, &cause)?;
            ok = false;
        }
    }
    Ok(ok)
}

/// What starting a deployment found out beyond each process's readiness (`processes::Timings`):
/// what each router reported, and what each Ray cluster counted.
#[derive(Default)]
struct Started {
    topology: Vec<topology::Outcome>,
    ray: Vec<gang::RayOutcome>,
    /// The model the entry server named at `/v1/models`, when the task names none.
    model: Option<String>,
}

/// Launch every role in start order, each ready before the next starts (its gangs in their
/// `startup_order`, Ray clusters counted: `gang`), then check the topology. A process of an
/// earlier role that exits meanwhile fails the start at once.
async fn launch_all(
    plan: &Plan,
    deployment: &DeploymentPlan,
    (providers, reporter): (&dyn ProviderSet, &dyn Reporter),
    archive: &Archive,
    (instances, timings): (&mut Instances, &mut processes::Timings),
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Started, StartError> {
    let mut out = Started::default();
    for role in &deployment.roles {
        let first_of_role = instances.len();
        let start = gang::RoleStart {
            plan,
            deployment,
            role,
            providers,
            archive,
            reporter,
            cancel,
        };
        out.ray
            .extend(gang::start_role(&start, instances, timings).await?);
        let generate = role.readiness.generate.then(|| GenerateProbe {
            model: plan.model.clone(),
        });
        // Launched in start order: find each process's plan by its key, `<role>-<index>`.
        for (key, instance) in &instances[first_of_role..] {
            let planned = key
                .rsplit_once('-')
                .and_then(|(_, i)| i.parse::<usize>().ok())
                .and_then(|i| role.instances.iter().find(|p| p.index == i))
                .expect("a launched process of the role is planned");
            let readiness_plan = role.readiness_of(planned);
            let waited = readiness::wait(
                instance.as_ref(),
                &readiness_plan,
                generate.as_ref(),
                cancel,
            );
            tokio::select! {
                waited = waited => waited.map_err(|e| StartError::Readiness(named(key, e)))?,
                (key, exit, tail) = any_exit(&instances[..first_of_role]) => {
                    let when = Exited::STARTING.to_string();
                    return Err(Exited { key, place: None, exit, tail, when }.into());
                }
            };
            instance.ready().await;
            timings.ready(key);
        }
    }
    if plan.model.is_empty() {
        out.model = Some(served_model(instances, deployment, cancel).await?);
    }
    let model = out.model.as_deref().unwrap_or(&plan.model);
    for check in topology::checks(plan, deployment) {
        let (Some(router), Some(entry)) = (
            first_of(instances, &check.role.name),
            first_of(instances, &deployment.entry_role),
        ) else {
            continue;
        };
        let workers = registered(instances, deployment, check.register);
        let mut exited = any_exit(instances);
        let outcome =
            topology::run_check(&check, router, entry, &workers, model, cancel, &mut exited)
                .await
                .map_err(StartError::Topology)?;
        out.topology.push(outcome);
    }
    Ok(out)
}

/// The leaders (node 0 of each replica) of `roles`, to register with a router: the running
/// instance and its URL as the plan gives it to other roles.
fn registered<'a>(
    instances: &'a Instances,
    deployment: &DeploymentPlan,
    roles: &[String],
) -> Vec<readiness::register::Worker<'a>> {
    let mut out = Vec::new();
    for role in deployment.roles.iter().filter(|r| roles.contains(&r.name)) {
        for planned in role.instances.iter().filter(|i| i.node_rank == 0) {
            let key = format!("{}-{}", role.name, planned.index);
            if let Some((_, instance)) = instances.iter().find(|(k, _)| *k == key) {
                out.push(readiness::register::Worker {
                    instance: instance.as_ref(),
                    url: format!("http://{}:{}", planned.host.address(), planned.port),
                });
            }
        }
    }
    out
}

/// The model the entry instance serves, from its `/v1/models` (tried for up to
/// [`MODELS_WAIT`]: a server probed ready at `/health` may list its model a moment later).
async fn served_model(
    instances: &Instances,
    deployment: &DeploymentPlan,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<String, StartError> {
    let Some(entry) = first_of(instances, &deployment.entry_role) else {
        return Err(StartError::NoModel {
            what: format!("role `{}`", deployment.entry_role),
            last: "it has no running instance".into(),
        });
    };
    let origin =
        crate::fetch::Origin::parse(&entry.base_url()).map_err(|e| StartError::NoModel {
            what: entry.describe(),
            last: e.to_string(),
        })?;
    let started = Instant::now();
    loop {
        let last = match readiness::served_model(&origin.root(), MODELS_WAIT).await {
            Ok(id) => return Ok(id),
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= MODELS_WAIT {
            return Err(StartError::NoModel {
                what: entry.describe(),
                last,
            });
        }
        tokio::select! {
            () = cancel.cancelled() => return Err(StartError::Cancelled),
            () = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
        }
    }
}

/// How long the entry server has to name its model once ready.
const MODELS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

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

/// On the entry role's first instance, what the topology check saw (`topology`); on each
/// Ray gang's leader, what its cluster counted (`ray`).
fn record_readiness(
    deployment: &DeploymentPlan,
    started: &Started,
    facts: &mut BTreeMap<String, serde_json::Value>,
) {
    for outcome in &started.ray {
        if let Some(map) = facts
            .get_mut(&outcome.leader)
            .and_then(|f| f.as_object_mut())
        {
            let value = serde_json::to_value(outcome).unwrap_or_default();
            map.insert("ray".into(), value);
        }
    }
    let entry = format!("{}-0", deployment.entry_role);
    if let (false, Some(map)) = (
        started.topology.is_empty(),
        facts.get_mut(&entry).and_then(|f| f.as_object_mut()),
    ) {
        let value = serde_json::to_value(&started.topology).unwrap_or_default();
        map.insert("topology".into(), value);
    }
}
