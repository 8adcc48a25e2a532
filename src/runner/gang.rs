//! Starting one role's processes: in its gangs' start order (`startup_order`, dstack's key)
//! and, for a Ray gang (`readiness.ray`), until each replica's Ray cluster has all its nodes.
//!
//! - `any` (default): every process at once.
//! - `master-first`: node 0 of each replica first; once it is up (with `readiness.ray`: its
//!   Ray head answers `ray status` with itself as a node; else: alive for [`SETTLE`]), the
//!   other ranks.
//! - `workers-first`: the ranks above 0 first; once they are alive for [`SETTLE`], node 0.
//!
//! Then, with `readiness.ray`, each replica's cluster must count `ray.nodes` alive nodes
//! (`readiness::ray`) before the runner probes the leaders as usual. A process of the
//! deployment that exits meanwhile fails the start at once.
//!
//! The processes of one phase start together, unless one names another's pod address (a
//! gang's ranks on Kubernetes wait for their leader's IP): then one after another.
//!
//! Owns: the order and the Ray wait. Does not own: launching one process
//! (`instances::launch_one`) or the per-process readiness probes (`deployment::launch_all`).

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::events::{Event, Reporter};
use super::instances::{Exited, Instances, StartError, any_exit, launch_one};
use super::processes::Timings;
use crate::archive::Archive;
use crate::fleet::ProviderSet;
use crate::plan::{DeploymentPlan, InstancePlan, Plan, RayPlan, RolePlan};
use crate::readiness::ray::{self, Cluster, RayError, Target};
use crate::readiness::{TAIL_LINES, tail_text};
use crate::spec::dstack::StartupOrder;

/// How long the first processes of an ordered gang must stay alive before the others start,
/// when nothing better tells that they are up.
const SETTLE: Duration = Duration::from_secs(1);

/// What one role's start needs from its deployment.
pub(super) struct RoleStart<'a> {
    pub plan: &'a Plan,
    pub deployment: &'a DeploymentPlan,
    pub role: &'a RolePlan,
    pub providers: &'a dyn ProviderSet,
    pub archive: &'a Archive,
    pub reporter: &'a dyn Reporter,
    pub cancel: &'a CancellationToken,
}

/// What the Ray wait of one replica saw, for the manifest (its leader's facts, `ray`).
#[derive(Debug, Clone, Serialize)]
pub(super) struct RayOutcome {
    /// The leader's key (`<role>-<index>`).
    #[serde(skip)]
    pub leader: String,
    /// The head's GCS address asked.
    pub address: String,
    /// Alive nodes counted.
    pub nodes: u32,
    pub expected: u32,
    /// Seconds from the role's start until the count was reached.
    pub waited_s: f64,
}

/// Launch `start.role`'s processes in its start order (appended to `instances`), then wait
/// for each replica's Ray cluster when the role counts Ray nodes.
pub(super) async fn start_role(
    start: &RoleStart<'_>,
    instances: &mut Instances,
    timings: &mut Timings,
) -> Result<Vec<RayOutcome>, StartError> {
    let role = start.role;
    let began = Instant::now();
    let first_of_role = instances.len();
    let (first, then) = phases(role);
    launch_phase(start, &first, instances, timings).await?;
    if !then.is_empty() {
        match (role.startup_order, &role.readiness.ray) {
            (StartupOrder::MasterFirst, Some(ray)) => {
                for planned in &first {
                    let cluster = cluster(role, planned, ray, instances);
                    wait_ray(start, &cluster, Target::AtLeast(1), instances)
                        .await
                        .map_err(|e| {
                            StartError::Ray(with_tails(e, role, planned, &[planned], instances))
                        })?;
                }
            }
            _ => settle(start.cancel, instances).await?,
        }
        launch_phase(start, &then, instances, timings).await?;
    }
    let Some(ray) = &role.readiness.ray else {
        return Ok(Vec::new());
    };
    let expected = ray.nodes.unwrap_or(1);
    let mut out = Vec::new();
    for leader in role.instances.iter().filter(|i| i.is_leader()) {
        let cluster = cluster(role, leader, ray, instances);
        let nodes = wait_ray(start, &cluster, Target::Exactly(expected), instances)
            .await
            .map_err(|e| {
                let ranks: Vec<&InstancePlan> = role
                    .instances
                    .iter()
                    .filter(|i| i.replica == leader.replica && !i.is_leader())
                    .collect();
                StartError::Ray(with_tails(
                    e,
                    role,
                    leader,
                    &ranks,
                    &instances[first_of_role..],
                ))
            })?;
        out.push(RayOutcome {
            leader: key(role, leader),
            address: cluster.address.clone(),
            nodes,
            expected,
            waited_s: began.elapsed().as_secs_f64(),
        });
    }
    Ok(out)
}

