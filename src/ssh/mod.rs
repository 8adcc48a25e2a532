//! SSH through ssh2, one stack for everything remote: sessions (key files, ssh-agent, host
//! keys checked against known_hosts, jump hosts, keepalive, timeouts), commands with streamed
//! output and exit status, uploads, local port forwards (TCP and unix sockets), connection
//! reuse, the per-host lock and pre-flight checks.
//!
//! Every blocking libssh2 call runs on a session's own thread (`actor`); the rest of the crate
//! sees only async handles. Does not own: the hosts file (`crate::hosts`) or running task
//! instances (`crate::provider::ssh`).

mod actor;
mod command;
mod connect;
mod docker;
mod error;
mod forward;
mod install;
mod lock;
mod pool;
mod preflight;
mod session;
mod transfer;

pub use actor::RemoteExit;
pub use command::{CommandEvent, CommandOutput, RemoteCommand, StdinCloser};
pub use connect::{AgentSocket, ConnectOptions, HostKeyPolicy};
pub use docker::RemoteDocker;
pub use error::SshError;
pub use forward::ForwardTarget;
pub use install::{Installed, REMOTE_BIN_DIR, install_binary, install_binary_in};
pub use lock::{HostLock, LockWait};
pub use pool::Pool;
pub use preflight::{DOCKER_SOCKET, GpuInfo, HostCheck, HostReport, PreflightError, preflight};
pub(crate) use preflight::{GPU_QUERY, parse_gpus};
pub use session::{Session, Tunnel};

/// Quote `text` for a POSIX shell (single quotes).
pub use crate::units::shell_quote as quote;

#[cfg(test)]
mod tests {
    #[test]
    fn quote_survives_the_shell() {
        assert_eq!(super::quote("plain/path-1"), "plain/path-1");
        assert_eq!(super::quote(""), "''");
        assert_eq!(super::quote("it's $HOME"), r"'it'\''s $HOME'");
    }
}
