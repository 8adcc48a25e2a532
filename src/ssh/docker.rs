//! A bollard client for a host's Docker engine, through an SSH tunnel: a local TCP listener
//! whose connections are forwarded to the host's `/var/run/docker.sock` (`direct-streamlocal`).
//! The docker provider takes the client as is; everything it does locally then works remotely.

use super::{DOCKER_SOCKET, ForwardTarget, Session, SshError, Tunnel};

/// A Docker client bound to its tunnel: keep this alive as long as the client is used.
pub struct RemoteDocker {
    client: bollard::Docker,
    tunnel: Tunnel,
}

impl RemoteDocker {
    /// Open a tunnel to the host's engine socket and a client over it (API version
    /// negotiated, so the engine answered).
    pub async fn connect(session: &Session) -> Result<Self, SshError> {
        Self::connect_to(session, DOCKER_SOCKET).await
    }

    /// Same, for an engine socket at another path (rootless Docker, Podman).
    pub async fn connect_to(session: &Session, socket: &str) -> Result<Self, SshError> {
        let tunnel = session
            .forward(ForwardTarget::Unix {
                path: socket.to_string(),
            })
            .await?;
        let client = bollard::Docker::connect_with_http(
            &format!("http://{}", tunnel.local_addr()),
            120,
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| SshError::Local {
            what: format!("create a Docker client for {}", session.host().name),
            message: e.to_string(),
        })?;
        let client = client
            .negotiate_version()
            .await
            .map_err(|e| SshError::Channel {
                target: session.host().describe(),
                what: format!("reach the Docker engine at {socket}"),
                message: e.to_string(),
            })?;
        Ok(Self { client, tunnel })
    }

    /// The client (cheap to clone; valid while `self` lives).
    pub fn client(&self) -> &bollard::Docker {
        &self.client
    }

    /// The tunnel it goes through.
    pub fn tunnel(&self) -> &Tunnel {
        &self.tunnel
    }
}
