//! Pre-flight of a Kubernetes cluster, before anything is created: the namespace exists, the
//! run's identity may do what a run does there (SelfSubjectAccessReview per verb and
//! resource), and the nodes that match the node selector have the GPUs the largest pod and
//! the whole deployment ask for (allocatable `gpu_resource`). Each problem names the
//! hosts-file key to change and its line. What the identity may not read (nodes, the
//! namespace) is not guessed: it is logged and left to the scheduler.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Api;
use kube::api::{ListParams, PostParams};

use super::error::KubeError;
use super::provider::KubeProvider;
use crate::hosts::KubernetesCluster;

/// What a run asks of one cluster: the GPUs of each pod of its largest deployment there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterAsk {
    /// GPUs per pod, of the deployment that asks for the most.
    pub pod_gpus: Vec<u64>,
}

/// What a run does in the namespace: (verb, resource, subresource).
pub(super) const NEEDED: &[(&str, &str, &str)] = &[
    ("create", "pods", ""),
    ("get", "pods", ""),
    ("list", "pods", ""),
    ("delete", "pods", ""),
    ("get", "pods", "log"),
    ("create", "secrets", ""),
    ("delete", "secrets", ""),
    ("list", "events", ""),
];

impl KubeProvider {
    /// The problems that would stop a run on this cluster, each on its own line
    /// (`  hosts.yaml:7:18: `clusters.k8s.kubernetes.namespace`: ...`); empty: go ahead.
    /// Failing to ask at all (the API server down) is an error.
    pub async fn preflight(&self, ask: &ClusterAsk) -> Result<Vec<String>, KubeError> {
        let cluster = self.cluster();
        let mut problems = Vec::new();
        let api = |action: &str| KubeError::api(action.to_string(), &cluster.name);
        let namespaces: Api<Namespace> = Api::all(self.client());
        match namespaces.get_opt(&cluster.namespace).await {
            Ok(Some(_)) => {}
            Ok(None) => problems.push(problem(
                cluster,
                "namespace",
                format!(
                    "namespace `{}` does not exist; create it (`kubectl create namespace {}`) or name another",
                    cluster.namespace, cluster.namespace
                ),
            )),
            Err(e) if is_forbidden(&e) => tracing::info!(
                "pre-flight: may not read namespace `{}` of Kubernetes cluster `{}`; not checked",
                cluster.namespace,
                cluster.name
            ),
            Err(e) => return Err(api("read the namespace")(e)),
        }
        let denied = self.denied().await.map_err(api("review access"))?;
        if !denied.is_empty() {
            problems.push(problem(
                cluster,
                "namespace",
                format!(
                    "the kubeconfig's identity may not {} in namespace `{}`; grant them with a Role and RoleBinding, or use another context",
                    denied.join(", "),
                    cluster.namespace
                ),
            ));
        }
        if ask.pod_gpus.iter().any(|g| *g > 0) {
            problems.extend(self.gpus(ask).await.map_err(api("list nodes"))?);
        }
        Ok(problems)
    }

    /// The verbs of [`NEEDED`] the identity may not use, as `create pods`, `get pods/log`.
    async fn denied(&self) -> Result<Vec<String>, kube::Error> {
        let reviews: Api<SelfSubjectAccessReview> = Api::all(self.client());
        let mut denied = Vec::new();
        for (verb, resource, sub) in NEEDED {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(self.cluster().namespace.clone()),
                        verb: Some((*verb).to_string()),
                        resource: Some((*resource).to_string()),
                        subresource: Some((*sub).to_string()).filter(|s| !s.is_empty()),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let answer = reviews.create(&PostParams::default(), &review).await?;
            if !answer.status.is_some_and(|s| s.allowed) {
                let what = if sub.is_empty() {
                    (*resource).to_string()
                } else {
                    format!("{resource}/{sub}")
                };
                denied.push(format!("{verb} {what}"));
            }
        }
        Ok(denied)
    }

    /// Problems with the GPUs of the nodes matching the selector; none when nodes may not be
    /// listed (logged).
    async fn gpus(&self, ask: &ClusterAsk) -> Result<Vec<String>, kube::Error> {
        let cluster = self.cluster();
        let nodes: Api<Node> = Api::all(self.client());
        let selector: Vec<String> = cluster
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let list = match nodes
            .list(&ListParams::default().labels(&selector.join(",")))
            .await
        {
            Ok(list) => list,
            Err(e) if is_forbidden(&e) => {
                tracing::info!(
                    "pre-flight: may not list the nodes of Kubernetes cluster `{}`; GPUs not checked",
                    cluster.name
                );
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let per_node: Vec<u64> = list
            .items
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .is_none_or(|s| s.unschedulable != Some(true))
            })
            .map(|n| allocatable(n, &cluster.gpu_resource))
            .collect();
        Ok(gpu_problems(cluster, &per_node, ask))
    }
}

/// A node's allocatable count of `resource` (0 when it has none).
fn allocatable(node: &Node, resource: &str) -> u64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

/// The problems of asking `ask` of nodes with `per_node` allocatable GPUs: the largest pod
/// must fit on one node, and all pods together on the nodes.
pub fn gpu_problems(
    cluster: &KubernetesCluster,
    per_node: &[u64],
    ask: &ClusterAsk,
) -> Vec<String> {
    let largest = ask.pod_gpus.iter().copied().max().unwrap_or(0);
    let total: u64 = ask.pod_gpus.iter().sum();
    let best = per_node.iter().copied().max().unwrap_or(0);
    let all: u64 = per_node.iter().sum();
    let (nodes, field) = if cluster.node_selector.is_empty() {
        (
            format!("{} schedulable node(s)", per_node.len()),
            "gpu_resource",
        )
    } else {
        (
            format!(
                "{} schedulable node(s) matching {:?}",
                per_node.len(),
                cluster.node_selector
            ),
            "node_selector",
        )
    };
    let mut out = Vec::new();
    if largest > best {
        out.push(problem(
            cluster,
            field,
            format!(
                "a pod asks for {largest} `{}` but the most any of the {nodes} has allocatable is {best}; check `gpu_resource` and `node_selector`, or ask for fewer GPUs per instance",
                cluster.gpu_resource
            ),
        ));
    } else if total > all {
        out.push(problem(
            cluster,
            field,
            format!(
                "the deployment's pods ask for {total} `{}` together but the {nodes} have {all} allocatable; lower `replicas`, or widen `node_selector`",
                cluster.gpu_resource
            ),
        ));
    }
    out
}

/// `  <file:line:col>: `<key>`: <message>` at `field`'s place (else the namespace's, else the
/// cluster's name).
fn problem(cluster: &KubernetesCluster, field: &str, message: String) -> String {
    let at = cluster
        .at(field)
        .or_else(|| cluster.at("namespace"))
        .map_or_else(
            || format!("hosts file, cluster `{}`", cluster.name),
            str::to_string,
        );
    format!("  {at}: `{}`: {message}", cluster.key(field))
}

/// The API server answered 403.
fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 403)
}

#[cfg(test)]
#[path = "preflight_tests.rs"]
mod tests;