/// The processes started first and those started once they are up (empty: all at once).
fn phases(role: &RolePlan) -> (Vec<&InstancePlan>, Vec<&InstancePlan>) {
    let (leaders, ranks): (Vec<&InstancePlan>, Vec<&InstancePlan>) =
        role.instances.iter().partition(|i| i.is_leader());
    match role.startup_order {
        _ if ranks.is_empty() => (leaders, Vec::new()),
        StartupOrder::Any => (role.instances.iter().collect(), Vec::new()),
        StartupOrder::MasterFirst => (leaders, ranks),
        StartupOrder::WorkersFirst => (ranks, leaders),
    }
}

fn key(role: &RolePlan, planned: &InstancePlan) -> String {
    format!("{}-{}", role.name, planned.index)
}

/// Launch `phase` (processes of one role to start together): all at once when none of them
/// names the address of another (on Kubernetes a pod can name only pods already running, and
/// a pod's launch waits for its IP), else one after another in their order. Every process
/// launched is appended to `instances` in plan order, also when another failed.
async fn launch_phase(
    start: &RoleStart<'_>,
    phase: &[&InstancePlan],
    instances: &mut Instances,
    timings: &mut Timings,
) -> Result<(), StartError> {
    if phase.len() < 2 || names_each_other(start.role, phase) {
        for planned in phase {
            launch(start, planned, instances, timings).await?;
        }
        return Ok(());
    }
    let mut placed = Vec::new();
    for planned in phase {
        placed.push(place(start, planned, instances, timings).map_err(unplaced)?);
    }
    let launched = join_all(placed.iter().map(|(_, planned)| start_one(start, planned))).await;
    let mut failed = None;
    for ((key, _), result) in placed.into_iter().zip(launched) {
        match result {
            Ok(instance) => instances.push((key, instance)),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Whether a process of `phase` names the (pod) address of another process of it.
fn names_each_other(role: &RolePlan, phase: &[&InstancePlan]) -> bool {
    phase.iter().any(|planned| {
        phase
            .iter()
            .filter(|other| other.index != planned.index)
            .map(|other| crate::plan::KubePlace::address_token(&role.name, other.index))
            .any(|token| {
                planned.commands.iter().any(|c| c.contains(&token))
                    || planned
                        .env
                        .iter()
                        .any(|e| e.value.expose().contains(&token))
            })
    })
}

async fn launch(
    start: &RoleStart<'_>,
    planned: &InstancePlan,
    instances: &mut Instances,
    timings: &mut Timings,
) -> Result<(), StartError> {
    let (key, planned) = place(start, planned, instances, timings).map_err(unplaced)?;
    let launched = start_one(start, &planned).await?;
    instances.push((key, launched));
    Ok(())
}

/// `planned`'s key, its launch noted in `timings`, and the instance with the pod addresses
/// of `instances` already started put in.
fn place<'p>(
    start: &RoleStart<'_>,
    planned: &'p InstancePlan,
    instances: &Instances,
    timings: &mut Timings,
) -> Result<(String, std::borrow::Cow<'p, InstancePlan>), super::pod_addresses::Unplaced> {
    let key = key(start.role, planned);
    timings.launching(&key);
    let planned = super::pod_addresses::place(start.role, planned, instances)?;
    Ok((key, planned))
}

fn unplaced(e: super::pod_addresses::Unplaced) -> StartError {
    StartError::Unplaced(e.to_string())
}

/// Launch one placed process of the role.
async fn start_one(
    start: &RoleStart<'_>,
    planned: &InstancePlan,
) -> Result<Box<dyn crate::provider::Instance>, StartError> {
    launch_one(
        start.plan,
        start.deployment,
        start.role,
        planned,
        start.providers,
        start.archive,
    )
    .await
}

/// Every process started so far stays alive for [`SETTLE`].
async fn settle(cancel: &CancellationToken, instances: &Instances) -> Result<(), StartError> {
    tokio::select! {
        (key, exit, tail) = any_exit(instances) => Err(Exited {
            key,
            place: None,
            exit,
            tail,
            when: Exited::STARTING.to_string(),
        }
        .into()),
        _ = cancel.cancelled() => Err(StartError::Cancelled),
        _ = tokio::time::sleep(SETTLE) => Ok(()),
    }
}

/// The Ray cluster whose head is `leader`: its host's address and the GCS port.
fn cluster<'a>(
    role: &RolePlan,
    leader: &InstancePlan,
    ray: &'a RayPlan,
    instances: &'a Instances,
) -> Cluster<'a> {
    let key = key(role, leader);
    let head = instances
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, i)| i.as_ref())
        .expect("the leader was launched before its cluster is asked");
    Cluster {
        head,
        address: format!("{}:{}", leader.host.address(), ray.port),
        ray,
        env: leader
            .env
            .iter()
            .map(|e| (e.name.clone(), e.value.expose().to_string()))
            .collect(),
    }
}

