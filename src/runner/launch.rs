//! Starting a deployment: every role launched in start order, each ready before the next
//! starts (its gangs in their `startup_order`, Ray clusters counted: `gang`), the topology
//! checked, the served model asked for when the task names none; and what the starting found
//! out, written into the processes' facts (`record_gpu_env`, `record_readiness`).

use std::collections::BTreeMap;
use std::time::Instant;

use super::events::Reporter;
use super::instances::{Exited, Instances, StartError, any_exit, first_of, named, process_gpu_env};
use super::{gang, pod_addresses, processes, topology};
use crate::archive::Archive;
use crate::fleet::ProviderSet;
use crate::plan::{DeploymentPlan, Plan};
use crate::readiness::{self, GenerateProbe};

/// What starting a deployment found out beyond each process's readiness (`processes::Timings`):
/// what each router reported, and what each Ray cluster counted.
#[derive(Default)]
pub(super) struct Started {
    pub(super) topology: Vec<topology::Outcome>,
    pub(super) ray: Vec<gang::RayOutcome>,
    /// The model the entry server named at `/v1/models`, when the task names none.
    pub(super) model: Option<String>,
}

/// Launch every role in start order, each ready before the next starts (its gangs in their
/// `startup_order`, Ray clusters counted: `gang`), then check the topology. A process of an
/// earlier role that exits meanwhile fails the start at once.
pub(super) async fn launch_all(
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

/// The serving processes of `roles` (node 0 of each replica; with `procs`, every process),
/// to register with a router: the running
/// instance and its URL as the plan gives it to other roles (a pod's: its IP).
fn registered<'a>(
    instances: &'a Instances,
    deployment: &DeploymentPlan,
    roles: &[String],
) -> Vec<readiness::register::Worker<'a>> {
    let mut out = Vec::new();
    for role in deployment.roles.iter().filter(|r| roles.contains(&r.name)) {
        for planned in role.instances.iter().filter(|i| i.serves()) {
            let key = format!("{}-{}", role.name, planned.index);
            if let Some((_, instance)) = instances.iter().find(|(k, _)| *k == key) {
                out.push(readiness::register::Worker {
                    instance: instance.as_ref(),
                    url: pod_addresses::url_of(
                        planned.host.address(),
                        planned.port,
                        &instance.peer_url(),
                    ),
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
pub(super) fn record_gpu_env(
    deployment: &DeploymentPlan,
    facts: &mut BTreeMap<String, serde_json::Value>,
) {
    for role in &deployment.roles {
        for instance in &role.instances {
            let env: Vec<(String, String)> = instance
                .env
                .iter()
                .map(|e| (e.name.clone(), String::new()))
                .collect();
            let pinned = process_gpu_env(role, instance, &env);
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
pub(super) fn record_readiness(
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
