//! The plan types: a run, its deployments, roles, instances, points and their load, as
//! `orchestrate plan` prints them and the runner executes them. Values only; built in
//! plan/build and plan/point.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dataset::DatasetSpec;
use crate::deploy::{ContainerOptions, ReachMode, Resources, VolumeMount};
use crate::load::{Backend, Endpoint, LoadShape};
use crate::spec::dstack::StartupOrder;

/// Everything a run of one task does.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The task's name (directory name under results/).
    pub task: String,
    /// The task file this plan came from.
    pub source: PathBuf,
    pub description: Option<String>,
    /// Request/metrics dialect of the server.
    pub backend: Backend,
    /// Model id sent in requests.
    pub model: String,
    /// sha256 of the task file (and its profile), hex.
    pub spec_hash: String,
    /// The task as written (profile merged) plus `deployments.<id>`: each deployment with its
    /// templates rendered per instance; secrets redacted. The manifest keeps it.
    pub resolved: serde_json::Value,
    /// One entry per distinct deployment; points that only change the load share one.
    pub deployments: Vec<DeploymentPlan>,
    /// Stop the sweep at the first failed point instead of recording it and going on.
    pub stop_on_failure: bool,
    /// The task said `port: auto`: every instance port was picked free when planning.
    pub port_auto: bool,
    /// Regression thresholds for `check` (`benchmark.check.thresholds`): metric -> `"-5%"`,
    /// `"+10%"`; validated to that form.
    pub thresholds: BTreeMap<String, String>,
    /// When a point's measurement is trusted (`benchmark.validity`).
    pub validity: Validity,
    /// `benchmark.search`: each deployment's capacity search, run from its one point's
    /// load instead of measuring that point (`None`: the sweep as planned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<crate::load::search::SearchSpec>,
    /// Free label for the run index (`tag:`).
    pub tag: Option<String>,
    /// Where the load generator runs and how it reaches remote servers (`client:`).
    pub client: ClientPlan,
    /// What each dstack key of the task file became: honored, or ignored and why.
    pub dstack: Vec<crate::spec::dstack::Note>,
    /// `telemetry:` of the task; `None` when it has none (then only `run`'s flags turn GPU
    /// telemetry on).
    pub telemetry: Option<TelemetryPlan>,
}

/// The task's `telemetry:` resolved; every key left out is `None` (the run's flags or the
/// defaults decide).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TelemetryPlan {
    /// `enabled:` (true unless written false).
    pub enabled: bool,
    pub tool: Option<crate::spec::GpuTool>,
    pub interval_ms: Option<u64>,
    pub dcgm_url: Option<String>,
    pub command: Option<String>,
}

/// Bounds for a valid measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validity {
    /// Highest fraction of failed requests (default 0.0).
    pub max_error_rate: f64,
    /// Largest relative deviation of output lengths from the requested ones (default 0.05).
    pub length_tolerance: f64,
    /// Largest p99 dispatch lag of a paced point, ms (default 50).
    pub max_dispatch_lag_ms: f64,
    /// Smallest mean in flight over the concurrency cap (default 0.9).
    pub min_delivered_concurrency: f64,
    /// Largest p99 event-loop lag of the client, ms (default 50).
    pub max_event_loop_lag_ms: f64,
    /// Whether points are judged for over-saturation, and what follows (default off).
    pub over_saturation: crate::load::OverSaturation,
}

impl Default for Validity {
    fn default() -> Self {
        Self {
            max_error_rate: 0.0,
            length_tolerance: 0.05,
            max_dispatch_lag_ms: 50.0,
            min_delivered_concurrency: 0.9,
            max_event_loop_lag_ms: 50.0,
            over_saturation: crate::load::OverSaturation::Off,
        }
    }
}

impl Plan {
    /// The plan as `deployment` is run and measured: with that deployment's model and
    /// backend (a named deployment may differ from the first, which the plan's are).
    pub fn for_deployment(&self, deployment: &DeploymentPlan) -> std::borrow::Cow<'_, Plan> {
        if deployment.model == self.model && deployment.backend == self.backend {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(Plan {
            model: deployment.model.clone(),
            backend: deployment.backend,
            ..self.clone()
        })
    }

