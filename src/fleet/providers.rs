//! The providers of one run: [`ProviderSet`] (which provider runs an instance) and its
//! implementation [`Providers`]: local processes always, the local Docker engine after a
//! pre-flight of every docker role placed here, and the providers on remote hosts
//! ([`RemoteProviders`], which `hosts` builds).
//!
//! Does not own: the providers themselves (`crate::provider`) or remote hosts (hosts).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::deploy::Network;
use crate::plan::preflight::local_docker_needs;
use crate::plan::{HostPlan, InstancePlan, Plan, ProviderKind, RolePlan};
use crate::provider::docker::{
    DockerOptions, DockerProvider, PreflightCheck, PreflightProblem, preflight_local,
};
use crate::provider::kubernetes::{ClusterAsk, KubeProvider};
use crate::provider::local::LocalProvider;
use crate::provider::{Provider, ProviderError};
use crate::shutdown::Shutdown;
use crate::ssh::{RemoteDocker, Session};

/// Sessions to the login hosts of the Slurm clusters a plan uses, by cluster name.
pub(super) type Logins = BTreeMap<String, Session>;

/// Chooses the provider that runs an instance (local process, Docker, SSH host).
pub trait ProviderSet: Send + Sync {
    fn provider_for(
        &self,
        role: &RolePlan,
        instance: &InstancePlan,
    ) -> Result<Arc<dyn Provider>, ProviderError>;

    /// The SSH session to the plan's client host (`client.host`), when it names one.
    fn client_session(&self) -> Option<Session> {
        None
    }

    /// Sessions to the login hosts of the Slurm clusters the plan uses, by cluster name.
    fn slurm_logins(&self) -> Logins {
        Logins::new()
    }

    /// What runs a GPU sampler on `host` (a process there, whatever provider its instances
    /// use: for containers, the host they run on).
    fn sampler_for(&self, host: &HostPlan) -> Result<Arc<dyn Provider>, ProviderError> {
        Err(ProviderError::Other {
            message: format!("no provider runs processes on {host:?}"),
        })
    }
}

/// Why the local providers cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProvidersError {
    /// The local Docker pre-flight found problems; one line each.
    #[error("pre-flight of task `{task}` failed; nothing was started:\n{problems}")]
    Preflight { task: String, problems: String },
    #[error(transparent)]
    Docker(#[from] ProviderError),
}

/// The providers of one run: local processes always; Docker and remote hosts when a role asks.
pub struct Providers {
    pub local: Arc<LocalProvider>,
    pub docker: Option<Arc<DockerProvider>>,
    /// The Kubernetes clusters the plan places pods on, by name.
    pub kubernetes: BTreeMap<String, Arc<KubeProvider>>,
    remote: RemoteProviders,
}

impl Providers {
    /// Local processes, the remote providers, and the local Docker engine when `plan` places
    /// a docker role here (after its pre-flight).
    pub async fn connect(
        plan: &Plan,
        shutdown: &Shutdown,
        remote: RemoteProviders,
    ) -> Result<Self, ProvidersError> {
        let busy = crate::provider::ports::busy(&local_ports(plan));
        if !busy.is_empty() {
            let list: Vec<String> = busy.iter().map(|p| format!("  - {p}")).collect();
            return Err(ProvidersError::Preflight {
                task: plan.task.clone(),
                problems: list.join("\n"),
            });
        }
        let docker = if uses_local_docker(plan) {
            Some(Arc::new(docker_provider(plan, shutdown).await?))
        } else {
            None
        };
        let mut kubernetes = BTreeMap::new();
        let mut problems = Vec::new();
        for cluster in kubernetes_clusters(plan) {
            let provider = KubeProvider::connect(&cluster, shutdown.clone())
                .await?
                .with_reach(plan.client.reach);
            problems.extend(
                provider
                    .preflight(&kubernetes_ask(plan, &cluster.name))
                    .await
                    .map_err(ProviderError::from)?,
            );
            kubernetes.insert(cluster.name.clone(), Arc::new(provider));
        }
        if !problems.is_empty() {
            return Err(ProvidersError::Preflight {
                task: plan.task.clone(),
                problems: problems.join("\n"),
            });
        }
        Ok(Self {
            local: Arc::new(LocalProvider::new(shutdown.clone())),
            docker,
            kubernetes,
            remote,
        })
    }
}

impl ProviderSet for Providers {
    fn provider_for(
        &self,
        role: &RolePlan,
        instance: &InstancePlan,
    ) -> Result<Arc<dyn Provider>, ProviderError> {
        match (&role.provider, &instance.host) {
            (ProviderKind::Local, HostPlan::Local) => Ok(self.local.clone()),
            (ProviderKind::Docker, HostPlan::Local) => match &self.docker {
                Some(docker) => Ok(docker.clone()),
                None => Err(ProviderError::Other {
                    message: "the docker provider was not connected".into(),
                }),
            },
            (ProviderKind::Local, HostPlan::Remote { name, .. }) => {
                match self.remote.processes.get(name) {
                    Some(ssh) => Ok(ssh.clone()),
                    None => Err(ProviderError::Other {
                        message: format!("no ssh session to host `{name}`"),
                    }),
                }
            }
            (_, HostPlan::Kubernetes(place)) => match self.kubernetes.get(&place.cluster.name) {
                Some(k8s) => Ok(k8s.clone()),
                None => Err(ProviderError::Other {
                    message: format!(
                        "Kubernetes cluster `{}` was not connected",
                        place.cluster.name
                    ),
                }),
            },
            (_, HostPlan::Slurm(slurm)) => Err(ProviderError::Other {
                message: format!(
                    "no Slurm allocation on cluster `{}` for {}",
                    slurm.cluster.name, slurm.name
                ),
            }),
            (ProviderKind::Docker, HostPlan::Remote { name, .. }) => {
                match self.remote.docker.get(name) {
                    Some((docker, _tunnel)) => Ok(docker.clone()),
                    None => Err(ProviderError::Other {
                        message: format!("no docker engine connected on host `{name}`"),
                    }),
                }
            }
        }
    }

