//! The task file as a whole: what runs (the server, or its roles and named deployments),
//! how it is loaded (`benchmark:`), and every key of dstack's task and service reference.

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::benchmark::BenchmarkSpec;
use super::deployment::{ClientSpec, ContainerSpec, DeploymentsSpec, ResourcesSpec, RolesSpec};
use super::dstack_groups::{GroupSpec, ReplicasSpec, RouterSpec};
use super::dstack_values::{ProbeSpec, ScalingSpec, StartupOrder, StopCriteria};
use super::readiness::ReadinessSpec;
use super::telemetry::TelemetrySpec;
use crate::load::Backend;
use crate::spec::values::{EnvList, PortValue};

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
    #[serde(default, deserialize_with = "super::dstack_values::model_name")]
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
    #[serde(default, deserialize_with = "super::dstack_values::volumes")]
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
    /// GPU telemetry beside every point: on/off, the tool, its interval (docs/metrics.md).
    #[serde(default)]
    pub telemetry: Option<TelemetrySpec>,

    // Multi-node gangs and named deployments (docs/task-file.md, "Multi-node" and
    // "Named deployments").
    /// dstack's `nodes`: processes per replica of a plain task, one per host (a gang: one
    /// model instance spread over several hosts). Default 1.
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// Processes per node of a plain task, each with its own GPUs, port and rank (e.g.
    /// data-parallel ranks run as separate servers). Default 1.
    #[serde(default)]
    pub procs: Option<Spanned<u32>>,
    /// dstack's `replicas`: instances of a plain task, each a gang of `nodes` processes.
    /// Default: as many as the hosts allow (one per `nodes` hosts), else 1. dstack's
    /// autoscaling range (`1..4` with `scaling`) runs its lower bound. A list is dstack's
    /// replica groups (`spec::dstack` turns them into `roles`).
    #[serde(default)]
    pub replicas: Option<Spanned<ReplicasSpec>>,
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
    /// dstack's node groups (a task) or replica groups (a service); `spec::dstack` turns
    /// them into `roles`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Spanned<Vec<GroupSpec>>>,
    /// Each node's own `resources`, by node rank (index = `DSTACK_NODE_RANK`), where a
    /// gang's nodes differ: `spec::dstack` sets it from each node's group (`None`: the group
    /// asks for nothing). Empty: every node has the task's `resources`. Not a key of the file.
    #[serde(skip)]
    pub node_resources: Vec<Option<ResourcesSpec>>,
    /// dstack's service-level router (dstack 0.20.10 on: `{type: sglang, policy,
    /// pd_disaggregation}`) in front of the replica groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<Spanned<RouterSpec>>,

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
    /// dstack's replica auto-scaling (with a `replicas` range); off during a benchmark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<Spanned<ScalingSpec>>,
}

/// `name` when the file has none: empty and unlocated (load names it after the file).
fn unnamed() -> Spanned<String> {
    Spanned {
        value: String::new(),
        referenced: serde_saphyr::Location::UNKNOWN,
        defined: serde_saphyr::Location::UNKNOWN,
    }
}