    /// The backend as written in task files (`vllm`, `sglang`, ...).
    pub fn backend_name(&self) -> String {
        serde_json::to_value(self.backend)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// One deployment: started once, loaded with each of its points, stopped.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentPlan {
    /// Stable id within the plan, e.g. `d1`.
    pub id: String,
    /// Values of the matrix axes that change the deployment (empty when none do).
    pub axes: BTreeMap<String, serde_json::Value>,
    /// Roles in start order (dependencies first). A plain task has one role, `server`.
    pub roles: Vec<RolePlan>,
    /// The role whose first instance receives the benchmark traffic.
    pub entry_role: String,
    /// The load points run against this deployment, in order.
    pub points: Vec<PointPlan>,
    /// The named deployment (`deployments:`) this is, also its `deployment` axis value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Request/metrics dialect of this deployment's server.
    pub backend: Backend,
    /// Model id this deployment serves.
    pub model: String,
}

/// Where and how instances run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Processes on the orchestrating machine.
    Local,
    /// Containers on the local Docker engine.
    Docker,
}

/// A role of a deployment (a plain task has exactly one: `server`).
#[derive(Debug, Clone, Serialize)]
pub struct RolePlan {
    pub name: String,
    pub provider: ProviderKind,
    /// Container image; `None` for the local process provider.
    pub image: Option<String>,
    pub instances: Vec<InstancePlan>,
    pub readiness: ReadinessPlan,
    pub volumes: Vec<VolumeMount>,
    pub resources: Resources,
    /// Docker wiring (network, IPC, pinned GPUs); ignored by local processes.
    pub container: ContainerOptions,
    /// Order of each gang's processes (`startup_order`; `any`: all at once).
    #[serde(skip_serializing_if = "is_any_order")]
    pub startup_order: StartupOrder,
}

fn is_any_order(order: &StartupOrder) -> bool {
    *order == StartupOrder::Any
}

/// One process or container of a role: process `proc_rank` of node `node_rank` of replica
/// `replica`.
#[derive(Debug, Clone, Serialize)]
pub struct InstancePlan {
    /// Index within the role (0-based, replica-major:
    /// `(replica * nodes + node_rank) * procs + proc_rank`).
    pub index: usize,
    /// The replica (one model instance) this process belongs to, from 0.
    pub replica: usize,
    /// Rank of this process's node within its replica; 0 is the replica's leader node.
    pub node_rank: usize,
    /// This process's index on its node when its role runs several per node (`procs`);
    /// `None` when it runs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_rank: Option<usize>,
    /// The GPUs this process is pinned to on its host (its share of the node's, with
    /// `procs`); empty: the role's `container.gpu_ids`, or not pinned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_ids: Vec<String>,
    /// What readiness checks for this process: the role's probes, or only that it is alive
    /// (ranks above 0 of a multi-node replica, which serve no HTTP).
    pub probe: Probe,
    /// The host it runs on.
    pub host: HostPlan,
    /// The port the server listens on (allocated when the task said `port: auto`).
    pub port: u16,
    /// Rendered shell commands, run in order in one shell (`sh -c`), like dstack's `commands`.
    pub commands: Vec<String>,
    /// Environment, in task order. Secrets are redacted when serialized or printed.
    pub env: Vec<EnvVar>,
    /// This process's own resources where they differ from its role's (a node of one of
    /// dstack's node groups); read them with [`RolePlan::resources_of`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
}

/// What readiness checks for one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    /// The role's `readiness` (HTTP, TCP, then maybe one completion).
    Role,
    /// Only that the process is alive: a headless rank (node_rank > 0) serves nothing.
    Alive,
}

impl InstancePlan {
    /// The process's name, `<role>-r<replica>-n<node_rank>` (and `-p<proc_rank>` with
    /// `procs`): its log is `logs/<name>.log`.
    pub fn name(&self, role: &str) -> String {
        match self.proc_rank {
            Some(p) => format!("{role}-r{}-n{}-p{p}", self.replica, self.node_rank),
            None => format!("{role}-r{}-n{}", self.replica, self.node_rank),
        }
    }

    /// Where this process sits in its role, as a provider takes it.
    pub fn place(&self) -> crate::deploy::ProcessPlace {
        crate::deploy::ProcessPlace {
            replica: self.replica,
            node_rank: self.node_rank,
            proc_rank: self.proc_rank,
        }
    }

