//! [`KubeProvider`]: the [`Provider`] for one Kubernetes cluster of the hosts file. Connects
//! with its kubeconfig and context, starts each instance as a Secret (its environment) and a
//! pod, and waits until the pod has an IP or will never run; lists and deletes our objects by
//! label (`ps`, `clean`).

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;
use serde_json::json;

use super::error::{KubeError, is_conflict};
use super::forward::PortForward;
use super::instance::{Addresses, KubeInstance, PodRef};
use super::pod;
use super::status::{self, PodState};
use crate::hosts::KubernetesCluster;
use crate::provider::{Instance, LaunchRequest, Provider, ProviderError};
use crate::shutdown::Shutdown;

/// How long a pod's termination grace is (SIGTERM, then SIGKILL).
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a starting pod's status is read.
const POLL: Duration = Duration::from_millis(250);

/// Starts task instances as pods on one Kubernetes cluster.
pub struct KubeProvider {
    cluster: KubernetesCluster,
    config: kube::Config,
    client: kube::Client,
    shutdown: Shutdown,
    /// `client.reach`: `tunnel` reaches each pod through port-forwarding, anything else at its
    /// IP.
    reach: crate::deploy::ReachMode,
}

/// A pod of ours left on a cluster (`orchestrate ps`, `orchestrate clean`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeLeftover {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub run: String,
    pub task: String,
    pub role: String,
    pub replica: String,
    pub image: String,
    /// `Pending`, `Running`, `Succeeded`, `Failed`.
    pub phase: String,
    /// Pid of the orchestrate process that created it.
    pub owner_pid: String,
}

impl KubeProvider {
    /// Connect to `cluster`: its kubeconfig (else `KUBECONFIG`, `~/.kube/config`, in-cluster)
    /// and context. Nothing is asked of the API server yet.
    pub async fn connect(
        cluster: &KubernetesCluster,
        shutdown: Shutdown,
    ) -> Result<Self, ProviderError> {
        let at = cluster
            .at("kubeconfig")
            .or(cluster.at("context"))
            .map(|at| format!(" ({at})"))
            .unwrap_or_default();
        let config_error = |message: String| KubeError::Config {
            cluster: cluster.name.clone(),
            at: at.clone(),
            message,
        };
        let options = KubeConfigOptions {
            context: cluster.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match (&cluster.kubeconfig, &cluster.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| config_error(format!("{}: {e}", path.display())))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| config_error(e.to_string()))?
            }
            (None, Some(_)) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| config_error(e.to_string()))?,
            (None, None) => kube::Config::infer()
                .await
                .map_err(|e| config_error(e.to_string()))?,
        };
        let client = kube::Client::try_from(config.clone())
            .map_err(|e| config_error(format!("no client: {e}")))?;
        Ok(Self {
            cluster: cluster.clone(),
            config,
            client,
            shutdown,
            reach: crate::deploy::ReachMode::default(),
        })
    }

    /// Reach pods as `client.reach` says: `tunnel` through the API server's port-forwarding,
    /// else (`auto`, `direct`) at their IPs.
    pub fn with_reach(mut self, reach: crate::deploy::ReachMode) -> Self {
        self.reach = reach;
        self
    }

    /// The cluster this provider starts pods on.
    pub fn cluster(&self) -> &KubernetesCluster {
        &self.cluster
    }

    /// A client of the cluster's API server.
    pub(super) fn client(&self) -> kube::Client {
        self.client.clone()
    }

    fn pod_ref(&self, name: &str) -> PodRef {
        let ns = &self.cluster.namespace;
        PodRef {
            config: self.config.clone(),
            pods: Api::namespaced(self.client.clone(), ns),
            secrets: Api::namespaced(self.client.clone(), ns),
            events: Api::namespaced(self.client.clone(), ns),
            cluster: self.cluster.name.clone(),
            namespace: ns.clone(),
            name: name.to_string(),
        }
    }

    /// Start one pod; the typed form of [`Provider::launch`]. Returns once the pod has an IP;
    /// a pod that will never run (unschedulable, image missing) is an error with its events,
    /// and is deleted.
    pub async fn launch_pod(&self, request: LaunchRequest) -> Result<KubeInstance, ProviderError> {
        if request.image.is_none() {
            return Err(ProviderError::NoImage {
                role: request.role.clone(),
                task: request.task.clone(),
            });
        }
        let name = pod::pod_name(&request);
        let target = self.pod_ref(&name);
        let kill = KubeInstance::register_kill(&target, &self.shutdown);
        let cluster = &self.cluster.name;
        let grace = i64::try_from(STOP_GRACE.as_secs()).unwrap_or(i64::MAX);
        let secret = pod::secret(&request, &self.cluster, &name);
        let spec = pod::pod(&request, &self.cluster, &name, grace);
        let started = std::time::Instant::now();
        target
            .secrets
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| {
                if is_conflict(&e) {
                    KubeError::Unsupported {
                        what: format!(
                            "a second run with id {} (secret {name} exists)",
                            request.run_id
                        ),
                    }
                } else {
                    KubeError::api(format!("create secret {name}"), cluster)(e)
                }
            })?;
        // From here on every error path deletes both objects.
        let created = target.pods.create(&PostParams::default(), &spec).await;
        if let Err(e) = created {
            if let Err(d) = target.delete_blocking(0) {
                tracing::error!("could not delete secret {name}: {d}");
            }
            return Err(KubeError::api(format!("create pod {name}"), cluster)(e).into());
        }
        let token = self.shutdown.token();
        let ip = loop {
            let pod = tokio::select! {
                pod = target.pods.get(&name) => pod,
                () = token.cancelled() => {
                    delete_quietly(&target).await;
                    return Err(ProviderError::Other { message: format!("interrupted while pod {name} was starting") });
                }
            };
            match pod {
                Ok(pod) => match status::state(&pod) {
                    PodState::Failed(reason) => {
                        let events = target.events_block().await;
                        delete_quietly(&target).await;
                        return Err(KubeError::PodFailed {
                            pod: name,
                            cluster: cluster.clone(),
                            reason,
                            events,
                        }
                        .into());
                    }
                    _ => {
                        if let Some(ip) = status::pod_ip(&pod) {
                            break ip;
                        }
                    }
                },
                Err(e) => {
                    delete_quietly(&target).await;
                    return Err(KubeError::api(format!("read pod {name}"), cluster)(e).into());
                }
            }
            tokio::time::sleep(POLL).await;
        };
        let facts = json!({
            "provider": "kubernetes",
            "cluster": cluster,
            "namespace": self.cluster.namespace,
            "pod": {"name": name, "ip": ip, "port": request.port, "host_network": self.cluster.host_network},
            "image": request.image,
            "scheduled_in_s": started.elapsed().as_secs_f64(),
        });
        tracing::info!("started pod {name} ({ip}) on Kubernetes cluster {cluster}");
        let peer_url = format!("http://{ip}:{}", request.port);
        let mut facts = facts;
        let forward = if self.reach == crate::deploy::ReachMode::Tunnel {
            match PortForward::start(target.pods.clone(), name.clone(), request.port).await {
                Ok(forward) => {
                    facts["reach"] =
                        json!({"mode": "port_forward", "local": forward.local_addr().to_string()});
                    Some(forward)
                }
                Err(e) => {
                    delete_quietly(&target).await;
                    return Err(ProviderError::Other {
                        message: format!("cannot listen for the port-forward to pod {name}: {e}"),
                    });
                }
            }
        } else {
            facts["reach"] = json!({"mode": "direct"});
            None
        };
        Ok(KubeInstance::own(
            target,
            Addresses { peer_url, forward },
            request.log,
            facts,
            STOP_GRACE,
            kill,
        ))
    }

    /// Our pods on this cluster (in its namespace), of run `run` when given.
    pub async fn list(&self, run: Option<&str>) -> Result<Vec<KubeLeftover>, ProviderError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.cluster.namespace);
        let list = pods
            .list(&selector(run))
            .await
            .map_err(KubeError::api("list pods", &self.cluster.name))?;
        let mut out: Vec<KubeLeftover> = list
            .items
            .iter()
            .map(|p| {
                let note = |key: &str| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(key).cloned())
                        .unwrap_or_default()
                };
                KubeLeftover {
                    cluster: self.cluster.name.clone(),
                    namespace: self.cluster.namespace.clone(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    run: note(pod::RUN),
                    task: note(pod::TASK),
                    role: note(pod::ROLE),
                    replica: note(pod::REPLICA),
                    image: p
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.image.clone())
                        .unwrap_or_default(),
                    owner_pid: note(pod::OWNER_PID),
                    phase: p
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default(),
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.run, &a.name).cmp(&(&b.run, &b.name)));
        Ok(out)
    }

    /// Delete our pod `name` and its Secret now (`orchestrate clean`); already gone is fine.
    pub async fn delete(&self, name: &str) -> Result<(), ProviderError> {
        let target = self.pod_ref(name);
        let params = DeleteParams::default().grace_period(0);
        for result in [
            target.pods.delete(name, &params).await.map(|_| ()),
            target.secrets.delete(name, &params).await.map(|_| ()),
        ] {
            match result {
                Ok(()) => {}
                Err(e) if super::error::is_not_found(&e) => {}
                Err(e) => {
                    return Err(
                        KubeError::api(format!("delete {name}"), &self.cluster.name)(e).into(),
                    );
                }
            }
        }
        Ok(())
    }
}

