//! The Slurm allocations of one deployment: one per Slurm cluster it uses, as many nodes as
//! it has instances there. The job id goes into the manifest (`hosts."slurm:<cluster>:<d>"`)
//! as soon as salloc names it; once granted, the allocated nodes replace the plan's node
//! tokens throughout the deployment (hosts, commands, env), and each instance on a node is
//! started by a [`SlurmProvider`] for it. Released (`scancel`, waited for) after the
//! deployment's instances are stopped; on any other path the allocation guard cancels.
//! A cluster with `login: <host>` is driven through that host of the hosts file: every Slurm
//! command (sinfo, salloc, squeue, scontrol, scancel) and every `srun` step runs there over
//! SSH (the steps as remote process groups of the ssh provider), and the servers on the nodes
//! are reached through it (`client.reach`, tunnels to the node's address as the login host
//! sees it).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hosts::SlurmCluster;
use crate::plan::{DeploymentPlan, EnvValue, HostPlan, InstancePlan, Plan, RolePlan, SlurmPlace};
use crate::provider::local::LocalProvider;
use crate::provider::reach::Reaching;
use crate::provider::ssh::{Reach, SshProvider};
use crate::provider::{Provider, ProviderError};
use crate::shutdown::Shutdown;
use crate::slurm::commands::{comment, job_name};
use crate::slurm::preflight::{Ask, Estimate, SINFO_ARGS, Severity, check, estimate, parse_time};
use crate::slurm::{Allocation, PendingAllocation, SlurmError, SlurmHost, SlurmProvider};
use crate::ssh::Session;
use crate::units::error_chain;

use super::providers::{Logins, ProviderSet};

/// A deployment's allocations and the providers on their nodes.
pub struct Allocated {
    allocations: Vec<Allocation>,
    /// (cluster, node name) -> the provider of steps there.
    providers: BTreeMap<(String, String), Arc<dyn Provider>>,
}

/// What allocating a deployment's Slurm nodes came to.
pub enum SlurmAllocation {
    /// The deployment uses no Slurm cluster.
    None,
    /// Every cluster granted its nodes; the deployment now runs on them.
    Granted(Allocated),
    /// The deployment fails with this reason (what was allocated is released).
    Failed(AllocationError),
}

/// Why a deployment's Slurm nodes were not allocated.
#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    #[error(transparent)]
    NoLogin(#[from] NoLoginSession),
    #[error("cannot allocate {nodes} node(s) on Slurm cluster `{cluster}`: {}", error_chain(.source))]
    Submit {
        nodes: usize,
        cluster: String,
        source: SlurmError,
    },
    #[error("slurm job {job} on cluster `{cluster}` did not start: {}", error_chain(.source))]
    NotStarted {
        job: String,
        cluster: String,
        source: SlurmError,
    },
}

/// A cluster driven through a login host with no session to it.
#[derive(Debug, thiserror::Error)]
#[error("no ssh session to login host `{login}` of Slurm cluster `{cluster}`")]
pub struct NoLoginSession {
    login: String,
    cluster: String,
}

/// Why the Slurm pre-flight failed: its problems, one line each.
#[derive(Debug)]
pub(super) struct PreflightFailed {
    pub problems: String,
    /// The hosts file is at fault (a partition that does not exist, ...); else Slurm could
    /// not be asked.
    pub bad_input: bool,
}

