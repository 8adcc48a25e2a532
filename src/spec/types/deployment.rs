//! What runs: named deployments, the roles of a multi-role deployment, how containers and
//! the load generator are wired, and the hardware a deployment needs.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::dstack_values::StartupOrder;
use super::readiness::ReadinessSpec;
use crate::load::Backend;
use crate::spec::resources::{CpuValue, DiskValue, SizeRange};
use crate::spec::values::{EnvList, GpuValue, PortValue, SizeValue};

/// One named deployment of `deployments:`: keys that replace the task's for this deployment
/// (key by key; `env` entries add to the task's).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSpec {
    /// Request/metrics dialect of this deployment's server.
    #[serde(default)]
    pub backend: Option<Backend>,
    /// Container image of this deployment.
    #[serde(default)]
    pub image: Option<Spanned<String>>,
    /// Model id this deployment serves.
    #[serde(default)]
    pub model: Option<Spanned<String>>,
    /// Environment added to the task's `env`.
    #[serde(default)]
    pub env: EnvList,
    /// Shell commands of a plain deployment (no `roles`).
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
    /// Port of a plain deployment.
    #[serde(default)]
    pub port: Option<Spanned<PortValue>>,
    /// Readiness of a plain deployment.
    #[serde(default)]
    pub readiness: Option<ReadinessSpec>,
    /// Hardware of this deployment.
    #[serde(default)]
    pub resources: Option<ResourcesSpec>,
    /// Hosts of a plain deployment.
    #[serde(default)]
    pub hosts: Vec<Spanned<String>>,
    /// Volume mounts of this deployment.
    #[serde(default)]
    pub volumes: Vec<Spanned<String>>,
    /// Processes per replica of a plain deployment.
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// Processes per node of a plain deployment.
    #[serde(default)]
    pub procs: Option<Spanned<u32>>,
    /// Start order of a plain deployment's gang (dstack's `startup_order`).
    #[serde(default)]
    pub startup_order: Option<Spanned<StartupOrder>>,
    /// Replicas of a plain deployment.
    #[serde(default)]
    pub replicas: Option<Spanned<u32>>,
    /// Roles of this deployment.
    #[serde(default)]
    pub roles: Option<RolesSpec>,
    /// The role that receives the traffic in this deployment.
    #[serde(default)]
    pub entry_role: Option<Spanned<String>>,
}

/// `deployments:`: deployment names (with locations) and deployments, in file order.
#[derive(Debug, Clone, Default)]
pub struct DeploymentsSpec(pub Vec<(Spanned<String>, DeploymentSpec)>);

impl<'de> Deserialize<'de> for DeploymentsSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        named_map(d, "deployment").map(DeploymentsSpec)
    }
}

impl Serialize for DeploymentsSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_named(&self.0, s)
    }
}

/// `container:` — Docker wiring of the task's containers (ignored by local processes).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    /// `bridge` (default: the port is published on the host) or `host` (the host's network,
    /// as multi-node NCCL/RDMA setups need).
    #[serde(default)]
    pub network: Option<crate::deploy::Network>,
    /// `engine_default` (default), `host` (`--ipc host`, what vLLM and SGLang suggest),
    /// `private` or `shareable`.
    #[serde(default)]
    pub ipc: Option<crate::deploy::Ipc>,
    /// Pin these GPUs instead of taking `resources.gpu`'s count: NVIDIA indices or UUIDs,
    /// AMD indices.
    #[serde(default)]
    pub gpu_ids: Vec<String>,
    /// Run the containers privileged (`docker run --privileged`); dstack's `privileged`.
    #[serde(default)]
    pub privileged: Option<Spanned<bool>>,
    /// The user the commands run as (`docker run --user`): `name`, `uid`, `name:group` or
    /// `uid:gid`; dstack's `user`.
    #[serde(default)]
    pub user: Option<Spanned<String>>,
    /// Replaces the image's entrypoint, split as a shell would; the commands become its
    /// arguments (Docker's `--entrypoint`); dstack's `entrypoint`.
    #[serde(default)]
    pub entrypoint: Option<Spanned<String>>,
    /// The shell that runs the commands (`<shell> -c`): `sh` (default), `bash` or an absolute
    /// path; dstack's `shell`.
    #[serde(default)]
    pub shell: Option<Spanned<String>>,
}

/// `client:` — where the load generator runs and how it reaches servers on remote hosts.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// `local` (default: this machine) or a host name from the hosts file.
    #[serde(default)]
    pub host: Option<Spanned<String>>,
    /// How servers on remote hosts are reached: `auto` (default), `direct` or `tunnel`.
    #[serde(default)]
    pub reach: Option<crate::deploy::ReachMode>,
}

