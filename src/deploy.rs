//! The deployment vocabulary: what hardware an instance asks for and how it is wired. GPU
//! requests and vendors, volume mounts, a container's network and IPC namespace, and how a
//! server on a remote host is reached.
//!
//! A leaf module of plain values, named by the task file and shared by spec, plan, hosts and
//! the providers, so that none of them has to import another for a type. Owns no behaviour
//! beyond what the values themselves say.

use serde::{Deserialize, Serialize};

/// `host:container[:ro]` volume mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    pub host: String,
    pub container: String,
    pub read_only: bool,
}

/// Hardware a role asks for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub gpu: Option<GpuRequest>,
    /// Shared memory size in bytes (`shm_size: 32GB`).
    pub shm_size: Option<u64>,
    /// Free disk in bytes each host must have (dstack's `disk: 200GB..`, its minimum).
    #[serde(default)]
    pub disk: Option<u64>,
    /// CPU cores each host must have (dstack's `cpu: 8..`, its minimum).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// RAM in bytes each host must have (dstack's `memory: 64GB..`, its minimum).
    #[serde(default)]
    pub memory: Option<u64>,
}

/// `gpu: "8:H200"`, `gpu: 8`, `gpu: H200:8`, `gpu: {count: 8, name: MI300X, vendor: amd}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRequest {
    pub count: u32,
    /// Model names accepted (e.g. `["H200"]`); empty means any.
    pub names: Vec<String>,
    pub vendor: GpuVendor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuVendor {
    Nvidia,
    Amd,
}

/// How a container is wired to its host; ignored by the local process provider.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerOptions {
    /// Default [`Network::Bridge`].
    pub network: Network,
    /// Default [`Ipc::EngineDefault`].
    pub ipc: Ipc,
    /// Pin these GPUs instead of taking `resources.gpu.count` of them: NVIDIA UUIDs or
    /// indices (device requests), AMD indices (`ROCR_VISIBLE_DEVICES`). Default: empty.
    pub gpu_ids: Vec<String>,
    /// More container ports published like the server port (dstack's `ports` after the
    /// one that is the server port). Default: none.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// `--privileged`. Default: off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// `--user`. Default: the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Replaces the image's entrypoint; the commands are its arguments. Default: the
    /// commands run with `<shell> -c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// The shell that runs the commands. Default `/bin/sh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
}

/// A container's network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The engine's bridge network; the server port is published on the provider's publish
    /// address (127.0.0.1 for the local engine) under the same port number.
    #[default]
    Bridge,
    /// The host's network stack (`--network host`), as multi-node NCCL/RDMA setups need.
    Host,
}

/// A container's IPC namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ipc {
    /// Whatever the engine is configured to do (`private` or `shareable`).
    #[default]
    EngineDefault,
    /// The host's IPC namespace (`--ipc host`), what vLLM/SGLang docs suggest for NCCL.
    Host,
    Private,
    Shareable,
}

/// `client.reach`: how servers on remote hosts are reached from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReachMode {
    /// Direct when the published address answers a TCP connect once the server is ready,
    /// else through the tunnel.
    #[default]
    Auto,
    /// Always `http://<host address>:<port>`.
    Direct,
    /// Always through an SSH tunnel to the host's `127.0.0.1:<port>`.
    Tunnel,
}

/// Where a process sits in its role: its replica, the rank of its node in the replica, and
/// its index on that node when the role runs several per node (`procs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessPlace {
    pub replica: usize,
    pub node_rank: usize,
    pub proc_rank: Option<usize>,
}