/// Pre-flight of every Slurm cluster `plan` uses, before any `salloc`: one `sinfo` call per
/// place the commands run (this machine, each login host, through `logins`) checked by
/// [`crate::slurm::preflight::check`] against each deployment's nodes, GPUs, gres, and time
/// limit. Errors are bad input (exit 2), each at the hosts-file key to change; warnings (a
/// time limit shorter than the plan's load time) are logged and the run goes on. `sinfo`
/// failing to run or answering in an unknown form fails the run (exit 1).
pub(super) async fn preflight(plan: &Plan, logins: &Logins) -> Result<(), PreflightFailed> {
    let asks: Vec<(SlurmCluster, usize, Estimate)> = plan
        .deployments
        .iter()
        .flat_map(|d| {
            let estimate = estimate(d);
            clusters(d)
                .into_values()
                .map(move |(cluster, nodes, _)| (cluster, nodes, estimate))
        })
        .collect();
    if asks.is_empty() {
        return Ok(());
    }
    let failed = |problems: String, bad_input: bool| PreflightFailed {
        problems,
        bad_input,
    };
    let mut argv = vec!["sinfo".to_string()];
    argv.extend(SINFO_ARGS.iter().map(|a| a.to_string()));
    // One `sinfo` per place the commands run (this machine, each login host).
    let mut answers: BTreeMap<Option<String>, String> = BTreeMap::new();
    let mut errors: Vec<String> = Vec::new();
    let mut warned = std::collections::HashSet::new();
    for (cluster, nodes, estimate) in &asks {
        if !answers.contains_key(&cluster.login) {
            let host = slurm_host(cluster, logins).map_err(|e| failed(e.to_string(), false))?;
            let text = crate::slurm::cli::output(&host, &argv)
                .await
                .map_err(|e| failed(format!("  {}", error_chain(&e)), false))?;
            answers.insert(cluster.login.clone(), text);
        }
        let sinfo = &answers[&cluster.login];
        let Some(time_limit) = parse_time(&cluster.time_limit) else {
            errors.push(format!(
                "  {}: `{}`: `{}` is not a Slurm time: write minutes (`90`), `H:MM:SS` or \
                 `D-HH:MM:SS`",
                cluster.time_limit_at,
                cluster.key("time_limit"),
                cluster.time_limit
            ));
            continue;
        };
        let ask = Ask {
            partition: &cluster.partition,
            nodes: *nodes,
            gpus_per_node: Some(cluster.gpus_per_node).filter(|g| *g > 0),
            gres: cluster.gres.as_deref(),
            time_limit,
            estimate: *estimate,
        };
        let problems = check(sinfo, &ask).map_err(|e| failed(format!("  {e}"), false))?;
        for p in problems {
            let line = format!(
                "{}: `{}`: {}",
                cluster.at(p.key),
                cluster.key(p.key),
                p.message
            );
            match p.severity {
                Severity::Error => errors.push(format!("  {line}")),
                Severity::Warning if warned.insert(line.clone()) => tracing::warn!("{line}"),
                Severity::Warning => {}
            }
        }
    }
    // Deployments on the same cluster find the same problems: each is said once.
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(failed(errors.join("\n"), true))
    }
}

/// Login host names of the Slurm clusters `plan` uses, by cluster name.
pub(super) fn login_hosts(plan: &Plan) -> BTreeMap<String, String> {
    plan.deployments
        .iter()
        .flat_map(clusters)
        .filter_map(|(name, (cluster, _, _))| cluster.login.map(|login| (name, login)))
        .collect()
}

/// Where `cluster`'s Slurm commands run: this machine, or its login host's session.
fn slurm_host(cluster: &SlurmCluster, logins: &Logins) -> Result<SlurmHost, NoLoginSession> {
    match &cluster.login {
        None => Ok(SlurmHost::Here),
        Some(login) => logins
            .get(&cluster.name)
            .map(|s| SlurmHost::Login(s.clone()))
            .ok_or_else(|| NoLoginSession {
                login: login.clone(),
                cluster: cluster.name.clone(),
            }),
    }
}

/// Slurm clusters `deployment` places instances on, with their node counts and the most
/// processes one of their nodes runs (the processes of one node, with `procs`, share its
/// slot).
pub(crate) fn clusters(
    deployment: &DeploymentPlan,
) -> BTreeMap<String, (SlurmCluster, usize, usize)> {
    let mut out: BTreeMap<String, (SlurmCluster, usize, usize)> = BTreeMap::new();
    let mut per_slot: BTreeMap<(String, usize), usize> = BTreeMap::new();
    for instance in deployment.roles.iter().flat_map(|r| &r.instances) {
        if let HostPlan::Slurm(place) = &instance.host {
            let name = place.cluster.name.clone();
            let on_slot = per_slot.entry((name.clone(), place.slot)).or_default();
            *on_slot += 1;
            let entry = out
                .entry(name)
                .or_insert_with(|| (place.cluster.clone(), 0, 1));
            entry.1 = entry.1.max(place.slot + 1);
            entry.2 = entry.2.max(*on_slot);
        }
    }
    out
}

