//! One running container, owned by a guard: its logs streamed into the sink as they come,
//! its exit observed through the engine's wait API, and its removal guaranteed — `stop`
//! (SIGTERM, SIGKILL after the grace, logs drained and flushed, then removed), `Drop` as the
//! logged fallback (removal from a fresh thread), and an emergency kill registered with
//! [`Shutdown`] for a forced exit.

use std::time::Duration;

use async_trait::async_trait;
use bollard::query_parameters::{
    InspectContainerOptions, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    StopContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::connection::Connection;
use super::error::{DockerError, is_not_found};
use crate::provider::{ExitInfo, Instance, LogSink, ProviderError};
use crate::shutdown::{KillRegistration, Shutdown};

/// How long the log stream may take to deliver the last lines once the container exited.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A container started by [`super::DockerProvider`]. Dropping it without `stop` removes the
/// container anyway (logged as a warning).
pub struct DockerInstance {
    connection: Connection,
    id: String,
    name: String,
    base_url: String,
    log: LogSink,
    facts: Value,
    stop_grace: Duration,
    exit: watch::Receiver<Option<ExitInfo>>,
    drained: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    removed: bool,
    /// The engine runs on this machine (`where: host` commands then run here).
    engine_is_local: bool,
    _kill: KillRegistration,
}

/// What a created (not yet started) container is.
pub(crate) struct Created {
    pub connection: Connection,
    pub id: String,
    pub name: String,
    pub base_url: String,
    pub log: LogSink,
    pub facts: Value,
    pub stop_grace: Duration,
    pub engine_is_local: bool,
}

impl DockerInstance {
    /// Register the emergency kill of the container that will be called `name`, before it
    /// is even created (the engine removes by name as well as by id), so that a forced exit
    /// in the middle of a launch leaves nothing behind either.
    pub(crate) fn register_kill(
        connection: &Connection,
        name: &str,
        shutdown: &Shutdown,
    ) -> KillRegistration {
        let connection = connection.clone();
        let target = name.to_string();
        shutdown.register(format!("container {name}"), move || {
            if let Err(e) = connection.remove_blocking(&target) {
                tracing::error!("could not remove container {target}: {e}");
            }
        })
    }

    /// Own a created container: from here on, every path removes it.
    pub(crate) fn own(created: Created, kill: KillRegistration) -> Self {
        // Placeholders until `watch` starts the log pump and the waiter.
        let (_, exit) = watch::channel(None);
        let (_, drained) = watch::channel(false);
        Self {
            connection: created.connection,
            id: created.id,
            name: created.name,
            base_url: created.base_url,
            log: created.log,
            facts: created.facts,
            stop_grace: created.stop_grace,
            exit,
            drained,
            tasks: Vec::new(),
            removed: false,
            engine_is_local: created.engine_is_local,
            _kill: kill,
        }
    }

    /// The engine's container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container's name (`orchestrate-<run>-<task>-<deployment>-<role>-<index>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Start streaming logs and watching for the exit (call once, after the start).
    pub(crate) fn watch(&mut self) {
        let (drained_tx, drained_rx) = watch::channel(false);
        let (exit_tx, exit_rx) = watch::channel(None);
        self.drained = drained_rx;
        self.exit = exit_rx;

        let docker = self.connection.docker.clone();
        let id = self.id.clone();
        let sink = self.log.clone();
        self.tasks.push(tokio::spawn(async move {
            let options = LogsOptionsBuilder::new()
                .follow(true)
                .stdout(true)
                .stderr(true)
                .build();
            let mut stream = docker.logs(&id, Some(options));
            while let Some(item) = stream.next().await {
                match item {
                    Ok(output) => sink.write(&output.into_bytes()),
                    Err(e) => {
                        tracing::debug!("log stream of container {id} ended: {e}");
                        break;
                    }
                }
            }
            sink.flush();
            let _ = drained_tx.send(true);
        }));

        let docker = self.connection.docker.clone();
        let id = self.id.clone();
        let mut drained = self.drained.clone();
        self.tasks.push(tokio::spawn(async move {
            let exit = wait_for_exit(&docker, &id).await;
            // The tail explains the exit: give the log stream a moment to deliver it.
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, drained.wait_for(|d| *d)).await;
            tracing::debug!("container {id} exited: {exit}");
            let _ = exit_tx.send(Some(exit));
        }));
    }

    /// Remove the container now (SIGKILL if still running); already gone is fine.
    pub(crate) async fn remove(&mut self) -> Result<(), DockerError> {
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match self
            .connection
            .docker
            .remove_container(&self.id, Some(options))
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(DockerError::container("remove", &self.name)(e)),
        }
        self.removed = true;
        Ok(())
    }
}

