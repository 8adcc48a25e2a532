//! The Kubernetes provider: every instance is a pod on a cluster of the hosts file
//! (`clusters: {k8s: {kubernetes: {...}}}`), through the `kube` crate and k8s-openapi's
//! core/v1 types (no kube or k8s-openapi type leaves this module but in [`KubeError`]'s source).
//!
//! Owns: the pod and Secret of each instance (labels, env through the Secret, resources,
//! volumes, probe), watching it (unschedulable, image or start failures and exits become the
//! instance's end, with the pod's events in its log), log streaming into the
//! [`crate::provider::LogSink`], teardown by label on every path (stop, `Drop`, emergency
//! kill), finding leftovers by label (`ps`, `clean`), and the cluster's pre-flight
//! (`preflight`: namespace, access review, GPUs). Does not own: readiness (the runner's probe
//! reaches the pod's IP), a gang's addresses (the runner puts the leader pod's IP into the
//! ranks' commands). With `procs`, each process is a pod of its own, kept on its node's
//! node by a pod affinity on the replica and node labels.
//!
//! `client.reach: tunnel` reaches each pod through the API server's port-forwarding
//! (`forward`) instead of its IP.
//!
//! Inside, imports go one way: `error`, `pod` and `status` (pure), `forward` <- `instance` <-
//! `provider` <- `preflight`.

mod error;
mod forward;
mod instance;
pub mod pod;
mod preflight;
mod provider;
mod status;

pub use error::KubeError;
pub use instance::KubeInstance;
pub use preflight::{ClusterAsk, gpu_problems};
pub use provider::{KubeLeftover, KubeProvider, pod_yaml};