/// Allocate the nodes of `deployment` (nothing when it uses no Slurm cluster) through the
/// login sessions of `providers`, and rewrite it onto them. Each job goes to `record` as
/// `slurm:<cluster>:<deployment>` and its facts: once salloc names it (pending), again once
/// granted; an error of `record` stops the allocation (what was allocated is released on
/// drop) and is returned.
pub async fn allocate<E>(
    (plan, shutdown, providers): (&Plan, &Shutdown, &dyn ProviderSet),
    deployment: &mut DeploymentPlan,
    run_id: &str,
    mut record: impl FnMut(&str, serde_json::Value) -> Result<(), E>,
) -> Result<SlurmAllocation, E> {
    let logins = &providers.slurm_logins();
    let wanted = clusters(deployment);
    if wanted.is_empty() {
        return Ok(SlurmAllocation::None);
    }
    let local = Arc::new(LocalProvider::new(shutdown.clone()));
    let mut out = Allocated {
        allocations: Vec::new(),
        providers: BTreeMap::new(),
    };
    for (name, (cluster, nodes, per_node)) in wanted {
        let job = job_name(&plan.task);
        let note = comment(run_id, &plan.task, &deployment.id, std::process::id());
        let key = format!("slurm:{name}:{}", deployment.id);
        let host = match slurm_host(&cluster, logins) {
            Ok(host) => host,
            Err(e) => {
                out.release().await;
                return Ok(SlurmAllocation::Failed(e.into()));
            }
        };
        let submitted =
            PendingAllocation::submit(&cluster, &host, (nodes, per_node, &job, &note), shutdown)
                .await;
        let pending = match submitted {
            Ok(pending) => pending,
            Err(source) => {
                out.release().await;
                return Ok(SlurmAllocation::Failed(AllocationError::Submit {
                    nodes,
                    cluster: name,
                    source,
                }));
            }
        };
        let job_id = pending.job().to_string();
        record(
            &key,
            serde_json::json!({
                "cluster": name, "partition": cluster.partition, "job_id": job_id,
                "job_name": job, "comment": note, "state": "pending",
                "login": cluster.login,
            }),
        )?;
        let allocation = match pending.granted(&shutdown.token()).await {
            Ok(allocation) => allocation,
            Err(source) => {
                out.release().await;
                return Ok(SlurmAllocation::Failed(AllocationError::NotStarted {
                    job: job_id,
                    cluster: name,
                    source,
                }));
            }
        };
        record(&key, allocation.record(&job, &note))?;
        let starter: Arc<dyn Provider> = match &host {
            SlurmHost::Here => local.clone(),
            SlurmHost::Login(session) => Arc::new(SshProvider::new(
                session.clone(),
                shutdown.clone(),
                Reach::Direct,
            )),
        };
        for node in &allocation.nodes {
            let provider = SlurmProvider::new(
                (starter.clone(), host.clone()),
                cluster.clone(),
                &allocation.job,
                node.clone(),
            );
            let provider: Arc<dyn Provider> = match &host {
                SlurmHost::Here => Arc::new(provider),
                SlurmHost::Login(session) => Arc::new(
                    Reaching::new(Arc::new(provider), session.clone(), plan.client.reach)
                        .elsewhere(),
                ),
            };
            out.providers
                .insert((name.clone(), node.name.clone()), provider);
        }
        place_on_nodes(deployment, &name, &allocation.nodes);
        out.allocations.push(allocation);
    }
    Ok(SlurmAllocation::Granted(out))
}

impl Allocated {
    /// `slurm job J ended: JobState=... Reason=...` for the first allocation whose job no
    /// longer runs; `None` while all run.
    pub async fn ended(&self) -> Option<String> {
        for allocation in &self.allocations {
            if let Some(state) =
                crate::slurm::allocation::end_state(allocation.host(), &allocation.job).await
            {
                return Some(format!("slurm job {} ended: {state}", allocation.job));
            }
        }
        None
    }

    /// Cancel every allocation and wait until Slurm has let them go.
    pub async fn release(self) {
        for allocation in self.allocations {
            let job = allocation.job.clone();
            if let Err(e) = allocation.release().await {
                tracing::warn!("failed to release slurm job {job}: {}", error_chain(&e));
            }
        }
    }
}

