//! Slurm clusters as a place to run deployments (issue #17). One allocation per deployment
//! (`salloc --no-shell`, one node per instance), each instance a job step
//! `srun --jobid J --nodelist N --ntasks 1 --overlap ... sh -e -c CMD` run as a local child
//! process (the local provider's process group, log streaming and watchdog), the job
//! cancelled (`scancel`) on every exit path, and jobs found again by name and comment for
//! `orchestrate ps` / `clean`. A cluster with `login: <host>` has all of that done on its
//! login host over SSH ([`SlurmHost::Login`]; steps as the ssh provider's remote process
//! groups).
//!
//! - `commands`: the argv of every Slurm command and the parsers of their output (pure);
//! - `cli`: running those commands on this machine or on the cluster's login host over SSH
//!   (off the runtime, bounded in time);
//! - `allocation`: the allocation guard (salloc, wait for RUNNING, nodes, scancel);
//! - `provider`: the `Provider` that starts instances as job steps;
//! - `jobs`: our jobs still in the queue (`ps`, `clean`);
//! - `watch`: one poller per running job, so a job Slurm ends fails its deployment at once;
//! - `preflight`: checks of `sinfo` against what a task asks (partition, nodes, GPUs, gres,
//!   time limit), before anything is requested.
//!
//! Owns: everything that talks to Slurm. Does not own: the hosts file's types
//! (`crate::hosts::SlurmCluster`), placing instances on nodes (`crate::plan`), or when
//! allocations are made (`crate::runner`).

pub mod allocation;
pub mod cli;
pub mod commands;
pub mod jobs;
pub mod preflight;
pub mod provider;
pub mod watch;

pub use allocation::{Allocation, Node, PendingAllocation};
pub use cli::SlurmHost;
pub use provider::SlurmProvider;

/// Slurm failures.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run `{command}` (are the Slurm client commands installed?)")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` did not finish within {seconds} s")]
    Timeout { command: String, seconds: u64 },
    #[error("cannot run `{command}` on login host {host}")]
    Ssh {
        command: String,
        host: String,
        #[source]
        source: Box<crate::ssh::SshError>,
    },
    #[error("{0}")]
    Other(String),
}