/// One role of a multi-role deployment.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    /// Shell commands of this role's instances; templates allowed.
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
    /// Number of instances (default: one per host in `hosts`, else 1).
    #[serde(default)]
    pub replicas: Option<Spanned<u32>>,
    /// Host names; instance i runs on host i modulo the count. Default: this machine.
    #[serde(default)]
    pub hosts: Vec<Spanned<String>>,
    /// Port of this role's instances (a number or `auto`); required.
    pub port: Spanned<PortValue>,
    /// How to decide an instance of this role is ready (same keys as the task's).
    #[serde(default)]
    pub readiness: Option<ReadinessSpec>,
    /// Environment added to the task's `env` for this role.
    #[serde(default)]
    pub env: EnvList,
    /// Roles that must be ready before this one starts.
    #[serde(default)]
    pub depends_on: Vec<Spanned<String>>,
    /// Image of this role, instead of the task's `image`.
    #[serde(default)]
    pub image: Option<Spanned<String>>,
    /// Processes per replica, one per host (a gang spread over `nodes` hosts; default 1).
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// Processes per node, each with its own GPUs, port and rank (data-parallel ranks run
    /// as separate servers; default 1).
    #[serde(default)]
    pub procs: Option<Spanned<u32>>,
    /// dstack's order of a gang's processes: `any` (default: all at once), `master-first`
    /// (node 0 of each replica first, the other ranks once it is up) or `workers-first`.
    #[serde(default)]
    pub startup_order: Option<Spanned<StartupOrder>>,
    /// Hardware of this role instead of the task's (`{gpu: 0}`: no GPUs, e.g. a router).
    #[serde(default)]
    pub resources: Option<ResourcesSpec>,
    /// Volumes of this role's containers, added to the task's `volumes`.
    #[serde(default, deserialize_with = "super::dstack_values::volumes")]
    pub volumes: Vec<Spanned<String>>,
}

/// `roles:`: role names (with locations) and roles, in file order.
#[derive(Debug, Clone, Default)]
pub struct RolesSpec(pub Vec<(Spanned<String>, RoleSpec)>);

impl<'de> Deserialize<'de> for RolesSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        named_map(d, "role").map(RolesSpec)
    }
}

impl Serialize for RolesSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_named(&self.0, s)
    }
}

/// A non-empty map of names (letters, digits, `-`, `_`) to values, in file order; `what`
/// names the values in errors (`role`, `deployment`).
fn named_map<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    what: &'static str,
) -> Result<Vec<(Spanned<String>, T)>, D::Error> {
    struct V<T>(&'static str, std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Vec<(Spanned<String>, T)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a map of {} name -> {}", self.0, self.0)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let what = self.0;
            let mut out: Vec<(Spanned<String>, T)> = Vec::new();
            while let Some(name) = map.next_key::<Spanned<String>>()? {
                let n = &name.value;
                let ok = !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if !ok {
                    return Err(de::Error::custom(format!(
                        "`{n}` is not a {what} name; use letters, digits, `-` and `_`"
                    )));
                }
                let value: T = map.next_value()?;
                out.push((name, value));
            }
            if out.is_empty() {
                return Err(de::Error::custom(format!(
                    "`{what}s` is empty; name at least one {what}"
                )));
            }
            Ok(out)
        }
    }
    d.deserialize_map(V(what, std::marker::PhantomData))
}

fn serialize_named<S: serde::Serializer, T: Serialize>(
    entries: &[(Spanned<String>, T)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(entries.len()))?;
    for (name, value) in entries {
        m.serialize_entry(&name.value, value)?;
    }
    m.end()
}

/// `resources:` of a task (dstack's keys).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesSpec {
    /// GPUs in any dstack form: `8`, `"8:H200"`, `"H200:8"`, `MI300X`, `24GB`, `1..8`,
    /// `"A100,H100:2"` or `{name: [H100, H200], count: 8, memory: 80GB..}`.
    #[serde(default)]
    pub gpu: Option<Spanned<GpuValue>>,
    /// Shared memory of the container: `32GB`, `16Gi`.
    #[serde(default)]
    pub shm_size: Option<Spanned<SizeValue>>,
    /// CPU cores the host must have: `8`, `2..`, `arm:8`.
    #[serde(default)]
    pub cpu: Option<Spanned<CpuValue>>,
    /// RAM the host must have: `64GB..`.
    #[serde(default)]
    pub memory: Option<Spanned<SizeRange>>,
    /// Free disk the host must have: `200GB`, `2000GB..`.
    #[serde(default)]
    pub disk: Option<Spanned<DiskValue>>,
}
