//! The docker provider: task instances as containers on a Docker engine, through bollard
//! (pinned to 0.19; no bollard type leaves this module). The local engine is reached through
//! `DOCKER_HOST` or `/var/run/docker.sock`; another module (ssh) may hand in a client that
//! talks to a remote engine through a tunnel ([`DockerProvider::with_client`]).
//!
//! Owns: the container-create body (env, volumes, shm, ipc, network, GPUs, labels), image
//! presence and pulls, log streaming into the [`crate::provider::LogSink`], exit detection,
//! teardown on every path (stop, `Drop`, emergency kill), labelled leftovers (`ps`, `clean`),
//! host facts and pre-flight checks. Does not own: readiness probes, the run loop, or
//! deciding which options a task wants (the plan does).

mod body;
mod connection;
mod error;
mod exec;
mod gpu;
mod host;
mod image;
mod instance;
mod labels;
mod options;
mod preflight;
mod provider;

pub use error::DockerError;
pub use instance::DockerInstance;
pub use labels::{LabelFilter, Leftover};
pub use options::DockerOptions;
pub use preflight::{PreflightCheck, PreflightProblem};
pub use provider::{DockerProvider, preflight_local};
