//! One deployment of a run: launch its instances (`launch`), measure its pending points (a
//! sweep point or an external command) or run its capacity search (`search`, which may ask
//! for the deployment to be started again), stop it. The archive records every step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::bookkeeping::{self, RunError, Slot, skip};
use super::events::{Event, Reporter};
use super::failure::{self, Running, fail, not_run, slurm_ended};
use super::instances::{ExitOrder, Instances, first_of, stop_all};
use super::launch::{launch_all, record_gpu_env, record_readiness};
use super::search::{Next, SearchRun};
use super::{external, measure, processes};
use crate::archive::{Archive, DeploymentStatus, PointStatus};
use crate::client::MetricsSource;
use crate::fleet::slurm::{self, SlurmAllocation, WithSlurm};
use crate::fleet::{ProviderSet, RunClient};
use crate::plan::{DeploymentPlan, Plan};
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

/// What to measure on a deployment: its pending points (manifest indices), or its capacity
/// search, which adds its points as it goes and may start the deployment more than once.
pub(super) enum Work<'a> {
    Points(&'a [usize]),
    Search(&'a mut SearchRun),
}

impl Work<'_> {
    /// The points planned ahead (none for a search).
    fn pending(&self) -> &[usize] {
        match self {
            Work::Points(p) => p,
            Work::Search(_) => &[],
        }
    }
}

/// Launch, wait, measure, stop one deployment (a search may stop and start it again between
/// its measurements). Returns false when anything in it failed.
#[expect(
    clippy::too_many_lines,
    reason = "one deployment's whole life (starts, search repetitions, points, stop) read top to bottom; to split with the search loop"
)]
pub(super) async fn run_deployment(
    state: &mut RunState<'_>,
    archive: &mut Archive,
    deployment: &DeploymentPlan,
    mut work: Work<'_>,
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
    let mut started = Instant::now();
    // Slurm nodes are allocated first: the deployment then runs on them (tokens replaced).
    let mut on_nodes = deployment.clone();
    let allocated = match allocate(state, archive, &mut on_nodes).await? {
        SlurmAllocation::None => None,
        SlurmAllocation::Granted(allocated) => Some(allocated),
        SlurmAllocation::Failed(error) => {
            let error = error.to_string();
            let pending = work.pending();
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
    let cancel = state.shutdown.token();
    let base: &Plan = state.plan;
    let mut plan = base.for_deployment(deployment);
    let ok = loop {
        let mut instances: Instances = Vec::new();
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
        let pids: BTreeMap<String, Option<u32>> = facts
            .iter()
            .map(|(k, v)| (k.clone(), v["pid"].as_u64().map(|p| p as u32)))
            .collect();
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
                if let Work::Search(search) = &mut work {
                    search.started(archive, dep_index, pids)?;
                }
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
                    &mut work,
                )
                .await?
            }
            Err(error) => {
                let error = failure::start_error(allocated.as_ref(), &error).await;
                let dep = (dep_index, deployment);
                start_failed(state, archive, dep, &error, Some(facts), work.pending())?;
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
        let exits = processes::exits(&watches);
        archive.update(|m| {
            if m.deployments[dep_index].status == DeploymentStatus::Ready {
                m.deployments[dep_index].status = DeploymentStatus::Stopped;
            }
            processes::record_exits(&mut m.deployments[dep_index].instances, &exits);
        })?;
        let again = matches!(&work, Work::Search(s) if s.wants_redeploy());
        if !ok || !again || cancel.is_cancelled() {
            break ok;
        }
        // The search measures its next level on a fresh deployment.
        state
            .reporter
            .event(&Event::DeploymentStarting { id: &deployment.id });
        archive.update(|m| m.deployments[dep_index].status = DeploymentStatus::Starting)?;
        started = Instant::now();
    };
    if let Some(allocated) = allocated {
        allocated.release().await;
    }
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
#[expect(
    clippy::too_many_lines,
    reason = "the point loop with its sweep/search and external/load branches; to split"
)]
async fn measure_points(
    (state, providers): (&mut RunState<'_>, &dyn ProviderSet),
    plan: &Plan,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    running: &Running<'_>,
    work: &mut Work<'_>,
) -> Result<bool, RunError> {
    let cancel = state.shutdown.token();
    let mut queue = work.pending().to_vec().into_iter();
    // A search's failing level is a verdict, not a failure: only its deployment's failing
    // (or the run's ending) stops it.
    let searching = matches!(work, Work::Search(_));
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
    // `over_saturation: stop`: each over-saturated point's load, id, and why.
    let mut saturated: Vec<(crate::plan::LoadPlan, String, String)> = Vec::new();
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
    loop {
        let index = match work {
            Work::Points(_) => match queue.next() {
                Some(index) => index,
                None => break,
            },
            // A search ends with its deployment, or the run.
            Work::Search(_) if dead.is_some() || cancel.is_cancelled() => break,
            Work::Search(search) => match search.next(archive, dep_index)? {
                Next::Point(index) => {
                    state.total += 1;
                    index
                }
                Next::Redeploy | Next::Done => break,
            },
        };
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
        if cancel.is_cancelled() || (!ok && state.plan.stop_on_failure && !searching) {
            skip(archive, &[index], "the run stopped before this point")?;
            continue;
        }
        if let Work::Points(_) = work {
            let id = &archive.manifest().points[index].id;
            let next = deployment.points.iter().find(|p| &p.id == id);
            if let Some(reason) = next.and_then(|p| super::escalation::stopped(&saturated, p)) {
                skip(archive, &[index], &reason)?;
                continue;
            }
        }
        state.counter += 1;
        let point_id = archive.manifest().points[index].id.clone();
        let point_plan = match work {
            Work::Search(search) => search.plan(),
            Work::Points(_) => deployment.points.iter().find(|p| p.id == point_id),
        }
        .expect("manifest point in plan")
        .clone();
        let point_plan = &point_plan;
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
                if let Some(why) = &measured.saturated {
                    saturated.push((point_plan.load.clone(), point_id.clone(), why.clone()));
                }
                let why = running.point_cause(&measured, &during).await;
                if let Some(cause) = why {
                    // The deployment fails once; the points left are not run.
                    dead = Some(failed(state, archive, &cause)?);
                }
                measured.ok
            }
        };
        last = Some(point_id);
        ok &= measured || searching;
        // A level measured while the deployment died is no verdict on the level.
        if let Work::Search(search) = work
            && !cancel.is_cancelled()
            && dead.is_none()
        {
            search.measured(archive, dep_index)?;
        }
    }
    ok &= dead.is_none();
    if dead.is_none() && !cancel.is_cancelled() {
        // An instance that died during or after the last point fails the deployment too.
        if let Some(cause) = running.cause(&failure::after(last.as_deref())).await {
            failed(state, archive, &cause)?;
            ok = false;
        }
    }
    Ok(ok)
}
