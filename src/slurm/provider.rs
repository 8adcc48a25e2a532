//! Instances on Slurm nodes: each is a job step of the deployment's allocation,
//! `srun --jobid J --nodelist N --ntasks 1 --overlap [GPUs] [pyxis] sh -e -c CMD`, run where
//! the cluster is driven from: a local child process of the local provider, or a remote
//! process group of the ssh provider on the login host (either way: own process group, log
//! streaming, SIGTERM-then-SIGKILL stop and forced-exit kill), so the step's output streams
//! into the instance's log. The server is at the node's address (reached through the login
//! host by the runner's reach wrapper when there is one). When a step ends because
//! its job ended (time limit, node failure, `scancel` from outside), the job's state and
//! reason are written into the instance's log, which the deployment's failure quotes.

use std::sync::Arc;

use async_trait::async_trait;

use super::Node;
use super::allocation::end_state;
use super::cli::{SlurmHost, login_env};
use super::commands::{self, StepContainer};
use crate::hosts::{SlurmCluster, SlurmContainer};
use crate::provider::{
    ExecOutput, ExecRequest, ExitInfo, ExitWatch, Instance, LaunchRequest, LogSink, Provider,
    ProviderError,
};

/// Starts instances on one node of one allocation.
pub struct SlurmProvider {
    /// Starts the `srun` processes: the local provider, or the ssh provider on the login host.
    local: Arc<dyn Provider>,
    host: SlurmHost,
    cluster: SlurmCluster,
    job: String,
    node: Node,
}

impl SlurmProvider {
    /// Steps of `job` on `node`, started through `local` (which runs processes on `host`).
    pub fn new(
        (local, host): (Arc<dyn Provider>, SlurmHost),
        cluster: SlurmCluster,
        job: &str,
        node: Node,
    ) -> Self {
        Self {
            local,
            host,
            cluster,
            job: job.to_string(),
            node,
        }
    }

    /// The `srun` line that runs `commands` (and, under pyxis, `image` with `volumes`);
    /// `share`: the GPUs of one of several processes of the node.
    pub fn step(
        &self,
        share: Option<u32>,
        commands: &[String],
        image: Option<&str>,
        volumes: &[crate::deploy::VolumeMount],
    ) -> Result<Vec<String>, ProviderError> {
        let container = match (image, self.cluster.container) {
            (None, _) => None,
            (Some(image), SlurmContainer::Pyxis) => Some(StepContainer::new(image, volumes)),
            (Some(image), SlurmContainer::None) => {
                return Err(ProviderError::Other {
                    message: format!(
                        "the role has an image (`{image}`) but Slurm cluster `{}` runs no containers; set `{}: pyxis` in the hosts file, or drop the role's image",
                        self.cluster.name,
                        self.cluster.key("container")
                    ),
                });
            }
        };
        Ok(commands::srun(
            &self.cluster,
            &self.job,
            &self.node.name,
            share,
            container.as_ref(),
            &commands.join("\n"),
        ))
    }
}

#[async_trait]
impl Provider for SlurmProvider {
    fn name(&self) -> String {
        format!("slurm:{}:{}", self.cluster.name, self.node.name)
    }

