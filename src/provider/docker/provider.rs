//! [`DockerProvider`]: the [`Provider`] for one Docker engine — the local one
//! ([`DockerProvider::connect`]) or one another module reached ([`DockerProvider::with_client`]).

use async_trait::async_trait;
use bollard::query_parameters::{CreateContainerOptionsBuilder, StartContainerOptions};
use serde_json::json;

use super::body::{self, EngineSide};
use super::connection::Connection;
use super::error::{DockerError, chain, is_conflict};
use super::instance::{Created, DockerInstance};
use super::labels::{self, LabelFilter, Leftover};
use super::options::DockerOptions;
use super::preflight::{self, PreflightCheck, PreflightProblem};
use super::{host, image};
use crate::deploy::Network;
use crate::provider::{Instance, LaunchRequest, Provider, ProviderError};
use crate::shutdown::Shutdown;

/// Starts task instances as containers on one Docker engine.
pub struct DockerProvider {
    connection: Connection,
    shutdown: Shutdown,
    options: DockerOptions,
}

impl DockerProvider {
    /// The local engine (`DOCKER_HOST`, else `/var/run/docker.sock`), API version negotiated.
    /// Fails at once when the engine does not answer.
    pub async fn connect(
        shutdown: Shutdown,
        options: DockerOptions,
    ) -> Result<Self, ProviderError> {
        let connection = Connection::local().await?;
        Ok(Self {
            connection,
            shutdown,
            options,
        })
    }

    /// The engine at `endpoint` (`unix:///path/docker.sock`, `tcp://host:port`,
    /// `http://host:port`), e.g. a remote engine's socket forwarded over SSH.
    pub async fn connect_to(
        endpoint: &str,
        shutdown: Shutdown,
        options: DockerOptions,
    ) -> Result<Self, ProviderError> {
        let connection = Connection::to(endpoint).await?;
        Ok(Self {
            connection,
            shutdown,
            options,
        })
    }

    /// An engine another module connected, e.g. through an SSH tunnel; negotiate its API
    /// version first (`Docker::negotiate_version`). Set `options.engine_is_local = false`
    /// unless the engine runs on this machine.
    pub fn with_client(
        docker: bollard::Docker,
        shutdown: Shutdown,
        options: DockerOptions,
    ) -> Self {
        let endpoint = options.host_label.clone();
        Self {
            connection: Connection::given(docker, endpoint),
            shutdown,
            options,
        }
    }

    /// The options this provider runs with.
    pub fn options(&self) -> &DockerOptions {
        &self.options
    }

    /// Start one container; the typed form of [`Provider::launch`].
    pub async fn launch_container(
        &self,
        request: LaunchRequest,
    ) -> Result<DockerInstance, ProviderError> {
        let Some(image_ref) = request.image.clone() else {
            return Err(ProviderError::NoImage {
                role: request.role.clone(),
                task: request.task.clone(),
            });
        };
        let image = image::ensure(
            &self.connection,
            &image_ref,
            &self.options.host_label,
            self.options.pull_idle_timeout,
            &self.shutdown.token(),
        )
        .await?;
        let name = body::container_name(&request);
        let engine = EngineSide {
            publish_ip: self.options.publish_ip.clone(),
            home: self.options.home.clone(),
            stop_grace: self.options.stop_grace,
            owner_pid: std::process::id(),
        };
        let create = body::create_body(&request, &image.id, &engine);
        let kill = DockerInstance::register_kill(&self.connection, &name, &self.shutdown);
        let created = self
            .connection
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                create,
            )
            .await
            .map_err(|e| {
                if is_conflict(&e) {
                    DockerError::NameInUse {
                        name: name.clone(),
                        run: request.run_id.clone(),
                    }
                } else {
                    DockerError::container("create", &name)(e)
                }
            })?;
        for warning in &created.warnings {
            tracing::warn!("creating container {name}: {warning}");
        }
        let network = match request.container.network {
            Network::Bridge => "bridge",
            Network::Host => "host",
        };
        let facts = json!({
            "provider": "docker",
            "host": self.options.host_label,
            "container": {"id": created.id, "name": name, "network": network, "port": request.port},
            "image": image,
        });
        let mut instance = DockerInstance::own(
            Created {
                connection: self.connection.clone(),
                id: created.id,
                name: name.clone(),
                base_url: format!("http://{}:{}", self.options.address, request.port),
                log: request.log,
                facts,
                stop_grace: self.options.stop_grace,
                engine_is_local: self.options.engine_is_local,
            },
            kill,
        );
        if let Err(source) = self
            .connection
            .docker
            .start_container(instance.id(), None::<StartContainerOptions>)
            .await
        {
            let error = DockerError::container("start", &name)(source);
            if let Err(e) = instance.remove().await {
                tracing::error!("{}", chain(&e));
            }
            return Err(error.into());
        }
        instance.watch();
        tracing::info!("started container {name} from {image_ref}");
        Ok(instance)
    }

    /// Containers of ours on this engine matching `filter` (`orchestrate ps`).
    pub async fn list(&self, filter: &LabelFilter) -> Result<Vec<Leftover>, ProviderError> {
        Ok(labels::list(&self.connection, filter).await?)
    }

    /// Remove every container of ours matching `filter` (`orchestrate clean`); returns them.
    pub async fn clean(&self, filter: &LabelFilter) -> Result<Vec<Leftover>, ProviderError> {
        Ok(labels::remove_all(&self.connection, filter).await?)
    }

    /// Check everything `checks` needs without starting anything; every problem together.
    pub async fn preflight(&self, checks: &[PreflightCheck]) -> Result<(), Vec<PreflightProblem>> {
        preflight::run(Ok(&self.connection), &self.options, checks).await
    }
}

/// Pre-flight against the local engine, which may not even answer (then that is the first
/// problem, and the host checks still run).
pub async fn preflight_local(
    options: &DockerOptions,
    checks: &[PreflightCheck],
) -> Result<(), Vec<PreflightProblem>> {
    match Connection::local().await {
        Ok(connection) => preflight::run(Ok(&connection), options, checks).await,
        Err(e) => {
            let endpoint = match &e {
                DockerError::Connect { endpoint, .. } => endpoint.clone(),
                _ => "the local engine".into(),
            };
            let problem = PreflightProblem::EngineUnreachable {
                endpoint,
                reason: chain(&e),
            };
            preflight::run(Err(problem), options, checks).await
        }
    }
}

#[async_trait]
impl Provider for DockerProvider {
    fn name(&self) -> String {
        if self.options.host_label == "local" {
            "docker".into()
        } else {
            format!("docker@{}", self.options.host_label)
        }
    }

    async fn launch(&self, request: LaunchRequest) -> Result<Box<dyn Instance>, ProviderError> {
        Ok(Box::new(self.launch_container(request).await?))
    }

    async fn host_facts(&self) -> serde_json::Value {
        host::facts(&self.connection, self.options.engine_is_local).await
    }
}
