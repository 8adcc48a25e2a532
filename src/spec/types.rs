//! Types that mirror the task file one to one. Every struct denies unknown keys and every
//! field has a doc comment: docs/task-file.md is checked against them. Values that may hold
//! templates stay as written (`Scalar`, `String`); the plan resolves them.
//!
//! Owns: the YAML shape. Does not own: loading/errors (load), resolution (plan).

use std::collections::BTreeMap;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::dstack::{ProbeSpec, StartupOrder, StopCriteria};
use super::resources::{CpuValue, DiskValue, SizeRange};
use super::values::{
    DurationValue, EnvList, FractionValue, GoodputValue, GpuValue, NonZeroDurationValue, PortValue,
    PositiveValue, Scalar, SizeValue,
};
use crate::load::{Backend, Endpoint, RampStrategy};

/// A task file (v1). Every key of dstack's task and service reference is accepted too: the
/// ones orchestrate honors are ordinary fields, the others are grouped at the end and
/// explained in `spec::dstack` (which also turns the dstack-only forms into these fields).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// dstack's configuration type: `task` or `service`.
    #[serde(rename = "type", default)]
    pub kind: Option<Spanned<String>>,
    /// Task name: the directory under results/. Letters, digits, `-`, `_`, `.`. Default: the
    /// file name without `.dstack.yml`/`.yaml` (load fills it in).
    #[serde(default = "unnamed")]
    pub name: Spanned<String>,
    /// Free text shown in plans and reports.
    #[serde(default)]
    pub description: Option<String>,
    /// Request/metrics dialect of the server: vllm, sglang, trtllm, dynamo or openai (default).
    #[serde(default)]
    pub backend: Option<Backend>,
    /// Container image; present = run in Docker, absent = run as local processes.
    #[serde(default)]
    pub image: Option<Spanned<String>>,
    /// Model id sent in requests (may also be given as `benchmark.model`); dstack's
    /// `{name, format}` map gives its `name`.
    #[serde(default, deserialize_with = "super::dstack::model_name")]
    pub model: Option<Spanned<String>>,
    /// Environment of the server: a map `NAME: value` or dstack's list `- NAME=value`.
    #[serde(default)]
    pub env: EnvList,
    /// Shell commands run in order in one shell; templates allowed.
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
    /// Port the server listens on, or `auto`. Default: 30000 for sglang, 8000 otherwise.
    #[serde(default)]
    pub port: Option<Spanned<PortValue>>,
    /// How to decide the server is ready.
    #[serde(default)]
    pub readiness: Option<ReadinessSpec>,
    /// Hardware the server needs.
    #[serde(default)]
    pub resources: Option<ResourcesSpec>,
    /// Host names from the hosts file; one instance per host. Default: this machine.
    #[serde(default)]
    pub hosts: Vec<Spanned<String>>,
    /// Volume mounts `host_path:container_path[:ro]` or dstack's
    /// `{instance_path, path}` (Docker only).
    #[serde(default, deserialize_with = "super::dstack::volumes")]
    pub volumes: Vec<Spanned<String>>,
    /// How containers are wired to their host (Docker only): network, IPC, pinned GPUs.
    #[serde(default)]
    pub container: Option<ContainerSpec>,
    /// Where the load generator runs and how it reaches servers on remote hosts.
    #[serde(default)]
    pub client: Option<ClientSpec>,
    /// Multi-role deployments (prefill/decode/router): role name -> role, in file order.
    /// With roles, `commands`, `hosts`, `port` and `readiness` go in each role.
    #[serde(default)]
    pub roles: Option<RolesSpec>,
    /// The role that receives the benchmark traffic (default: the last one to start).
    #[serde(default)]
    pub entry_role: Option<Spanned<String>>,
    /// Free label recorded in the run index (e.g. `nightly`).
    #[serde(default)]
    pub tag: Option<String>,
    /// Stop the sweep at the first failed point instead of recording it and going on.
    #[serde(default)]
    pub stop_on_failure: bool,
    /// How to load the server: dataset, load shape, sweep matrix. A dstack file has none:
    /// then `--profile FILE` gives it.
    #[serde(default)]
    pub benchmark: BenchmarkSpec,

    // Multi-node gangs and named deployments (docs/task-file.md, "Multi-node" and
    // "Named deployments").
    /// dstack's `nodes`: processes per replica of a plain task, one per host (a gang: one
    /// model instance spread over several hosts). Default 1.
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// dstack's `replicas`: instances of a plain task, each a gang of `nodes` processes.
    /// Default: as many as the hosts allow (one per `nodes` hosts), else 1.
    #[serde(default)]
    pub replicas: Option<Spanned<u32>>,
    /// Named deployments compared in one run, sharing `benchmark`: name -> deployment keys.
    /// Each is run unless the matrix axis `deployment` restricts them.
    #[serde(default)]
    pub deployments: Option<DeploymentsSpec>,

    // dstack keys honored here (spec::dstack turns them into the fields above).
    /// dstack's ports: the first is the server port when `port` is unset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Spanned<PortValue>>,
    /// dstack's working directory: the commands start with `cd` into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<Spanned<String>>,
    /// A dstack service's probes: the first becomes `readiness`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbeSpec>,
    /// dstack's order of master and worker nodes: `any`, `master-first`, `workers-first`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_order: Option<Spanned<StartupOrder>>,
    /// dstack's end of a multi-node run: `all-done` or `master-done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_criteria: Option<Spanned<StopCriteria>>,

    // dstack keys accepted only in a form that does not change what runs.
    /// dstack's shell; only `sh` (commands run with `sh -c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<Spanned<serde_json::Value>>,
    /// dstack's privileged mode; only `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<Spanned<serde_json::Value>>,
    /// dstack's container user; not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Spanned<serde_json::Value>>,
    /// dstack's entrypoint; not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Spanned<serde_json::Value>>,
    /// dstack's Docker-in-Docker; only `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<Spanned<serde_json::Value>>,
    /// dstack's node or replica groups; written as `roles` here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Spanned<serde_json::Value>>,

    // dstack keys accepted and ignored: orchestrate runs on the user's own hosts
    // (`spec::dstack::KEYS` says why for each; `plan` prints one line per key written).
    /// dstack's Python version of its base image (without `image:` an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<Spanned<serde_json::Value>>,
    /// dstack's base image with NVCC (without `image:` an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvcc: Option<Spanned<serde_json::Value>>,
    /// dstack's Git repos to clone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repos: Option<Spanned<serde_json::Value>>,
    /// dstack's files to copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Spanned<serde_json::Value>>,
    /// dstack's registry credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_auth: Option<Spanned<serde_json::Value>>,
    /// dstack's repo clone depth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_branch: Option<Spanned<serde_json::Value>>,
    /// dstack's deprecated setup commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<Spanned<serde_json::Value>>,
    /// dstack's deprecated home directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_dir: Option<Spanned<serde_json::Value>>,
    /// dstack's access to its own server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dstack: Option<Spanned<serde_json::Value>>,
    /// dstack's run priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Spanned<serde_json::Value>>,
    /// dstack's cloud backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<Spanned<serde_json::Value>>,
    /// dstack's cloud regions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<Spanned<serde_json::Value>>,
    /// dstack's cloud availability zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zones: Option<Spanned<serde_json::Value>>,
    /// dstack's cloud instance types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_types: Option<Spanned<serde_json::Value>>,
    /// dstack's cloud reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<Spanned<serde_json::Value>>,
    /// dstack's spot or on-demand choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_policy: Option<Spanned<serde_json::Value>>,
    /// dstack's highest hourly price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<Spanned<serde_json::Value>>,
    /// dstack's per-backend options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_options: Option<Spanned<serde_json::Value>>,
    /// dstack's reuse-or-create policy for fleet instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_policy: Option<Spanned<serde_json::Value>>,
    /// dstack's fleets to reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleets: Option<Spanned<serde_json::Value>>,
    /// dstack's fleet instances to reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Spanned<serde_json::Value>>,
    /// dstack's idle time before an instance is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_duration: Option<Spanned<serde_json::Value>>,
    /// dstack's resubmission policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Spanned<serde_json::Value>>,
    /// dstack's stop on low GPU utilization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_policy: Option<Spanned<serde_json::Value>>,
    /// dstack's longest run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<Spanned<serde_json::Value>>,
    /// dstack's longest graceful stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_duration: Option<Spanned<serde_json::Value>>,
    /// dstack's cron start times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Spanned<serde_json::Value>>,
    /// dstack's cloud resource tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Spanned<serde_json::Value>>,
    /// dstack's service gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Spanned<serde_json::Value>>,
    /// dstack's proxy path prefix stripping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_prefix: Option<Spanned<serde_json::Value>>,
    /// dstack's gateway HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https: Option<Spanned<serde_json::Value>>,
    /// dstack's service authorization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Spanned<serde_json::Value>>,
    /// dstack's gateway rate limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limits: Option<Spanned<serde_json::Value>>,
    /// dstack's replica auto-scaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<Spanned<serde_json::Value>>,
}