/// Replace the tokens of `cluster`'s slots with `nodes` (slot i is node i) everywhere in
/// `deployment`: the instances' hosts, commands and environment.
fn place_on_nodes(deployment: &mut DeploymentPlan, cluster: &str, nodes: &[crate::slurm::Node]) {
    let swaps: Vec<(String, String)> = nodes
        .iter()
        .enumerate()
        .flat_map(|(slot, node)| {
            [
                (
                    SlurmPlace::address_token(cluster, slot),
                    node.address.clone(),
                ),
                (SlurmPlace::name_token(cluster, slot), node.name.clone()),
            ]
        })
        .collect();
    let swap = |text: &mut String| {
        for (token, value) in &swaps {
            if text.contains(token.as_str()) {
                *text = text.replace(token.as_str(), value);
            }
        }
    };
    for instance in deployment.roles.iter_mut().flat_map(|r| &mut r.instances) {
        if let HostPlan::Slurm(place) = &mut instance.host
            && place.cluster.name == cluster
            && let Some(node) = nodes.get(place.slot)
        {
            place.name = node.name.clone();
            place.address = node.address.clone();
        }
        instance.commands.iter_mut().for_each(swap);
        for var in &mut instance.env {
            match &mut var.value {
                EnvValue::Plain(v) => swap(v),
                EnvValue::Secret { value, .. } => swap(value),
            }
        }
    }
}

/// The run's providers, with the deployment's Slurm nodes in front.
pub struct WithSlurm<'a> {
    pub inner: &'a dyn ProviderSet,
    pub allocated: Option<&'a Allocated>,
}

impl WithSlurm<'_> {
    /// The provider of the allocated node `host` is, when it is a Slurm node of this set.
    fn node(&self, host: &HostPlan) -> Option<Result<Arc<dyn Provider>, ProviderError>> {
        let (HostPlan::Slurm(place), Some(allocated)) = (host, self.allocated) else {
            return None;
        };
        let key = (place.cluster.name.clone(), place.name.clone());
        Some(
            allocated
                .providers
                .get(&key)
                .cloned()
                .ok_or_else(|| ProviderError::Other {
                    message: format!(
                        "node `{}` is not in the allocation on Slurm cluster `{}`",
                        place.name, place.cluster.name
                    ),
                }),
        )
    }
}

impl ProviderSet for WithSlurm<'_> {
    fn provider_for(
        &self,
        role: &RolePlan,
        instance: &InstancePlan,
    ) -> Result<Arc<dyn Provider>, ProviderError> {
        if let Some(node) = self.node(&instance.host) {
            return node;
        }
        self.inner.provider_for(role, instance)
    }

    fn sampler_for(&self, host: &HostPlan) -> Result<Arc<dyn Provider>, ProviderError> {
        if let Some(node) = self.node(host) {
            return node;
        }
        self.inner.sampler_for(host)
    }

    fn client_session(&self) -> Option<Session> {
        self.inner.client_session()
    }

    fn slurm_logins(&self) -> Logins {
        self.inner.slurm_logins()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::SlurmContainer;
    use crate::plan::PlanContext;
    use crate::slurm::Node;

    #[test]
    fn allocated_nodes_replace_the_tokens_everywhere() {
        let cluster = SlurmCluster {
            name: "gpu".into(),
            partition: "p".into(),
            account: None,
            qos: None,
            time_limit: "10".into(),
            gpus_per_node: 0,
            gres: None,
            container: SlurmContainer::None,
            login: None,
            partition_at: "h:1:1".into(),
            time_limit_at: "h:1:1".into(),
            gpus_per_node_at: "h:1:1".into(),
            gres_at: None,
        };
        let ctx = PlanContext::new().with_slurm([("gpu".to_string(), cluster)].into());
        let yaml = "name: s\nmodel: m\nhosts: [gpu]\nnodes: 2\nport: 9000\nenv:\n  MASTER: \"{{ master_addr }}\"\ncommands: [\"serve --rank {{ node_rank }} --master {{ master_addr }} on {{ host }}\"]\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n";
        let task = crate::spec::load_str(std::path::Path::new("t.yaml"), yaml.into()).unwrap();
        let plan = crate::plan::build(&task, &ctx).unwrap();
        let mut d = plan.deployments[0].clone();
        assert_eq!(clusters(&d)["gpu"].1, 2);
        assert_eq!(clusters(&d)["gpu"].2, 1);
        let nodes = [
            Node {
                name: "n7".into(),
                address: "10.0.0.7".into(),
            },
            Node {
                name: "n8".into(),
                address: "10.0.0.8".into(),
            },
        ];
        place_on_nodes(&mut d, "gpu", &nodes);
        let i = &d.roles[0].instances[1];
        assert_eq!(i.commands[0], "serve --rank 1 --master 10.0.0.7 on n8");
        assert_eq!(
            i.env
                .iter()
                .find(|e| e.name == "MASTER")
                .unwrap()
                .value
                .expose(),
            "10.0.0.7"
        );
        assert_eq!(i.host.address(), "10.0.0.8");
    }
}
