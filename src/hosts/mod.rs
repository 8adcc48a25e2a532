//! The hosts file (`hosts.yaml` or `--hosts FILE`): named hosts (address, port, user, identity
//! file, jump host, GPUs, labels) and clusters (named groups of hosts, Slurm clusters, or Kubernetes clusters), with `~/.ssh/config`
//! aliases honoured. Loading is synchronous and pure apart from reading the two files.
//!
//! Owns: the file's types, loading with `file:line:col` errors (rendered as the task file's are), resolution against the SSH
//! config, and lookups by host or cluster name. Does not own: connecting (see `crate::ssh`) or
//! placing task instances on hosts (see `crate::plan`).

mod error;
mod file;
pub mod gpu;
mod kubernetes;
mod read;
mod resolve;
mod slurm;
mod ssh_config;

pub use error::HostsError;
pub use file::{
    ClusterSpec, FilePath, HostSpec, HostsFileSpec, KubernetesSpec, Quantity, SlurmSpec,
    TolerationSpec,
};
pub use kubernetes::{
    DEFAULT_GPU_RESOURCE, DEFAULT_NAMESPACE, KubernetesCluster, Toleration, is_dns_label,
};
pub use resolve::{DEFAULT_FILE, GpuDescription, Host, HostsFile, discover, load, load_with};
pub use slurm::{MAX_TIME_LIMIT, SlurmCluster, SlurmContainer, parse_slurm_time};
pub use ssh_config::SshConfig;