    async fn launch(&self, request: LaunchRequest) -> Result<Box<dyn Instance>, ProviderError> {
        let share = request
            .place
            .proc_rank
            .map(|_| request.resources.gpu.as_ref().map_or(0, |g| g.count));
        let argv = self.step(
            share,
            &request.commands,
            request.image.as_deref(),
            &request.volumes,
        )?;
        let line = commands::display(&argv);
        request
            .log
            .line(&format!("[orchestrate] slurm job {}: {line}", self.job));
        let port = request.port;
        let mut env = request.env.clone();
        if matches!(self.host, SlurmHost::Login(_)) {
            env.extend(login_env());
        }
        let request = LaunchRequest {
            commands: vec![format!("exec {line}")],
            image: None,
            env,
            ..request
        };
        let inner = self.local.launch(request).await?;
        // Once the step's process exits, note how the job stands (a job Slurm ended says
        // why) in the log, then report the exit: in a task of its own, so no dropped
        // `exited()` future can lose the note. A job Slurm ends while the step's srun
        // lingers (KillWait) kills the step's srun at once, so the deployment fails now.
        let (noted_tx, noted) = tokio::sync::watch::channel(false);
        match inner.exit_watch() {
            Some(mut exit) => {
                let job = self.job.clone();
                let host = self.host.clone();
                let log = inner.log().clone();
                // The step's srun is a local process group only without a login host; on a
                // login host it lingers until Slurm's KillWait (the deployment then fails
                // after its point, the server being down).
                let pgid = match self.host {
                    SlurmHost::Here => inner.facts()["pgid"]
                        .as_i64()
                        .and_then(|p| i32::try_from(p).ok()),
                    SlurmHost::Login(_) => None,
                };
                let mut ended = super::watch::job_end(&self.host, &self.cluster.name, &job);
                tokio::spawn(async move {
                    let job_ended = tokio::select! {
                        _ = exit.wait_for(Option::is_some) => false,
                        r = ended.wait_for(Option::is_some) => r.is_ok(),
                    };
                    let state = if job_ended {
                        ended.borrow().clone()
                    } else {
                        end_state(&host, &job).await
                    };
                    if let Some(state) = state {
                        log.line(&format!("[orchestrate] slurm job {job} ended: {state}"));
                        if let Some(pgid) = pgid.filter(|_| exit.borrow().is_none()) {
                            crate::provider::watchdog::kill_group(pgid, libc::SIGKILL);
                        }
                    }
                    let _ = noted_tx.send(true);
                });
            }
            None => {
                let _ = noted_tx.send(true);
            }
        }
        Ok(Box::new(SlurmInstance {
            inner,
            job: self.job.clone(),
            cluster: self.cluster.name.clone(),
            node: self.node.clone(),
            login: self.cluster.login.clone(),
            base_url: format!("http://{}:{port}", self.node.address),
            noted,
        }))
    }

    async fn host_facts(&self) -> serde_json::Value {
        serde_json::json!({
            "slurm": {
                "cluster": self.cluster.name, "job_id": self.job, "node": self.node,
                "login": self.cluster.login,
            },
        })
    }
}

/// A job step, seen as the server it runs.
struct SlurmInstance {
    inner: Box<dyn Instance>,
    job: String,
    cluster: String,
    node: Node,
    login: Option<String>,
    base_url: String,
    /// True once the step has exited and the job's end (if it ended) is in the log.
    noted: tokio::sync::watch::Receiver<bool>,
}

#[async_trait]
impl Instance for SlurmInstance {
    fn describe(&self) -> String {
        format!(
            "slurm job {} step on {} ({})",
            self.job,
            self.node.name,
            self.inner.describe()
        )
    }

    fn base_url(&self) -> String {
        self.base_url.clone()
    }

    fn log(&self) -> &LogSink {
        self.inner.log()
    }

    async fn exited(&self) -> ExitInfo {
        let exit = self.inner.exited().await;
        let mut noted = self.noted.clone();
        // Bounded: scontrol answers in milliseconds, or times out on its own.
        let _ = tokio::time::timeout(
            super::cli::COMMAND_TIMEOUT + std::time::Duration::from_secs(1),
            noted.wait_for(|done| *done),
        )
        .await;
        exit
    }

    fn facts(&self) -> serde_json::Value {
        let mut facts = self.inner.facts();
        if let Some(map) = facts.as_object_mut() {
            map.insert("provider".into(), "slurm".into());
            map.insert(
                "slurm".into(),
                serde_json::json!({
                    "cluster": self.cluster,
                    "job_id": self.job,
                    "node": self.node.name,
                    "address": self.node.address,
                    "login": self.login,
                }),
            );
        }
        facts
    }

    fn exit_watch(&self) -> Option<ExitWatch> {
        self.inner.exit_watch()
    }

    async fn ready(&self) {
        self.inner.ready().await;
    }

    async fn stop(self: Box<Self>) -> Result<(), ProviderError> {
        self.inner.stop().await
    }

    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, ProviderError> {
        self.inner.exec(request).await
    }
}