/// Wait for `target` on `cluster`, telling the reporter each new count
/// (`<leader>: ray: 1/2 nodes`).
async fn wait_ray(
    start: &RoleStart<'_>,
    cluster: &Cluster<'_>,
    target: Target,
    instances: &Instances,
) -> Result<u32, RayError> {
    let role = start.role;
    let ray = role
        .readiness
        .ray
        .as_ref()
        .expect("a Ray wait has readiness.ray");
    let expected = ray.nodes.unwrap_or(1);
    let head = cluster.head.describe();
    let id = &start.deployment.id;
    let mut on_count = |n: Option<u32>| {
        let text = match (target, n) {
            (Target::AtLeast(_), Some(n)) => {
                format!("ray: head up ({n}/{expected} nodes), starting the other ranks")
            }
            (_, Some(n)) => format!("ray: {n}/{expected} nodes"),
            (Target::AtLeast(_), None) => "ray: waiting for the head".to_string(),
            (Target::Exactly(_), None) => format!("ray: waiting for {expected} nodes"),
        };
        start.reporter.event(&Event::DeploymentProgress {
            id,
            text: &format!("{} ({head}): {text}", role.name),
        });
    };
    on_count(None);
    let interval = role.readiness.interval.max(Duration::from_millis(500));
    let mut exited = any_exit(instances);
    ray::wait(
        cluster,
        target,
        (interval, role.readiness.timeout),
        start.cancel,
        &mut exited,
        &mut on_count,
    )
    .await
}

/// The error of a replica's Ray wait, with what to check and, on a timeout, the last log
/// lines of `shown` (the ranks that should have joined; the head while it starts).
fn with_tails(
    error: RayError,
    role: &RolePlan,
    leader: &InstancePlan,
    shown: &[&InstancePlan],
    launched: &[(String, Box<dyn crate::provider::Instance>)],
) -> String {
    let leader_key = key(role, leader);
    let RayError::Timeout { address, .. } = &error else {
        return format!("{leader_key}: {error}");
    };
    let mut text = format!(
        "{leader_key}: {error}; check that the head's `ray start --head --port {}` runs and that every other rank's `ray start --address` reaches {address}, or raise `readiness.timeout` of role `{}`",
        role.readiness.ray.as_ref().map_or(0, |r| r.port),
        role.name
    );
    for rank in shown {
        let rank_key = key(role, rank);
        if let Some((_, instance)) = launched.iter().find(|(k, _)| *k == rank_key) {
            text.push_str(&format!(
                "\nlast log lines of {rank_key} ({}):\n{}",
                instance.describe(),
                tail_text(&instance.log().tail(TAIL_LINES))
            ));
        }
    }
    text
}
