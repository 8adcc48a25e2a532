//! One deployment of a run: launch its instances role by role (each role ready before the
//! next starts), measure its pending points (a sweep point or an external command), stop it.
//! The archive records every step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::bookkeeping::{self, RunError, Slot, skip};
use super::events::{Event, Reporter};
use super::instances::{
    Exited, Instances, StartError, any_exit, first_of, process_gpu_env, stop_all,
};
use super::{external, gang, measure, processes, topology};
use crate::archive::{Archive, DeploymentStatus, PointStatus};
use crate::fleet::slurm::{self, Allocated, SlurmAllocation, WithSlurm};
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
            fail(
                state,
                archive,
                (dep_index, deployment),
                &error.to_string(),
                None,
            )?;
            skip(
                archive,
                pending,
                &format!("deployment {} failed to start", deployment.id),
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
    let plan = base.for_deployment(deployment);
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
        Ok(_) => {
            let after = started.elapsed();
            archive.update(|m| {
                let d = &mut m.deployments[dep_index];
                d.status = DeploymentStatus::Ready;
                d.time_to_ready_s = Some(after.as_secs_f64());
                d.instances = facts;
            })?;
            state.reporter.event(&Event::DeploymentReady {
                id: &deployment.id,
                after,
            });
            measure_points(
                (state, &providers),
                &plan,
                archive,
                (dep_index, deployment),
                &instances,
                pending,
            )
            .await?
        }
        Err(error) => {
            let error = error.to_string();
            fail(state, archive, (dep_index, deployment), &error, Some(facts))?;
            skip(
                archive,
                pending,
                &format!("deployment {} failed to start", deployment.id),
            )?;
            false
        }
    };
    let ok = match &allocated {
        Some(allocated) => {
            slurm_ended(state, archive, (dep_index, deployment), allocated, ok).await?
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

/// A job Slurm ended (time limit, node failure, scancel from outside) fails the deployment
/// with Slurm's state and reason, whatever the instances' exits showed; else `ok` stands.
async fn slurm_ended(
    state: &RunState<'_>,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    allocated: &Allocated,
    ok: bool,
) -> Result<bool, RunError> {
    let Some(reason) = allocated.ended().await else {
        return Ok(ok);
    };
    let d = &archive.manifest().deployments[dep_index];
    let error = match (&d.status, &d.error) {
        (DeploymentStatus::Failed, Some(e)) if e.contains(&reason) => e.clone(),
        (DeploymentStatus::Failed, Some(e)) => format!("{reason}; {e}"),
        _ => reason,
    };
    fail(state, archive, (dep_index, deployment), &error, None)?;
    Ok(false)
}

/// Measure the pending points of a ready deployment (`plan` as it runs this deployment), in
/// order; after a failure with
/// `stop_on_failure`, or once cancelled, the rest are skipped. The first instance found dead
/// fails the deployment (once, with its exit status and log tail) and the rest are recorded
/// as not run, with that reason. False when one failed.
async fn measure_points(
    (state, providers): (&mut RunState<'_>, &dyn ProviderSet),
    plan: &Plan,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    instances: &Instances,
    pending: &[usize],
) -> Result<bool, RunError> {
    let cancel = state.shutdown.token();
    let site = state.client.site(deployment);
    let entry = first_of(instances, &deployment.entry_role)
        .map(|i| i.base_url())
        .unwrap_or_default();
    let entry_role = deployment
        .roles
        .iter()
        .find(|r| r.name == deployment.entry_role)
        .unwrap_or(&deployment.roles[0]);
    let mut ok = true;
    let mut dead: Option<String> = None;
    for &index in pending {
        if dead.is_none() && !cancel.is_cancelled() {
            dead = dead_instance(state, archive, (dep_index, deployment), instances).await?;
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
        let point_plan = deployment
            .points
            .iter()
            .find(|p| p.id == archive.manifest().points[index].id)
            .expect("manifest point in plan");
        let watch = any_exit(instances);
        let slot = Slot {
            index,
            ordinal: state.counter,
            total: state.total,
        };
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
                    telemetry: state
                        .telemetry
                        .map(|telemetry| super::telemetry::PointTelemetry {
                            telemetry,
                            deployment,
                            providers,
                        }),
                };
                let measured = measure::point(
                    ctx,
                    &state.tokenizers,
                    archive,
                    state.reporter.clone(),
                    watch,
                )
                .await?;
                let why = match (&measured.silent, &measured.down) {
                    (Some(reason), _) => {
                        Some((reason, "went silent (no byte within the stall timeout)"))
                    }
                    // A process that ended says why better than a failed health check: give
                    // its exit a moment to be seen.
                    (None, Some(_))
                        if tokio::time::timeout(DOWN_EXIT_GRACE, any_exit(instances))
                            .await
                            .is_ok() =>
                    {
                        dead = dead_instance(state, archive, (dep_index, deployment), instances)
                            .await?;
                        None
                    }
                    (None, Some(reason)) => Some((
                        reason,
                        "was down (no request of a point completed, then its health check failed)",
                    )),
                    (None, None) => None,
                };
                if let Some((reason, what)) = why {
                    // A silent or dead server fails its deployment once; the points left are
                    // not run.
                    fail(state, archive, (dep_index, deployment), reason, None)?;
                    dead = Some(format!("not run: deployment {} {what}", deployment.id));
                }
                measured.ok
            }
        };
        ok &= measured;
    }
    if dead.is_none() && !cancel.is_cancelled() {
        // An instance that died during the last point fails the deployment too.
        ok &= dead_instance(state, archive, (dep_index, deployment), instances)
            .await?
            .is_none();
    }
    Ok(ok)
}

/// Mark the deployment failed with `error`: the reporter's event and the manifest record
/// (with the instances' facts, when they were not recorded yet).
fn fail(
    state: &RunState<'_>,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    error: &str,
    facts: Option<BTreeMap<String, serde_json::Value>>,
) -> Result<(), RunError> {
    let error = &*crate::plan::secrets::redact(error);
    state.reporter.event(&Event::DeploymentFailed {
        id: &deployment.id,
        error,
    });
    archive.update(|m| {
        let d = &mut m.deployments[dep_index];
        d.status = DeploymentStatus::Failed;
        d.error = Some(error.to_string());
        if let Some(facts) = facts {
            d.instances = facts;
        }
    })?;
    Ok(())
}

/// How long a server found down after a point may take to show as an exited process.
const DOWN_EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// When an instance of the deployment has exited: fail the deployment with which one, how it
/// ended and its last log lines, and return the reason the points left are not run.
async fn dead_instance(
    state: &RunState<'_>,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    instances: &Instances,
) -> Result<Option<String>, RunError> {
    // An exit is seen by the provider a moment after the process ends.
    let exited =
        tokio::time::timeout(std::time::Duration::from_millis(50), any_exit(instances)).await;
    let Ok((key, exit, tail)) = exited else {
        return Ok(None);
    };
    let error = Exited {
        key: key.clone(),
        exit: exit.clone(),
        tail,
        when: Exited::RUNNING,
    }
    .to_string();
    fail(state, archive, (dep_index, deployment), &error, None)?;
    Ok(Some(format!(
        "not run: {key} of deployment {} exited ({exit})",
        deployment.id
    )))
}

/// What starting a deployment found out beyond each process's readiness (`processes::Timings`):
/// what each router reported, and what each Ray cluster counted.
#[derive(Default)]
struct Started {
    topology: Vec<topology::Outcome>,
    ray: Vec<gang::RayOutcome>,
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
                waited = waited => waited.map_err(StartError::Readiness)?,
                (key, exit, tail) = any_exit(&instances[..first_of_role]) => {
                    return Err(Exited { key, exit, tail, when: Exited::STARTING }.into());
                }
            };
            instance.ready().await;
            timings.ready(key);
        }
    }
    for check in topology::checks(plan, deployment) {
        let (Some(router), Some(entry)) = (
            first_of(instances, &check.role.name),
            first_of(instances, &deployment.entry_role),
        ) else {
            continue;
        };
        let mut exited = any_exit(instances);
        let outcome = topology::run_check(&check, router, entry, &plan.model, cancel, &mut exited)
            .await
            .map_err(StartError::Topology)?;
        out.topology.push(outcome);
    }
    Ok(out)
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