/// The container's exit, through the wait API (re-armed if the request breaks), with
/// inspect as the fallback.
async fn wait_for_exit(docker: &bollard::Docker, id: &str) -> ExitInfo {
    loop {
        let options = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let mut stream = docker.wait_container(id, Some(options));
        match stream.next().await {
            Some(Ok(response)) => return exit_info(response.status_code),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                return exit_info(code);
            }
            Some(Err(e)) if is_not_found(&e) => return unknown_exit(),
            Some(Err(e)) => tracing::debug!("waiting for container {id}: {e}"),
            None => {}
        }
        match docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(inspect) => {
                let state = inspect.state.unwrap_or_default();
                if state.running != Some(true) {
                    return state.exit_code.map_or_else(unknown_exit, exit_info);
                }
            }
            Err(e) if is_not_found(&e) => return unknown_exit(),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn exit_info(code: i64) -> ExitInfo {
    ExitInfo {
        code: Some(i32::try_from(code).unwrap_or(i32::MAX)),
        signal: None,
    }
}

fn unknown_exit() -> ExitInfo {
    ExitInfo {
        code: None,
        signal: None,
    }
}

#[async_trait]
impl Instance for DockerInstance {
    async fn exec(
        &self,
        request: crate::provider::ExecRequest,
    ) -> Result<crate::provider::ExecOutput, ProviderError> {
        match request.target {
            crate::provider::ExecTarget::Instance => {
                super::exec::exec_in_container(&self.connection.docker, &self.id, request).await
            }
            crate::provider::ExecTarget::Host if self.engine_is_local => {
                crate::provider::exec::run_local(request).await
            }
            crate::provider::ExecTarget::Host => Err(ProviderError::HostExecOnRemoteEngine {
                endpoint: self.connection.endpoint.clone(),
            }),
        }
    }

    fn describe(&self) -> String {
        format!("container {} ({})", self.name, short(&self.id))
    }

    fn base_url(&self) -> String {
        self.base_url.clone()
    }

    fn log(&self) -> &LogSink {
        &self.log
    }

    async fn exited(&self) -> ExitInfo {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(value) => value.clone().unwrap_or_else(unknown_exit),
            // The waiter is gone (the instance is being torn down): nothing more to know.
            Err(_) => unknown_exit(),
        }
    }

    fn exit_watch(&self) -> Option<crate::provider::ExitWatch> {
        Some(self.exit.clone())
    }

    fn facts(&self) -> Value {
        self.facts.clone()
    }

    async fn stop(mut self: Box<Self>) -> Result<(), ProviderError> {
        let grace = i32::try_from(self.stop_grace.as_secs()).unwrap_or(i32::MAX);
        let options = StopContainerOptionsBuilder::new().t(grace).build();
        // 304 (already stopped), 404 (gone) and timeouts all end in the forced removal below.
        if let Err(e) = self
            .connection
            .docker
            .stop_container(&self.id, Some(options))
            .await
        {
            tracing::debug!("stopping container {}: {e}", self.name);
        }
        let mut drained = self.drained.clone();
        if tokio::time::timeout(DRAIN_TIMEOUT, drained.wait_for(|d| *d))
            .await
            .is_err()
        {
            tracing::warn!(
                "logs of container {} did not drain within {DRAIN_TIMEOUT:?}",
                self.name
            );
        }
        self.log.flush();
        self.remove().await?;
        tracing::debug!("container {} stopped and removed", self.name);
        Ok(())
    }
}

impl Drop for DockerInstance {
    fn drop(&mut self) {
        if !self.removed {
            tracing::warn!(
                "container {} was not stopped explicitly; removing it",
                self.name
            );
            if let Err(e) = self.connection.remove_blocking(&self.id) {
                tracing::error!("could not remove container {}: {e}", self.name);
            }
            self.log.flush();
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