/// `name` when the file has none: empty and unlocated (load names it after the file).
fn unnamed() -> Spanned<String> {
    Spanned {
        value: String::new(),
        referenced: serde_saphyr::Location::UNKNOWN,
        defined: serde_saphyr::Location::UNKNOWN,
    }
}

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
    /// dstack's order of a gang's processes: `any` (default: all at once), `master-first`
    /// (node 0 of each replica first, the other ranks once it is up) or `workers-first`.
    #[serde(default)]
    pub startup_order: Option<Spanned<StartupOrder>>,
    /// Hardware of this role instead of the task's (`{gpu: 0}`: no GPUs, e.g. a router).
    #[serde(default)]
    pub resources: Option<ResourcesSpec>,
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

/// `readiness:` of a task.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReadinessSpec {
    /// HTTP path probed with GET (default `/health`).
    #[serde(default)]
    pub http: Option<Spanned<String>>,
    /// Only wait for the port to accept TCP connections instead of probing HTTP (then `http`
    /// and `status` must not be set).
    #[serde(default)]
    pub tcp: bool,
    /// Status the HTTP probe expects (default 200).
    #[serde(default)]
    pub status: Option<Spanned<u16>>,
    /// Time between probes, HTTP or TCP (default 1s).
    #[serde(default)]
    pub interval: Option<Spanned<NonZeroDurationValue>>,
    /// Give up after this long (default 30m).
    #[serde(default)]
    pub timeout: Option<Spanned<DurationValue>>,
    /// Also send one tiny completion before declaring the server ready.
    #[serde(default)]
    pub generate: bool,
    /// Topology readiness of a router role: the prefill/decode worker counts it must report
    /// once every role is ready (default for the entry role of a prefill/decode deployment).
    #[serde(default)]
    pub workers: Option<WorkersSpec>,
    /// A Ray gang (vLLM's `--distributed-executor-backend ray`): once the gang is started,
    /// its Ray cluster must have this many alive nodes before the leader is probed.
    #[serde(default)]
    pub ray: Option<RaySpec>,
}

