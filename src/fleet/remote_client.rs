//! The client on a host of the cluster (`client: {host: H}`): our binary is installed there
//! once per run, and each point runs `orchestrate client-agent` over SSH against the server's
//! address as seen from that host. Prompts are built here (with the tokenizer, as for a local
//! client) and sent with the load; records come back one JSON line each and go to the same
//! observer as local records (requests.jsonl written as the point runs, progress events), so
//! the point is summarized exactly like a local one.
//!
//! Teardown: Ctrl-C sends `cancel` (in-flight requests end as `cancelled` and still come
//! back); dropping the point (the server died, a forced exit) closes the agent's stdin, which
//! makes it exit, and kills its pid; a dropped connection closes its stdin as well.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::client::{ClientConfig, MetricsSource, Observer, Prompt, RunOutcome};
use crate::client_agent::{AgentLoad, AgentMessage, CANCEL};
use crate::plan::{ClientHost, DeploymentPlan, HostPlan, InstancePlan, Plan};
use crate::shutdown::{KillRegistration, Shutdown};
use crate::ssh::{CommandEvent, Session, SshError, StdinCloser, quote};

/// Overrides the directory our binary is installed in on the client host (default
/// `/tmp/orchestrate/bin`); tests use it to tell their agents apart.
const BIN_DIR_ENV: &str = "ORCHESTRATE_REMOTE_BIN_DIR";

/// Stderr lines of the agent kept for error messages.
const STDERR_TAIL: usize = 20;

/// Why the client on the client host cannot be used, or failed a point.
#[derive(Debug, thiserror::Error)]
pub enum RemoteClientError {
    /// The plan names a client host the run has no session to.
    #[error("no ssh session to the client host `{0}`")]
    NoSession(String),
    #[error("cannot find the running executable: {0}")]
    NoExecutable(std::io::Error),
    #[error("cannot install the client on {host}: {error}")]
    Install { host: String, error: SshError },
    /// The agent failed, or the session to it did, during a point.
    #[error("the client on {host}: {reason}")]
    Lost { host: String, reason: String },
}

/// Our binary installed on the client host.
pub struct RemoteClient {
    session: Session,
    binary: String,
    uploaded: bool,
    shutdown: Shutdown,
}