    fn client_session(&self) -> Option<Session> {
        self.remote.client.clone()
    }

    fn slurm_logins(&self) -> Logins {
        self.remote.slurm_logins.clone()
    }

    fn sampler_for(&self, host: &HostPlan) -> Result<Arc<dyn Provider>, ProviderError> {
        match host {
            HostPlan::Local => Ok(self.local.clone()),
            HostPlan::Remote { name, .. } => {
                self.remote
                    .plain
                    .get(name)
                    .cloned()
                    .ok_or_else(|| ProviderError::Other {
                        message: format!("no ssh session to host `{name}`"),
                    })
            }
            HostPlan::Slurm(slurm) => Err(ProviderError::Other {
                message: format!(
                    "no Slurm allocation on cluster `{}` for {}",
                    slurm.cluster.name, slurm.name
                ),
            }),
            HostPlan::Kubernetes(place) => Err(ProviderError::Other {
                message: format!(
                    "GPU telemetry does not sample the nodes of Kubernetes cluster `{}` yet",
                    place.cluster.name
                ),
            }),
        }
    }
}

/// Providers on remote hosts, by host name.
#[derive(Default)]
pub struct RemoteProviders {
    /// Remote processes, reached per `client.reach`.
    pub processes: BTreeMap<String, Arc<dyn Provider>>,
    /// Remote Docker (reached per `client.reach`) and the tunnel to its engine.
    pub docker: BTreeMap<String, (Arc<dyn Provider>, RemoteDocker)>,
    /// The session to the client host (`client.host`).
    pub client: Option<Session>,
    /// Plain processes (no reach wrapper) on every remote host the plan uses, for what runs
    /// beside its instances (GPU samplers).
    pub plain: BTreeMap<String, Arc<dyn Provider>>,
    /// Sessions to the login hosts of Slurm clusters, by cluster name.
    pub slurm_logins: Logins,
}

/// The ports of the local processes the plan starts on this machine.
fn local_ports(plan: &Plan) -> Vec<u16> {
    plan.deployments
        .iter()
        .flat_map(|d| &d.roles)
        .filter(|r| r.provider == ProviderKind::Local)
        .flat_map(|r| &r.instances)
        .filter(|i| matches!(i.host, HostPlan::Local))
        .map(|i| i.port)
        .collect()
}

/// The Kubernetes clusters the plan places pods on, each once.
fn kubernetes_clusters(plan: &Plan) -> Vec<crate::hosts::KubernetesCluster> {
    let mut out: Vec<crate::hosts::KubernetesCluster> = Vec::new();
    for instance in plan
        .deployments
        .iter()
        .flat_map(|d| &d.roles)
        .flat_map(|r| &r.instances)
    {
        if let HostPlan::Kubernetes(place) = &instance.host
            && !out.iter().any(|c| c.name == place.cluster.name)
        {
            out.push(place.cluster.clone());
        }
    }
    out
}

/// What `plan` asks of Kubernetes cluster `cluster`: the GPUs of each pod of the deployment
/// that asks for the most there (deployments run one after another).
fn kubernetes_ask(plan: &Plan, cluster: &str) -> ClusterAsk {
    plan.deployments
        .iter()
        .map(|d| {
            let pod_gpus: Vec<u64> = d
                .roles
                .iter()
                .flat_map(|r| {
                    r.instances.iter().filter_map(move |i| match &i.host {
                        HostPlan::Kubernetes(place) if place.cluster.name == cluster => {
                            let gpu = r.resources_of(i).gpu.as_ref();
                            Some(gpu.map_or(0, |g| u64::from(g.count)))
                        }
                        _ => None,
                    })
                })
                .collect();
            ClusterAsk { pod_gpus }
        })
        .max_by_key(|a| a.pod_gpus.iter().sum::<u64>())
        .unwrap_or_default()
}

/// Some docker role runs an instance on this machine.
fn uses_local_docker(plan: &Plan) -> bool {
    plan.deployments
        .iter()
        .flat_map(|d| &d.roles)
        .filter(|r| r.provider == ProviderKind::Docker)
        .flat_map(|r| &r.instances)
        .any(|i| matches!(i.host, HostPlan::Local))
}

/// The local Docker engine, after a pre-flight of every deployment's docker roles (engine,
/// images, GPUs, ports): every problem is reported together and nothing is started.
async fn docker_provider(
    plan: &Plan,
    shutdown: &Shutdown,
) -> Result<DockerProvider, ProvidersError> {
    let options = DockerOptions::default();
    let mut problems: Vec<PreflightProblem> = Vec::new();
    for deployment in &plan.deployments {
        let checks: Vec<PreflightCheck> = deployment
            .roles
            .iter()
            .filter(|r| r.provider == ProviderKind::Docker)
            .filter(|r| {
                r.instances
                    .iter()
                    .any(|i| matches!(i.host, HostPlan::Local))
            })
            .flat_map(|r| {
                let needs = local_docker_needs(r);
                PreflightCheck::list(
                    needs.image.as_deref(),
                    needs.gpus.as_ref(),
                    &needs.ports,
                    Network::default(),
                )
            })
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
        return Err(ProvidersError::Preflight {
            task: plan.task.clone(),
            problems: list.join("\n"),
        });
    }
    Ok(DockerProvider::connect(shutdown.clone(), options).await?)
}