/// `readiness.ray:` — count the alive nodes of each replica's Ray cluster with `ray status`
/// on its head (node 0) before the leader's probe.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaySpec {
    /// The head's GCS port, as in `ray start --head --port` (default 6379).
    #[serde(default)]
    pub port: Option<Spanned<u16>>,
    /// Alive Ray nodes expected per replica (default: the role's `nodes`).
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// The `ray` program on the head's host or in its container (default `ray`, found on
    /// its `PATH`); orchestrate runs `<command> status --address <head address>:<port>`.
    #[serde(default)]
    pub command: Option<Spanned<String>>,
}

/// `readiness.workers:` — what a router must report before the deployment is ready.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkersSpec {
    /// Check the worker counts at all (default true; `false` turns the check off).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Prefill workers expected (default: the instances of roles named `prefill*`).
    #[serde(default)]
    pub prefill: Option<Spanned<u32>>,
    /// Decode workers expected (default: the instances of roles named `decode*`).
    #[serde(default)]
    pub decode: Option<Spanned<u32>>,
    /// How the router reports them: `router` (`GET /workers` stats, SGLang Model Gateway and
    /// vllm-router) or `dynamo` (`GET /health` instances); default `dynamo` for backend
    /// dynamo, else `router`.
    #[serde(default)]
    pub via: Option<WorkersVia>,
    /// Then send one completion through the entry role (default true).
    #[serde(default)]
    pub generate: Option<bool>,
}

