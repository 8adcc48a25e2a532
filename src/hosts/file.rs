//! The hosts file as written: types that mirror the YAML. Resolution (defaults, SSH config,
//! references between hosts) is in `resolve`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

/// The whole hosts file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsFileSpec {
    /// The known_hosts file host keys are checked against (default `~/.ssh/known_hosts`).
    #[serde(default)]
    pub known_hosts: Option<Spanned<FilePath>>,
    /// Hosts by name.
    pub hosts: BTreeMap<String, HostSpec>,
    /// Clusters: a name and the names of its hosts, a Slurm cluster (`{slurm: {...}}`) or a
    /// Kubernetes cluster (`{kubernetes: {...}}`).
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterSpec>,
}

/// A cluster as written: a list of host names, or a map with `slurm:` or `kubernetes:`.
#[derive(Debug)]
pub enum ClusterSpec {
    Hosts(Vec<Spanned<String>>),
    /// Boxed: far larger than a list.
    Slurm(Box<SlurmSpec>),
    /// Boxed: far larger than a list.
    Kubernetes(Box<KubernetesSpec>),
}

/// `{slurm: {...}}` or `{kubernetes: {...}}`: the one key of a cluster's map.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterWrapper {
    #[serde(default)]
    slurm: Option<SlurmSpec>,
    #[serde(default)]
    kubernetes: Option<KubernetesSpec>,
}

