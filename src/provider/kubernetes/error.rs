//! Why a Kubernetes operation failed: the kubeconfig could not be loaded, the API server
//! refused or failed a request (its answer is the source), or a pod will never run (the
//! cluster's reason and the pod's events).

/// Kubernetes provider failures.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig (or in-cluster config) could not be loaded.
    #[error("cannot load the kubeconfig of Kubernetes cluster `{cluster}`{at}: {message}")]
    Config {
        cluster: String,
        /// ` (hosts.yaml:5:19)` when the hosts file names the kubeconfig or context.
        at: String,
        message: String,
    },
    /// A request to the API server failed.
    #[error("failed to {action} on Kubernetes cluster `{cluster}`")]
    Api {
        action: String,
        cluster: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The pod will never run.
    #[error("pod {pod} on Kubernetes cluster `{cluster}` failed: {reason}{events}")]
    PodFailed {
        pod: String,
        cluster: String,
        reason: String,
        /// `\n  events:\n    ...` (empty when there are none).
        events: String,
    },
    /// Something a pod cannot do in this version of the provider.
    #[error("{what} is not supported on Kubernetes yet")]
    Unsupported { what: String },
}

impl KubeError {
    /// A failed API request `action` on `cluster`.
    pub fn api(action: impl Into<String>, cluster: &str) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        let cluster = cluster.to_string();
        move |source| KubeError::Api {
            action,
            cluster,
            source: Box::new(source),
        }
    }
}

/// The API server answered 404 (the object is gone).
pub(super) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

/// The API server answered 409 (the object already exists).
pub(super) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}