/// How a router reports its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkersVia {
    /// `GET /workers` -> `stats.prefill_count` / `decode_count` (SGLang Model Gateway,
    /// vllm-router).
    Router,
    /// `GET /health` -> `instances[]` with `endpoint: generate`, by `component` (Dynamo
    /// frontend).
    Dynamo,
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

/// `benchmark:` of a task, or the whole of a profile file. Every field is optional here;
/// the plan checks what is required once the profile is merged.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkSpec {
    /// Path (relative to this file) of a profile whose keys are defaults for this section.
    #[serde(default)]
    pub profile: Option<Spanned<String>>,
    /// Model id sent in requests, when the task has no top-level `model`.
    #[serde(default)]
    pub model: Option<Spanned<String>>,
    /// API used: `completions` (default) or `chat`.
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    /// Prompts and lengths.
    #[serde(default)]
    pub dataset: Option<Spanned<DatasetSpecYaml>>,
    /// Path to a tokenizer.json, or a model id in the local HF cache (default: the model).
    #[serde(default)]
    pub tokenizer: Option<Spanned<String>>,
    /// Ask the server to ignore end-of-sequence so every answer has the requested length.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Requests per point (exactly one of `num_prompts` and `duration`). Template allowed.
    #[serde(default)]
    pub num_prompts: Option<Spanned<Scalar>>,
    /// Issue requests for this long per point (`10m`). Template allowed.
    #[serde(default)]
    pub duration: Option<Spanned<Scalar>>,
    /// Excluded from statistics at the start of a point (default 0s).
    #[serde(default)]
    pub warmup: Option<Spanned<Scalar>>,
    /// Excluded from statistics at the end of a point (default 0s).
    #[serde(default)]
    pub cooldown: Option<Spanned<Scalar>>,
    /// At most this many requests in flight (default: no cap). Template allowed.
    #[serde(default)]
    pub concurrency: Option<Spanned<Scalar>>,
    /// Requests per second (Poisson arrivals), or `inf` (default) to send at once.
    #[serde(default)]
    pub request_rate: Option<Spanned<Scalar>>,
    /// Gamma shape of arrival gaps; 1 (default) is Poisson, lower is burstier.
    #[serde(default)]
    pub burstiness: Option<Spanned<Scalar>>,
    /// Ramp the request rate from `start_rps` to `end_rps` over the point.
    #[serde(default)]
    pub ramp_up: Option<RampUpSpec>,
    /// Seed of the dataset sampler and arrival process (default 0).
    #[serde(default)]
    pub seed: Option<Spanned<Scalar>>,
    /// JSON merged into every request body.
    #[serde(default)]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// Give up on one request after this long (default: never).
    #[serde(default)]
    pub request_timeout: Option<Spanned<NonZeroDurationValue>>,
    /// SLOs for goodput, as `vllm bench serve --goodput` takes them: `"ttft:200 tpot:50"`
    /// (milliseconds) or `{ttft: 200ms, tpot: 50ms, e2el: 2s}`.
    #[serde(default)]
    pub goodput: Option<Spanned<GoodputValue>>,
    /// A request the server sends no byte for this long fails as `stalled` (default 5m;
    /// `off` for never). Template allowed.
    #[serde(default)]
    pub stall_timeout: Option<Spanned<Scalar>>,
    /// How many times each point is measured (default 1).
    #[serde(default)]
    pub repetitions: Option<Spanned<u32>>,
    /// The sweep: axes, `include`, `exclude`.
    #[serde(default)]
    pub matrix: Option<MatrixSpec>,
    /// Regression thresholds used by `orchestrate check`.
    #[serde(default)]
    pub check: Option<CheckSpec>,
    /// When a point's measurement is trusted.
    #[serde(default)]
    pub validity: Option<ValiditySpec>,
    /// Run another benchmark tool per point instead of the embedded client.
    #[serde(default)]
    pub external: Option<ExternalSpec>,
}

