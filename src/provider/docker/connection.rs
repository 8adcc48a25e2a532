//! The connection to one Docker engine: the bollard client, where it points, and how to get a
//! client that works from a fresh thread with its own runtime (the `Drop` fallback and the
//! emergency kill run where the async runtime may be gone or busy).

use std::time::Duration;

use bollard::query_parameters::RemoveContainerOptionsBuilder;
use bollard::{API_DEFAULT_VERSION, Docker};

use super::error::{DockerError, chain, is_not_found};

/// How long a blocking removal may take before it gives up (logged).
pub(crate) const BLOCKING_REMOVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the engine may take to answer a request's head (streams run longer).
const CLIENT_TIMEOUT_SECS: u64 = 120;

/// A client for one engine.
#[derive(Clone)]
pub(crate) struct Connection {
    pub(crate) docker: Docker,
    /// `unix:///var/run/docker.sock`, `tcp://...`, or the label another module gave.
    pub(crate) endpoint: String,
    origin: Origin,
}

#[derive(Clone)]
enum Origin {
    /// Connected here from an endpoint: a fresh runtime reconnects to it.
    Endpoint,
    /// Handed in (e.g. through an SSH tunnel): a fresh runtime reuses a clone.
    Given,
}

impl Connection {
    /// The local engine: `DOCKER_HOST` when set, else `/var/run/docker.sock`; the API version
    /// is negotiated (Docker 20.10 speaks 1.41).
    pub(crate) async fn local() -> Result<Self, DockerError> {
        Self::to(&local_endpoint()).await
    }

    /// The engine at `endpoint`: `unix:///path/docker.sock`, `tcp://host:port` or
    /// `http://host:port` (e.g. a port forwarded over SSH); the API version is negotiated.
    pub(crate) async fn to(endpoint: &str) -> Result<Self, DockerError> {
        let docker = connect(endpoint).await?;
        Ok(Self {
            docker,
            endpoint: endpoint.to_string(),
            origin: Origin::Endpoint,
        })
    }

    /// A client another module connected (its API version already negotiated).
    pub(crate) fn given(docker: Docker, endpoint: String) -> Self {
        Self {
            docker,
            endpoint,
            origin: Origin::Given,
        }
    }

    async fn fresh(&self) -> Docker {
        match self.origin {
            Origin::Endpoint => connect(&self.endpoint)
                .await
                .unwrap_or_else(|_| self.docker.clone()),
            Origin::Given => self.docker.clone(),
        }
    }

    /// Force-remove a container (SIGKILL + remove) from a new thread with its own runtime and
    /// wait for it, at most [`BLOCKING_REMOVE_TIMEOUT`]. Safe to call from `Drop`, from a
    /// signal handler task, or with no runtime at all. A container already gone is success.
    pub(crate) fn remove_blocking(&self, container: &str) -> Result<(), String> {
        let this = self.clone();
        let id = container.to_string();
        let worker = std::thread::Builder::new()
            .name("docker-remove".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("no runtime for the removal: {e}"))?;
                runtime.block_on(async {
                    let docker = this.fresh().await;
                    let options = RemoveContainerOptionsBuilder::new()
                        .force(true)
                        .v(true)
                        .build();
                    match tokio::time::timeout(
                        BLOCKING_REMOVE_TIMEOUT,
                        docker.remove_container(&id, Some(options)),
                    )
                    .await
                    {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) if is_not_found(&e) => Ok(()),
                        Ok(Err(e)) => Err(chain(&e)),
                        Err(_) => Err(format!(
                            "the engine did not answer within {BLOCKING_REMOVE_TIMEOUT:?}"
                        )),
                    }
                })
            })
            .map_err(|e| format!("no thread for the removal: {e}"))?;
        worker
            .join()
            .unwrap_or_else(|_| Err("the removal thread panicked".into()))
    }
}

fn local_endpoint() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
}

async fn connect(endpoint: &str) -> Result<Docker, DockerError> {
    let connect_error = |source| DockerError::Connect {
        endpoint: endpoint.to_string(),
        source,
    };
    let docker = if endpoint.starts_with("tcp://") || endpoint.starts_with("http://") {
        Docker::connect_with_http(endpoint, CLIENT_TIMEOUT_SECS, API_DEFAULT_VERSION)
    } else if endpoint.starts_with("unix://") || endpoint.starts_with('/') {
        Docker::connect_with_unix(endpoint, CLIENT_TIMEOUT_SECS, API_DEFAULT_VERSION)
    } else {
        // ssh:// and https:// engines: forward their socket and pass the local end here.
        Err(bollard::errors::Error::UnsupportedURISchemeError {
            uri: endpoint.to_string(),
        })
    }
    .map_err(connect_error)?;
    docker.negotiate_version().await.map_err(connect_error)
}