    /// Whether this process leads its replica (node 0, process 0): it starts first with
    /// `startup_order: master-first` and is the replica's address.
    pub fn is_leader(&self) -> bool {
        self.node_rank == 0 && self.proc_rank.unwrap_or(0) == 0
    }

    /// Whether this process serves HTTP (probed with the role's readiness, registered with a
    /// router, listed in `roles.<r>.servers`).
    pub fn serves(&self) -> bool {
        self.probe == Probe::Role
    }
}

impl RolePlan {
    /// What `instance` (one of this role's) asks for: its own resources, else the role's.
    pub fn resources_of<'a>(&'a self, instance: &'a InstancePlan) -> &'a Resources {
        instance.resources.as_ref().unwrap_or(&self.resources)
    }

    /// The container wiring of `instance`: the role's, pinned to the instance's own GPUs
    /// when it has some (one of several processes per node).
    pub fn container_of(&self, instance: &InstancePlan) -> std::borrow::Cow<'_, ContainerOptions> {
        if instance.gpu_ids.is_empty() {
            std::borrow::Cow::Borrowed(&self.container)
        } else {
            std::borrow::Cow::Owned(ContainerOptions {
                gpu_ids: instance.gpu_ids.clone(),
                ..self.container.clone()
            })
        }
    }

    /// The readiness of one of this role's processes: the role's, or "alive" for a headless
    /// rank.
    pub fn readiness_of(&self, instance: &InstancePlan) -> ReadinessPlan {
        match instance.probe {
            Probe::Role => self.readiness.clone(),
            Probe::Alive => ReadinessPlan {
                alive_only: true,
                generate: false,
                ..self.readiness.clone()
            },
        }
    }
}

/// Where an instance runs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostPlan {
    /// The orchestrating machine.
    Local,
    /// A host from the hosts file, reached over SSH.
    Remote { name: String, address: String },
    /// A node of the deployment's Slurm allocation (one node per instance).
    /// Boxed: it carries the cluster's settings.
    Slurm(Box<SlurmPlace>),
    /// A pod on a Kubernetes cluster (one pod per instance), placed by its scheduler.
    /// Boxed: it carries the cluster's settings.
    Kubernetes(Box<KubePlace>),
}

/// An instance's pod on a Kubernetes cluster. The node is the scheduler's choice, so a pod's
/// address is known only once it runs: templates render it as a token
/// ([`KubePlace::address_token`]), and the runner replaces the tokens of a pod about to start:
/// its own with [`KubePlace::ADDRESS`] (expanded by the kubelet to the pod's IP), those of pods
/// already started with their IPs (a gang's leader for its ranks, the workers for a router).
#[derive(Debug, Clone, Serialize)]
pub struct KubePlace {
    /// The cluster, as the hosts file configures it.
    pub cluster: crate::hosts::KubernetesCluster,
    /// The pod's address token (`<k8s:role-index>`), set once the instance is placed.
    pub address: String,
}

impl KubePlace {
    /// What a pod's own address becomes in its commands: its IP, expanded by the kubelet.
    pub const ADDRESS: &'static str = "$(POD_IP)";

    /// `<k8s:prefill-1>`: the address of instance `index` of role `role` before its pod runs.
    pub fn address_token(role: &str, index: usize) -> String {
        format!("<k8s:{role}-{index}>")
    }
}

/// An instance's node of a Slurm allocation. Nodes are known only once the allocation is
/// granted: until then `name` and `address` are tokens ([`SlurmPlace::name_token`],
/// [`SlurmPlace::address_token`]) that templates render like any host name, and the runner
/// replaces them throughout the deployment (commands, env) with the allocated node.
#[derive(Debug, Clone, Serialize)]
pub struct SlurmPlace {
    /// The cluster, as the hosts file configures it.
    pub cluster: crate::hosts::SlurmCluster,
    /// The node's position in the deployment's allocation, from 0.
    pub slot: usize,
    /// The node's name (a token until allocated).
    pub name: String,
    /// The node's address (a token until allocated).
    pub address: String,
}

