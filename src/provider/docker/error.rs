//! Errors of the docker provider. Each says what was being done, to which image or
//! container, and (where there is one) what to do about it; the engine's answer is the source.

use std::time::Duration;

/// Why talking to the Docker engine failed.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error(
        "cannot reach the docker engine at {endpoint} (is dockerd running, and DOCKER_HOST right?)"
    )]
    Connect {
        endpoint: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(
        "image `{image}` is not present on {host} and could not be pulled (build or load it there, or check the registry and credentials)"
    )]
    Pull {
        image: String,
        host: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(
        "image `{image}` is not present on {host} and pulling it made no progress for {after:?} (no registry reachable?)"
    )]
    PullTimeout {
        image: String,
        host: String,
        after: Duration,
    },
    #[error(
        "a container named `{name}` already exists, left by an earlier run with this id (remove it with `orchestrate clean --run {run}`)"
    )]
    NameInUse { name: String, run: String },
    #[error("failed to {action} container `{container}`")]
    Container {
        action: &'static str,
        container: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("failed to {action}")]
    Engine {
        action: &'static str,
        #[source]
        source: bollard::errors::Error,
    },
}

impl DockerError {
    pub(crate) fn container(
        action: &'static str,
        container: &str,
    ) -> impl FnOnce(bollard::errors::Error) -> Self {
        let container = container.to_string();
        move |source| DockerError::Container {
            action,
            container,
            source,
        }
    }

    pub(crate) fn engine(action: &'static str) -> impl FnOnce(bollard::errors::Error) -> Self {
        move |source| DockerError::Engine { action, source }
    }
}

pub(crate) use crate::units::error_chain as chain;

/// Whether the engine answered 409 (a name already in use).
pub(crate) fn is_conflict(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}

/// Whether the engine answered 404 (no such container or image).
pub(crate) fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}
