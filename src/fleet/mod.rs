//! The fleet of a run: the machines a plan's instances run on beyond this process, and the
//! providers that reach them. Between the parts that start one thing (`provider`, `slurm`,
//! `ssh`) and the run loop (`runner`), which hands each instance to [`ProviderSet`].
//!
//! `hosts` owns the remote hosts of an invocation (the hosts file, one SSH connection pool)
//! and of a task: its hosts resolved and connected once ([`PlanHosts`]), their pre-flight and
//! locks, and the providers on them; `providers` is the provider set of a run (local
//! processes, local Docker, the remote providers); `slurm` the Slurm pre-flight and each
//! deployment's allocations ([`slurm::allocate`]: a plan, a shutdown handle and a provider
//! set in, a [`slurm::SlurmAllocation`] out); `remote_client` our binary installed on the client
//! host and driven there per point.
//!
//! Imports between these files are one way: `providers` <- `slurm` <- `hosts`;
//! `remote_client` stands alone.
//!
//! Does not own: the run loop, the archive, or exit codes (callers map [`HostError`] and
//! [`ProvidersError`] to them).

mod hosts;
mod providers;
pub mod remote_client;
pub mod slurm;

pub use hosts::{HeldLocks, HostError, PlanHosts, Remote, plan_context, remote_hosts};
pub use providers::{ProviderSet, Providers, ProvidersError};
pub use remote_client::{RemoteClientError, RemoteSite, RunClient};