impl SlurmPlace {
    /// Slot `slot` of `cluster`, not allocated yet.
    pub fn planned(cluster: crate::hosts::SlurmCluster, slot: usize) -> Self {
        let name = Self::name_token(&cluster.name, slot);
        let address = Self::address_token(&cluster.name, slot);
        Self {
            cluster,
            slot,
            name,
            address,
        }
    }

    /// `<gpu:node0>`: the node name before allocation.
    pub fn name_token(cluster: &str, slot: usize) -> String {
        format!("<{cluster}:node{slot}>")
    }

    /// `<gpu:node0.addr>`: the node address before allocation.
    pub fn address_token(cluster: &str, slot: usize) -> String {
        format!("<{cluster}:node{slot}.addr>")
    }
}

impl HostPlan {
    /// The address clients use to reach a server on this host.
    pub fn address(&self) -> &str {
        match self {
            HostPlan::Local => "127.0.0.1",
            HostPlan::Remote { address, .. } => address,
            HostPlan::Slurm(place) => &place.address,
            HostPlan::Kubernetes(place) => &place.address,
        }
    }
}

/// One environment variable.
#[derive(Debug, Clone, Serialize)]
pub struct EnvVar {
    pub name: String,
    pub value: EnvValue,
}

/// An environment value; secrets never leave the process in clear text except to the
/// server being started.
#[derive(Clone)]
pub enum EnvValue {
    Plain(String),
    /// From `${{ secrets.NAME }}`, resolved from the orchestrator's environment.
    Secret {
        name: String,
        value: String,
    },
}

/// How a secret is shown wherever it is printed or written.
pub const REDACTED: &str = "***";

impl EnvValue {
    /// The value to hand to the server process.
    pub fn expose(&self) -> &str {
        match self {
            EnvValue::Plain(v) => v,
            EnvValue::Secret { value, .. } => value,
        }
    }
}

impl std::fmt::Display for EnvValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvValue::Plain(v) => f.write_str(v),
            EnvValue::Secret { name, .. } => write!(f, "{REDACTED} (secret {name})"),
        }
    }
}

impl std::fmt::Debug for EnvValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Serialize for EnvValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            EnvValue::Plain(v) => s.serialize_str(v),
            EnvValue::Secret { .. } => s.serialize_str(REDACTED),
        }
    }
}

/// How to decide that a role's instance is ready.
#[derive(Debug, Clone, Serialize)]
pub struct ReadinessPlan {
    /// HTTP probe; `None` means a TCP connect on the port is enough.
    pub http: Option<HttpProbePlan>,
    /// Also send one tiny completion before declaring the server ready.
    pub generate: bool,
    /// Time between probes, of either kind.
    #[serde(with = "crate::units::serde_duration")]
    pub interval: Duration,
    /// Give up after this long.
    #[serde(with = "crate::units::serde_duration")]
    pub timeout: Duration,
    /// Probe nothing: the process being alive is enough (a headless rank; see
    /// [`RolePlan::readiness_of`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub alive_only: bool,
    /// `readiness.workers` as written: the topology check of a router role (the runner
    /// fills the defaults from the deployment's roles).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersPlan>,
    /// `readiness.ray`: the Ray node count each replica's cluster must reach before the
    /// leader is probed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ray: Option<RayPlan>,
}

/// `readiness.ray` with its defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RayPlan {
    /// The head's GCS port.
    pub port: u16,
    /// Alive nodes expected per replica; `None`: the role's `nodes`.
    pub nodes: Option<u32>,
    /// The `ray` program run on the head: `<command> status --address <head>:<port>`.
    pub command: String,
}

/// `readiness.workers` as written; `None` fields take the deployment's defaults.
#[derive(Debug, Clone, Serialize)]
pub struct WorkersPlan {
    /// `false`: no topology check on this role, even when it is a router.
    pub enabled: bool,
    pub prefill: Option<u32>,
    pub decode: Option<u32>,
    pub via: Option<crate::spec::WorkersVia>,
    /// Then one completion through the entry role.
    pub generate: bool,
    /// Roles whose leaders are registered with the router first (`POST /workers`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub register: Vec<String>,
}

/// `GET path` until it answers `status`.
#[derive(Debug, Clone, Serialize)]
pub struct HttpProbePlan {
    pub path: String,
    pub status: u16,
}

