//! Providers start the instances of a deployment (local processes, Docker containers, both
//! on remote hosts over SSH, pods on a Kubernetes cluster) and own them until they are stopped. This is a real seam: one
//! trait, one implementation per way of running things.
//!
//! Every instance is owned by a guard: `Instance::stop` is the explicit teardown, `Drop` the
//! logged fallback, and each provider registers an emergency kill with [`crate::shutdown`]
//! for a forced exit (second Ctrl-C).

pub mod docker;
pub mod exec;
pub mod gpu_env;
mod group;
pub mod kubernetes;
pub mod local;
pub mod logs;
pub mod ports;
pub mod reach;
pub mod ssh;
pub mod watchdog;

use async_trait::async_trait;

pub use crate::deploy::ProcessPlace;
use crate::deploy::{ContainerOptions, Resources, VolumeMount};
pub use exec::{ExecOutput, ExecRequest, ExecTarget};
pub use logs::LogSink;

/// Everything a provider needs to start one instance of a role.
#[derive(Debug)]
pub struct LaunchRequest {
    /// Run id (labels, names of containers).
    pub run_id: String,
    pub task: String,
    pub deployment: String,
    pub role: String,
    pub index: usize,
    /// The process's replica, node and process on its node (labels; a Kubernetes pod of
    /// several per node is placed beside its node's first).
    pub place: ProcessPlace,
    /// Container image; required by container providers, ignored by the local one.
    pub image: Option<String>,
    /// Shell commands run in order in one `sh -c`.
    pub commands: Vec<String>,
    /// Environment with secrets exposed (only ever handed to the instance).
    pub env: Vec<(String, String)>,
    /// The port the server listens on.
    pub port: u16,
    pub volumes: Vec<VolumeMount>,
    pub resources: Resources,
    /// Where stdout and stderr go, line by line, as they come.
    pub log: LogSink,
    /// Settings only container providers read; `ContainerOptions::default()` (bridge network
    /// with the port published, the engine's IPC default, GPUs by count) for everything else.
    pub container: ContainerOptions,
}

/// How an instance ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(sig)) => write!(f, "signal {sig}"),
            (None, None) => f.write_str("unknown exit status"),
        }
    }
}

/// An instance's exit, `None` until it has ended.
pub type ExitWatch = tokio::sync::watch::Receiver<Option<ExitInfo>>;

/// Starts instances.
#[async_trait]
pub trait Provider: Send + Sync {
    /// Short name for logs and the manifest (`local`, `docker`, `ssh:host`).
    fn name(&self) -> String;

    /// Start one instance. On error nothing is left running.
    async fn launch(&self, request: LaunchRequest) -> Result<Box<dyn Instance>, ProviderError>;

    /// Facts about the host for the manifest (OS, GPUs, engine versions).
    async fn host_facts(&self) -> serde_json::Value;
}

/// A running process or container. Dropping it without `stop` kills it (logged).
#[async_trait]
pub trait Instance: Send + Sync {
    /// `process 1234`, `container 3f2a...`: for logs and errors.
    fn describe(&self) -> String;

    /// Where the server is reached from the orchestrating machine, e.g. `http://127.0.0.1:8000`.
    fn base_url(&self) -> String;

    /// Where the other instances of its deployment reach it (a pod's IP in its cluster): the
    /// base URL unless the orchestrating machine goes through a forward of its own.
    fn peer_url(&self) -> String {
        self.base_url()
    }

    /// The instance's log (its tail explains failures).
    fn log(&self) -> &LogSink;

    /// Resolves when the instance has exited. Cancel-safe; may be awaited repeatedly.
    async fn exited(&self) -> ExitInfo;

    /// Facts for the manifest (image id and digest, pid, ...).
    fn facts(&self) -> serde_json::Value;

    /// How it ended, readable after `stop` consumed the instance (the manifest's exit code).
    fn exit_watch(&self) -> Option<ExitWatch> {
        None
    }

    /// Called once the instance has passed readiness, before its facts are recorded and
    /// traffic starts: settle what needs a running server (e.g. `client.reach: auto`).
    async fn ready(&self) {}

    /// Stop gracefully (SIGTERM, then SIGKILL after a grace period) and release everything.
    async fn stop(self: Box<Self>) -> Result<(), ProviderError>;

    /// Run a command in the instance (its container) or on its host, output streamed into
    /// `request.log` and captured. Dropping the future kills the command.
    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, ProviderError>;
}

/// Provider failures.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("failed to start `{what}`")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The Docker engine refused or failed; the engine's answer is the source.
    #[error(transparent)]
    Docker(#[from] docker::DockerError),
    /// The Kubernetes API server refused or failed, or a pod will never run.
    #[error(transparent)]
    Kubernetes(#[from] kubernetes::KubeError),
    /// A command inside a container failed to run.
    #[error("failed to {action} in container {container}")]
    ContainerExec {
        action: &'static str,
        container: String,
        #[source]
        source: bollard::errors::Error,
    },
    /// An SSH operation on a host failed.
    #[error("failed to {action} on {host}")]
    Ssh {
        action: String,
        host: String,
        /// Boxed: SSH errors are large and this enum is returned on every provider call.
        #[source]
        source: Box<crate::ssh::SshError>,
    },
    /// The SSH session ended while a command was running.
    #[error("lost the ssh session to {host}")]
    SessionLost { host: String },
    #[error("role `{role}` of task `{task}` has no image: the docker provider needs one")]
    NoImage { role: String, task: String },
    #[error(
        "`where: host` next to a remote Docker engine ({endpoint}) is not supported; use `where: container`"
    )]
    HostExecOnRemoteEngine { endpoint: String },
    #[error("cannot tunnel to `{url}`: no port in the URL")]
    NoPort { url: String },
    #[error("cannot listen for the reach relay")]
    Relay(#[source] std::io::Error),
    /// A wiring problem with no underlying cause (no provider serves a host, say).
    #[error("{message}")]
    Other { message: String },
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::ssh::SshError;
    use crate::units::error_chain;

    #[test]
    fn provider_errors_keep_their_cause() {
        let relay = ProviderError::Relay(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "address in use",
        ));
        assert!(relay.source().is_some());
        assert_eq!(
            error_chain(&relay),
            "cannot listen for the reach relay: address in use"
        );

        let ssh = ProviderError::Ssh {
            action: "start the server".to_string(),
            host: "gpu1".to_string(),
            source: Box::new(SshError::Lost {
                target: "gpu1".to_string(),
                message: "eof".to_string(),
            }),
        };
        let cause = ssh.source().and_then(|s| s.downcast_ref::<Box<SshError>>());
        assert!(
            matches!(cause.map(|b| &**b), Some(SshError::Lost { .. })),
            "{ssh:?}"
        );
        assert_eq!(
            error_chain(&ssh),
            "failed to start the server on gpu1: lost the ssh connection to gpu1: eof"
        );

        let docker: ProviderError = docker::DockerError::NameInUse {
            name: "c".to_string(),
            run: "r".to_string(),
        }
        .into();
        assert!(
            matches!(
                docker,
                ProviderError::Docker(docker::DockerError::NameInUse { .. })
            ),
            "a caller can still tell a name conflict from other engine errors"
        );
    }
}