impl RemoteClient {
    /// Install this executable on `session`'s host (skipped when the same content is there).
    async fn install(session: Session, shutdown: Shutdown) -> Result<Self, RemoteClientError> {
        let exe = std::env::current_exe().map_err(RemoteClientError::NoExecutable)?;
        let dir = std::env::var(BIN_DIR_ENV)
            .ok()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| crate::ssh::REMOTE_BIN_DIR.to_string());
        let installed = crate::ssh::install_binary_in(&session, &exe, &dir)
            .await
            .map_err(|error| RemoteClientError::Install {
                host: session.host().name.clone(),
                error,
            })?;
        Ok(Self {
            session,
            binary: installed.path,
            uploaded: installed.uploaded,
            shutdown,
        })
    }

    /// For the manifest: where the client runs and which binary.
    pub fn facts(&self) -> serde_json::Value {
        serde_json::json!({
            "role": "client",
            "host": self.session.host().name,
            "address": self.session.host().address,
            "binary": self.binary,
            "uploaded": self.uploaded,
        })
    }

    fn host(&self) -> &str {
        &self.session.host().name
    }

    /// Run one point's load on the host against `server_url`; records go to `observer` as
    /// they arrive.
    async fn run(
        &self,
        config: &ClientConfig,
        server_url: &str,
        prompts: Vec<Prompt>,
        observer: Arc<dyn Observer>,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RemoteClientError> {
        let host = self.host().to_string();
        let lost = |e: &dyn std::fmt::Display| RemoteClientError::Lost {
            host: host.clone(),
            reason: e.to_string(),
        };
        let mut line = serde_json::to_vec(&AgentLoad::new(config, server_url, prompts))
            .map_err(|e| lost(&e))?;
        line.push(b'\n');
        let command = format!("exec {} client-agent", quote(&self.binary));
        let mut agent = self.session.exec(&command).await.map_err(|e| lost(&e))?;
        let mut guard = AgentGuard {
            stdin: agent.stdin_closer(),
            session: self.session.clone(),
            pid: None,
            _registration: None,
            finished: false,
        };
        agent.write_stdin(&line).await.map_err(|e| lost(&e))?;
        drop(line);
        let mut pending = Vec::new();
        let mut records = Vec::new();
        let mut stderr: VecDeque<String> = VecDeque::new();
        let mut finished = None;
        let mut failed = None;
        let mut cancel_sent = false;
        let exit = loop {
            enum Next {
                Cancel,
                Event(Option<CommandEvent>),
            }
            let next = tokio::select! {
                _ = cancel.cancelled(), if !cancel_sent => Next::Cancel,
                event = agent.next() => Next::Event(event),
            };
            let event = match next {
                Next::Cancel => {
                    cancel_sent = true;
                    let _ = agent.write_stdin(format!("{CANCEL}\n").as_bytes()).await;
                    continue;
                }
                Next::Event(event) => event,
            };
            match event {
                Some(CommandEvent::Stdout(bytes)) => {
                    pending.extend_from_slice(&bytes);
                    while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                        let text: Vec<u8> = pending.drain(..=end).collect();
                        let message: AgentMessage = serde_json::from_slice(&text).map_err(|e| {
                            lost(&format!(
                                "unreadable output `{}`: {e}",
                                String::from_utf8_lossy(&text).trim()
                            ))
                        })?;
                        match message {
                            AgentMessage::Started { pid } => guard.started(pid, &self.shutdown),
                            AgentMessage::Record(record) => {
                                observer.on_record(&record);
                                records.push(record);
                            }
                            AgentMessage::Progress(p) => observer.on_progress(&(&p).into()),
                            AgentMessage::Finished(outcome) => finished = Some(outcome),
                            AgentMessage::Failed { error } => failed = Some(error),
                        }
                    }
                }
                Some(CommandEvent::Stderr(bytes)) => {
                    for l in String::from_utf8_lossy(&bytes).lines() {
                        if stderr.len() == STDERR_TAIL {
                            stderr.pop_front();
                        }
                        stderr.push_back(l.to_string());
                    }
                }
                Some(CommandEvent::Exit(exit)) => break exit,
                Some(CommandEvent::Failed(e)) => return Err(lost(&e)),
                None => return Err(lost(&"lost the ssh session")),
            }
        };
        guard.finished = true;
        if let Some(error) = failed {
            return Err(lost(&error));
        }
        match finished {
            Some(outcome) => Ok(outcome.with_records(records)),
            None => Err(lost(&format!(
                "exited (code {}{}) before finishing; stderr:\n{}",
                exit.code,
                exit.signal
                    .map(|s| format!(", signal {s}"))
                    .unwrap_or_default(),
                stderr
                    .iter()
                    .map(|l| format!("  | {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ))),
        }
    }
}

/// Owns a running agent: unless it finished, dropping it closes the agent's stdin (it exits)
/// and kills its pid.
struct AgentGuard {
    stdin: StdinCloser,
    session: Session,
    pid: Option<u32>,
    _registration: Option<KillRegistration>,
    finished: bool,
}

impl AgentGuard {
    fn started(&mut self, pid: u32, shutdown: &Shutdown) {
        self.pid = Some(pid);
        let session = self.session.clone();
        self._registration = Some(shutdown.register(
            format!("client agent {pid} on {}", session.host().name),
            move || {
                session.run_blocking(&format!("kill -KILL {pid}"), Duration::from_secs(3));
            },
        ));
    }
}

impl Drop for AgentGuard {
    fn drop(&mut self) {
        self.stdin.close();
        if self.finished {
            return;
        }
        if let Some(pid) = self.pid {
            tracing::warn!(
                "client agent {pid} on {} dropped before it finished: killing it",
                self.session.host().name
            );
            self.session.spawn_detached(&format!("kill -KILL {pid}"));
        }
    }
}

/// The client of one deployment on a remote host: the installed agent and the server's URL
/// as seen from there, and those of the deployment's other instances (scraped for the time
/// series).
pub struct RemoteSite {
    client: Arc<RemoteClient>,
    server_url: String,
    metrics_sources: Vec<MetricsSource>,
}

impl RemoteSite {
    pub fn host(&self) -> &str {
        self.client.host()
    }

    pub async fn run(
        &self,
        config: &ClientConfig,
        prompts: Vec<Prompt>,
        observer: Arc<dyn Observer>,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, RemoteClientError> {
        let mut config = config.clone();
        config.metrics_sources = self.metrics_sources.clone();
        self.client
            .run(&config, &self.server_url, prompts, observer, cancel)
            .await
    }
}

/// The client of a run: here, or installed on a host, or why it could not be.
pub enum RunClient {
    Here,
    Remote(Arc<RemoteClient>),
    /// `client.host` names a host the client cannot run on; every point fails with this.
    Unusable(RemoteClientError),
}

impl RunClient {
    /// Install the client on `plan`'s client host, if it names one (`session`: the run's
    /// session to it).
    pub async fn prepare(plan: &Plan, session: Option<Session>, shutdown: &Shutdown) -> Self {
        let ClientHost::Remote { name, .. } = &plan.client.host else {
            return RunClient::Here;
        };
        let Some(session) = session else {
            return RunClient::Unusable(RemoteClientError::NoSession(name.clone()));
        };
        match RemoteClient::install(session, shutdown.clone()).await {
            Ok(client) => RunClient::Remote(Arc::new(client)),
            Err(e) => RunClient::Unusable(e),
        }
    }

    /// The client of one deployment (`None`: here); the error is its points' error.
    pub fn site(&self, deployment: &DeploymentPlan) -> Option<Result<RemoteSite, String>> {
        let client = match self {
            RunClient::Here => return None,
            RunClient::Remote(c) => c.clone(),
            RunClient::Unusable(e) => return Some(Err(e.to_string())),
        };
        Some(
            server_url(client.host(), deployment).map(|server_url| RemoteSite {
                client,
                metrics_sources: other_instances(deployment, &server_url),
                server_url,
            }),
        )
    }
}

/// An instance's URL as seen from another host: its address from the hosts file and its
/// port; `None` for one on this machine.
fn remote_url(instance: &InstancePlan) -> Option<String> {
    match &instance.host {
        HostPlan::Remote { address, .. } => Some(format!("http://{address}:{}", instance.port)),
        HostPlan::Slurm(slurm) => Some(format!("http://{}:{}", slurm.address, instance.port)),
        HostPlan::Local | HostPlan::Kubernetes(_) => None,
    }
}

/// Every instance of `deployment` other than the entry (`entry_url`) that the client host can
/// reach, by its key (`<role>-<index>`).
fn other_instances(deployment: &DeploymentPlan, entry_url: &str) -> Vec<MetricsSource> {
    deployment
        .roles
        .iter()
        .flat_map(|role| {
            role.instances.iter().filter_map(move |i| {
                let url = remote_url(i).filter(|u| u != entry_url)?;
                Some(MetricsSource {
                    name: format!("{}-{}", role.name, i.index),
                    base_url: url,
                })
            })
        })
        .collect()
}

/// The entry server's URL as seen from the client host: its address from the hosts file and
/// its port. A server on this machine is not reachable from a remote client.
fn server_url(client_host: &str, deployment: &DeploymentPlan) -> Result<String, String> {
    let role = deployment
        .roles
        .iter()
        .find(|r| r.name == deployment.entry_role)
        .or(deployment.roles.first())
        .ok_or("the deployment has no roles")?;
    let instance = role
        .instances
        .first()
        .ok_or("the entry role has no instances")?;
    if let HostPlan::Kubernetes(place) = &instance.host {
        return Err(format!(
            "the client runs on `{client_host}` but the server is a pod of Kubernetes cluster `{}`; \
             a remote client does not reach pods yet: remove `client.host`",
            place.cluster.name
        ));
    }
    remote_url(instance).ok_or_else(|| {
        format!(
            "the client runs on `{client_host}` but the server runs on this machine; place the \
             server on a host of the hosts file (`hosts:`) or remove `client.host`"
        )
    })
}