/// `benchmark.external`: a benchmark tool run in the entry instance's container or on its
/// host once per point, its output parsed into our metrics (docs/external.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalSpec {
    /// Shell command (`sh -c`); templates allowed (matrix values, `port`, `model`, ...).
    pub command: Spanned<String>,
    /// `container` (default when the role has an image) or `host`.
    #[serde(default, rename = "where")]
    pub place: Option<Spanned<String>>,
    /// Role whose first instance runs the command (default: the entry role).
    #[serde(default)]
    pub role: Option<Spanned<String>>,
    /// Output format of a known tool: vllm-throughput, trtllm-bench or vllm-bench-serve.
    #[serde(default)]
    pub preset: Option<Spanned<String>>,
    /// JSON file the command writes (in the container or on the host), read afterwards.
    #[serde(default)]
    pub result_file: Option<Spanned<String>>,
    /// Metric -> `{json: "a.b[0].c"}` or `{regex: "([0-9.]+) tok/s"}`; adds to or replaces
    /// the preset's rules.
    #[serde(default)]
    pub metrics: BTreeMap<String, Spanned<MetricSourceSpec>>,
    /// Kill the command after this long (default 2h).
    #[serde(default)]
    pub timeout: Option<Spanned<DurationValue>>,
}

/// Where one metric of an external command is read: exactly one of `json` and `regex`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricSourceSpec {
    /// Path into the result JSON, e.g. `results[0].throughput`.
    #[serde(default)]
    pub json: Option<String>,
    /// Regex over the output whose first capture group is the number.
    #[serde(default)]
    pub regex: Option<String>,
}

/// `benchmark.dataset`: `kind` picks the source; the other keys are that source's fields.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpecYaml {
    /// random, sharegpt, text, shared_prefix or jsonl.
    pub kind: DatasetKind,
    /// File of the dataset (sharegpt, text, jsonl), relative to the file that names it.
    #[serde(default)]
    pub path: Option<Spanned<String>>,
    /// Prompt length in tokens (random, text; optional for sharegpt).
    #[serde(default)]
    pub input_len: Option<Spanned<Scalar>>,
    /// Answer length in tokens (all kinds; optional for sharegpt and jsonl).
    #[serde(default)]
    pub output_len: Option<Spanned<Scalar>>,
    /// random: lengths vary uniformly within ±ratio (default 0: exact lengths).
    #[serde(default)]
    pub range_ratio: Option<Spanned<Scalar>>,
    /// random: a fixed random prefix of this many tokens shared by every prompt (default 0).
    #[serde(default)]
    pub prefix_len: Option<Spanned<Scalar>>,
    /// shared_prefix: number of distinct system prompts.
    #[serde(default)]
    pub num_groups: Option<Spanned<Scalar>>,
    /// shared_prefix: questions per system prompt.
    #[serde(default)]
    pub prompts_per_group: Option<Spanned<Scalar>>,
    /// shared_prefix: tokens of each system prompt (the shared prefix).
    #[serde(default)]
    pub system_prompt_len: Option<Spanned<Scalar>>,
    /// shared_prefix: tokens of each question.
    #[serde(default)]
    pub question_len: Option<Spanned<Scalar>>,
}

