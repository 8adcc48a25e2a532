//! `orchestrate ps` and `clean` on the Kubernetes clusters of the hosts file: our pods, found
//! by label (`orchestrate/run`), as rows like containers', and their deletion (pod and Secret)
//! when the orchestrate that created them is gone. A cluster that cannot be reached is a
//! warning, not an error: the other places are still listed.

use crate::provider::docker::{LabelFilter, Leftover};
use crate::provider::kubernetes::{KubeLeftover, KubeProvider};
use crate::shutdown::Shutdown;

/// Our pods on every Kubernetes cluster of the hosts file matching `filter`, with the
/// provider that reaches each.
pub(super) async fn pods(
    filter: &LabelFilter,
    remote: &super::remote::Remote,
) -> Vec<(std::sync::Arc<KubeProvider>, KubeLeftover)> {
    let Some(file) = &remote.hosts else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for cluster in file.kubernetes_clusters() {
        let provider = match KubeProvider::connect(cluster, Shutdown::new()).await {
            Ok(p) => std::sync::Arc::new(p),
            Err(e) => {
                tracing::warn!("cannot reach Kubernetes cluster {}: {e}", cluster.name);
                continue;
            }
        };
        match provider.list(filter.run.as_deref()).await {
            Ok(pods) => out.extend(
                pods.into_iter()
                    .filter(|p| filter.task.as_ref().is_none_or(|t| *t == p.task))
                    .map(|p| (provider.clone(), p)),
            ),
            Err(e) => tracing::warn!(
                "cannot list pods on Kubernetes cluster {}: {e}",
                cluster.name
            ),
        }
    }
    out
}

/// A pod as a `ps` row: CONTAINER is `pod NAMESPACE/NAME`, STATUS says the cluster.
pub(super) fn row(pod: &KubeLeftover) -> Leftover {
    Leftover {
        id: pod.name.clone(),
        name: format!("pod {}/{}", pod.namespace, pod.name),
        run: pod.run.clone(),
        task: pod.task.clone(),
        role: pod.role.clone(),
        index: pod.replica.clone(),
        image: pod.image.clone(),
        state: pod.phase.to_lowercase(),
        status: format!("kubernetes {}", pod.cluster),
        owner_pid: pod.owner_pid.clone(),
    }
}

/// Delete our pods matching `filter` whose orchestrate is gone (`alive` says whether a pid
/// runs; a live orchestrate deletes its own); each printed as
/// `pod NAMESPACE/NAME (run/task/role-replica)`.
pub(super) async fn clean(
    filter: &LabelFilter,
    remote: &super::remote::Remote,
    alive: fn(libc::pid_t) -> bool,
) {
    let mut deleted = 0;
    for (provider, pod) in pods(filter, remote).await {
        let live = pod
            .owner_pid
            .parse::<libc::pid_t>()
            .is_ok_and(|pid| pid > 0 && alive(pid));
        if live {
            tracing::info!(
                "skipping pod {}: its orchestrate (pid {}) is still running",
                pod.name,
                pod.owner_pid
            );
            continue;
        }
        match provider.delete(&pod.name).await {
            Ok(()) => {
                println!(
                    "pod {}/{} ({}/{}/{}-{})",
                    pod.namespace, pod.name, pod.run, pod.task, pod.role, pod.replica
                );
                deleted += 1;
            }
            Err(e) => tracing::warn!("cannot delete pod {}: {e}", pod.name),
        }
    }
    tracing::info!("deleted {deleted} pod(s)");
}