impl<'de> Deserialize<'de> for ClusterSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ClusterSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a list of host names, a map `{slurm: {partition: ..., ...}}` or a map `{kubernetes: {...}}`",
                )
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ClusterSpec, A::Error> {
                let mut out = Vec::new();
                while let Some(name) = seq.next_element::<Spanned<String>>()? {
                    out.push(name);
                }
                Ok(ClusterSpec::Hosts(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ClusterSpec, A::Error> {
                let wrapper =
                    ClusterWrapper::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                match (wrapper.slurm, wrapper.kubernetes) {
                    (Some(slurm), None) => Ok(ClusterSpec::Slurm(Box::new(slurm))),
                    (None, Some(kubernetes)) => Ok(ClusterSpec::Kubernetes(Box::new(kubernetes))),
                    (Some(_), Some(_)) => Err(serde::de::Error::custom(
                        "a cluster is either `slurm:` or `kubernetes:`, not both",
                    )),
                    (None, None) => Err(serde::de::Error::custom(
                        "a cluster map needs `slurm:` or `kubernetes:` (or write a list of host names)",
                    )),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// A Slurm cluster as written (`clusters: {gpu: {slurm: {...}}}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSpec {
    /// The partition jobs are submitted to (`salloc -p`).
    pub partition: Spanned<String>,
    /// `salloc -A`.
    #[serde(default)]
    pub account: Option<String>,
    /// `salloc -q`.
    #[serde(default)]
    pub qos: Option<String>,
    /// `salloc -t`, in Slurm's forms (`30`, `1:00:00`, `1-00:00:00`).
    pub time_limit: Spanned<String>,
    /// GPUs each node gives an instance (`--gpus-per-node`; 0: none asked).
    pub gpus_per_node: Spanned<u32>,
    /// A gres request instead of `--gpus-per-node` (e.g. `gpu:h100:8`).
    #[serde(default)]
    pub gres: Option<Spanned<String>>,
    /// `pyxis` (containers through `srun --container-image`) or `none` (default).
    #[serde(default)]
    pub container: Option<Spanned<String>>,
    /// A host of this file to run the Slurm commands on (default: this machine).
    #[serde(default)]
    pub login: Option<Spanned<String>>,
    /// What one GPU of this cluster costs per hour, in dollars (the cost figures of a point).
    #[serde(default)]
    pub price_per_gpu_hour: Option<Spanned<f64>>,
}

/// A file path as written: a YAML string. A number or a boolean (`known_hosts: 42`) is
/// kept as written but marked, to be refused where it is used (with its place) rather than
/// taken as a file name: it is far likelier a value put under the wrong key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePath {
    pub text: String,
    /// `a number`, `a boolean`: what YAML read instead of a string.
    pub not_text: Option<&'static str>,
}

impl<'de> Deserialize<'de> for FilePath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl Visitor {
            fn other<E>(v: impl ToString, what: &'static str) -> Result<FilePath, E> {
                Ok(FilePath {
                    text: v.to_string(),
                    not_text: Some(what),
                })
            }
        }
        impl serde::de::Visitor<'_> for Visitor {
            type Value = FilePath;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a file path")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FilePath, E> {
                Ok(FilePath {
                    text: v.to_string(),
                    not_text: None,
                })
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<FilePath, E> {
                Self::other(v, "a number")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<FilePath, E> {
                Self::other(v, "a number")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<FilePath, E> {
                Self::other(v, "a number")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<FilePath, E> {
                Self::other(v, "a boolean")
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// One host as written; every field but the name is optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Address or `~/.ssh/config` alias to connect to (default: the host's name).
    #[serde(default)]
    pub address: Option<Spanned<String>>,
    /// SSH port (default: from `~/.ssh/config`, else 22). Read wide so that an out-of-range
    /// port is told as one (1 to 65535), not as a type error.
    #[serde(default)]
    pub port: Option<Spanned<u64>>,
    /// Login user (default: from `~/.ssh/config`, else the current user).
    #[serde(default)]
    pub user: Option<Spanned<String>>,
    /// Private key file (default: `IdentityFile` from `~/.ssh/config`, then ssh-agent, then
    /// `~/.ssh/id_ed25519`, `~/.ssh/id_ecdsa`, `~/.ssh/id_rsa`).
    #[serde(default)]
    pub identity_file: Option<Spanned<FilePath>>,
    /// The host to hop through: the name of another host in this file.
    #[serde(default)]
    pub jump: Option<Spanned<String>>,
    /// The GPUs the host has, `COUNT:MODEL` (e.g. `8:H200`, `8:MI300X`).
    #[serde(default)]
    pub gpus: Option<Spanned<String>>,
    /// Free-form labels (rack, owner, ...), copied into the manifest.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// What one GPU of this host costs per hour, in dollars (the cost figures of a point).
    #[serde(default)]
    pub price_per_gpu_hour: Option<Spanned<f64>>,
}

/// A Kubernetes cluster as written (`clusters: {k8s: {kubernetes: {...}}}`); every key is
/// optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSpec {
    /// The kubeconfig file (default: `KUBECONFIG`, else `~/.kube/config`, else in-cluster).
    #[serde(default)]
    pub kubeconfig: Option<Spanned<FilePath>>,
    /// The kubeconfig context (default: its `current-context`).
    #[serde(default)]
    pub context: Option<Spanned<String>>,
    /// The namespace pods and secrets are created in (default `default`).
    #[serde(default)]
    pub namespace: Option<Spanned<String>>,
    /// `nodeSelector` of every pod.
    #[serde(default)]
    pub node_selector: BTreeMap<String, Spanned<String>>,
    /// `tolerations` of every pod.
    #[serde(default)]
    pub tolerations: Vec<Spanned<TolerationSpec>>,
    /// The extended resource a role's GPUs are asked as (default `nvidia.com/gpu`).
    #[serde(default)]
    pub gpu_resource: Option<Spanned<String>>,
    /// Extra resources every pod asks for (limits = requests), e.g. `rdma/hca: 1`.
    #[serde(default)]
    pub resources: BTreeMap<String, Spanned<Quantity>>,
    /// `serviceAccountName` of every pod.
    #[serde(default)]
    pub service_account: Option<Spanned<String>>,
    /// `imagePullSecrets` of every pod (names of Secrets in the namespace).
    #[serde(default)]
    pub image_pull_secrets: Vec<Spanned<String>>,
    /// `hostNetwork: true` (RDMA, or a client outside the pod network reaching the node).
    #[serde(default)]
    pub host_network: Option<Spanned<bool>>,
    /// `imagePullPolicy` of every pod: `Always`, `IfNotPresent` (default) or `Never`.
    #[serde(default)]
    pub image_pull_policy: Option<Spanned<String>>,
    /// What one GPU of this cluster costs per hour, in dollars (the cost figures of a point).
    #[serde(default)]
    pub price_per_gpu_hour: Option<Spanned<f64>>,
}

/// One toleration as written (the fields of core/v1 `Toleration`, in snake case).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TolerationSpec {
    #[serde(default)]
    pub key: Option<String>,
    /// `Exists` or `Equal` (default).
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`, or none (all effects).
    #[serde(default)]
    pub effect: Option<String>,
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

/// A resource quantity as written: `1`, `500m`, `16Gi` (YAML may read it as a number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a resource quantity (`1`, `500m`, `16Gi`)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
        }
        d.deserialize_any(Visitor)
    }
}