/// Our objects (`orchestrate/run` set), of run `run` when given.
fn selector(run: Option<&str>) -> ListParams {
    match run {
        Some(run) => {
            ListParams::default().labels(&format!("{}={}", pod::RUN, pod::label_value(run)))
        }
        None => ListParams::default().labels(pod::RUN),
    }
}

/// Delete a pod that failed to start, and its Secret; failures are logged.
async fn delete_quietly(target: &PodRef) {
    let target = target.clone();
    let name = target.name.clone();
    let result = tokio::task::spawn_blocking(move || target.delete_blocking(0)).await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!("could not delete pod {name}: {e}"),
        Err(e) => tracing::error!("could not delete pod {name}: {e}"),
    }
}

/// The pod `request` would be on `cluster`, as YAML (`orchestrate plan`); its environment
/// is in a Secret of the same name, so no value shows here.
pub fn pod_yaml(request: &LaunchRequest, cluster: &KubernetesCluster) -> String {
    let name = pod::pod_name(request);
    let grace = i64::try_from(STOP_GRACE.as_secs()).unwrap_or(i64::MAX);
    let spec = pod::pod(request, cluster, &name, grace);
    let value = serde_json::to_value(&spec).unwrap_or_default();
    serde_saphyr::to_string(&value).unwrap_or_else(|e| format!("# cannot render the pod: {e}\n"))
}

#[async_trait]
impl Provider for KubeProvider {
    fn name(&self) -> String {
        format!("kubernetes:{}", self.cluster.name)
    }

    async fn launch(&self, request: LaunchRequest) -> Result<Box<dyn Instance>, ProviderError> {
        Ok(Box::new(self.launch_pod(request).await?))
    }

    async fn host_facts(&self) -> serde_json::Value {
        let version = self
            .client
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_else(|e| format!("unknown ({e})"));
        json!({
            "provider": "kubernetes",
            "cluster": self.cluster.name,
            "namespace": self.cluster.namespace,
            "server_version": version,
        })
    }
}