/// Which prompt source a dataset uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetKind {
    Random,
    Sharegpt,
    Text,
    SharedPrefix,
    Jsonl,
}

/// `benchmark.ramp_up`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RampUpSpec {
    /// `linear` or `exponential`.
    pub strategy: RampStrategy,
    /// Request rate at the start of the point (above 0).
    pub start_rps: PositiveValue,
    /// Request rate at the end of the point (above 0).
    pub end_rps: PositiveValue,
}

/// `benchmark.check`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Metric -> allowed change against the baseline, `"-5%"` (may drop 5%) or `"+10%"`.
    #[serde(default)]
    pub thresholds: BTreeMap<String, Spanned<String>>,
}

/// `benchmark.validity`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ValiditySpec {
    /// Highest fraction of failed requests for a valid point (default 0.0).
    #[serde(default)]
    pub max_error_rate: Option<FractionValue>,
    /// Largest relative deviation of output lengths from the requested ones (default 0.05).
    #[serde(default)]
    pub length_tolerance: Option<f64>,
}

/// One sweep axis: its name (with location) and its values.
#[derive(Debug, Clone)]
pub struct AxisSpec {
    pub name: Spanned<String>,
    pub values: Vec<serde_json::Value>,
}

/// `benchmark.matrix`: axes in file order, plus GitHub-Actions-like `include`/`exclude`.
#[derive(Debug, Clone, Default)]
pub struct MatrixSpec {
    pub axes: Vec<AxisSpec>,
    pub include: Vec<serde_json::Map<String, serde_json::Value>>,
    pub exclude: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Where each `include` entry is written (same order as `include`).
    pub(crate) include_locs: Vec<serde_saphyr::Location>,
    /// Where each `exclude` entry is written (same order as `exclude`).
    pub(crate) exclude_locs: Vec<serde_saphyr::Location>,
}

type Entries = Vec<Spanned<serde_json::Map<String, serde_json::Value>>>;

/// `include`/`exclude` entries and where each is written.
fn split_entries(
    entries: Entries,
) -> (
    Vec<serde_json::Map<String, serde_json::Value>>,
    Vec<serde_saphyr::Location>,
) {
    entries.into_iter().map(|e| (e.value, e.referenced)).unzip()
}

impl<'de> Deserialize<'de> for MatrixSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MatrixSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of axis name -> list of values, with optional include/exclude")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MatrixSpec, A::Error> {
                let mut out = MatrixSpec::default();
                while let Some(name) = map.next_key::<Spanned<String>>()? {
                    match name.value.as_str() {
                        "include" => {
                            (out.include, out.include_locs) =
                                split_entries(map.next_value::<Entries>()?);
                        }
                        "exclude" => {
                            (out.exclude, out.exclude_locs) =
                                split_entries(map.next_value::<Entries>()?);
                        }
                        _ => {
                            let values: Vec<serde_json::Value> = map.next_value()?;
                            if values.is_empty() {
                                return Err(de::Error::custom(format!(
                                    "axis `{}` has no values",
                                    name.value
                                )));
                            }
                            if let Some(bad) = values.iter().find(|v| v.is_object() || v.is_array())
                            {
                                return Err(de::Error::custom(format!(
                                    "axis `{}` has a value that is not a number, string or bool: {bad}",
                                    name.value
                                )));
                            }
                            out.axes.push(AxisSpec { name, values });
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for MatrixSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for a in &self.axes {
            m.serialize_entry(&a.name.value, &a.values)?;
        }
        if !self.include.is_empty() {
            m.serialize_entry("include", &self.include)?;
        }
        if !self.exclude.is_empty() {
            m.serialize_entry("exclude", &self.exclude)?;
        }
        m.end()
    }
}