/// One point of the sweep: a load against a ready deployment.
#[derive(Debug, Clone, Serialize)]
pub struct PointPlan {
    /// Stable, filesystem-safe id, e.g. `concurrency=4` or `concurrency=4,output_len=800`.
    pub id: String,
    /// Values of every matrix axis at this point (load and deployment axes).
    pub axes: BTreeMap<String, serde_json::Value>,
    pub load: LoadPlan,
    /// How many times the point is measured (noise-aware checks compare medians).
    pub repetitions: u32,
    /// `benchmark.external`: the tool run instead of the embedded client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<crate::external::ExternalPlan>,
}

/// Everything the client needs for one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadPlan {
    pub endpoint: Endpoint,
    pub dataset: DatasetSpec,
    /// Path to tokenizer.json, or a model id looked up in the local HF cache.
    pub tokenizer: Option<String>,
    pub ignore_eos: bool,
    pub shape: LoadShape,
    pub seed: u64,
    /// Merged into every request body.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Give up on one request after this long.
    #[serde(with = "crate::units::serde_opt_duration")]
    pub request_timeout: Option<Duration>,
    /// SLOs for goodput (`benchmark.goodput`); empty = no goodput figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub goodput: Vec<crate::load::Slo>,
    /// A request the server sends no byte for this long fails as stalled; `None`: `off`.
    #[serde(
        default = "default_stall_timeout",
        with = "crate::units::serde_opt_duration"
    )]
    pub stall_timeout: Option<Duration>,
    /// Tokens per block of the workload's ideal prefix-cache hit rate
    /// (`benchmark.prefix_block_size`).
    #[serde(
        default = "default_prefix_block_size",
        skip_serializing_if = "is_default_prefix_block_size"
    )]
    pub prefix_block_size: u32,
    /// The time series' bin width and the servers' scrape interval
    /// (`benchmark.timeseries_interval`); `None`: `off`.
    #[serde(
        default = "default_timeseries_interval",
        with = "crate::units::serde_opt_duration",
        skip_serializing_if = "is_default_timeseries_interval"
    )]
    pub timeseries_interval: Option<Duration>,
    /// Percentiles of the summary's latency figures (`benchmark.percentiles`, default 99).
    #[serde(
        default = "crate::load::default_percentiles",
        skip_serializing_if = "crate::load::is_default_percentiles"
    )]
    pub percentiles: Vec<f64>,
}

/// The time-series interval of a plan that did not record one: the default.
fn default_timeseries_interval() -> Option<Duration> {
    Some(crate::load::DEFAULT_TIMESERIES_INTERVAL)
}

fn is_default_timeseries_interval(d: &Option<Duration>) -> bool {
    *d == default_timeseries_interval()
}

/// The block size of a plan that did not record one: the default.
fn default_prefix_block_size() -> u32 {
    crate::load::DEFAULT_PREFIX_BLOCK_TOKENS
}

fn is_default_prefix_block_size(n: &u32) -> bool {
    *n == default_prefix_block_size()
}

/// The stall timeout of a plan archived before it was recorded: the default.
fn default_stall_timeout() -> Option<Duration> {
    Some(crate::load::DEFAULT_STALL_TIMEOUT)
}

/// Errors building a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Invalid(String),
    /// A located problem in the task file (or its profile).
    #[error("{0}")]
    At(Box<crate::spec::Diagnostic>),
    /// `port: auto` could not get a free port.
    #[error("cannot pick a free port for `port: auto`")]
    Port(#[source] std::io::Error),
}

impl From<crate::spec::Diagnostic> for PlanError {
    fn from(d: crate::spec::Diagnostic) -> Self {
        PlanError::At(Box::new(d))
    }
}

/// Where the client runs and how it reaches remote servers.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct ClientPlan {
    /// This machine (default) or a host of the hosts file.
    pub host: ClientHost,
    /// How this machine reaches servers on remote hosts.
    pub reach: ReachMode,
}

/// The machine the load generator runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ClientHost {
    /// The orchestrating machine.
    #[default]
    Local,
    /// A host from the hosts file, reached over SSH.
    Remote { name: String, address: String },
}

impl ClientHost {
    /// The host name (`local` for this machine).
    pub fn name(&self) -> &str {
        match self {
            ClientHost::Local => "local",
            ClientHost::Remote { name, .. } => name,
        }
    }
}
