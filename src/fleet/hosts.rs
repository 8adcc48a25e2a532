//! Remote hosts for a run: the hosts file turned into plan facts, one SSH connection pool
//! for the whole process, and a plan's hosts resolved and connected once ([`PlanHosts`]: by
//! name, the host's entry and its session), which then serve the pre-flight (every failure
//! together, nothing started), the Slurm login sessions, the per-host providers (remote
//! processes and remote Docker through a tunnel) and the host locks a task holds while it
//! runs.
//!
//! Does not own: SSH itself (`crate::ssh`), the providers (`crate::provider`), the run loop,
//! or exit codes (the caller maps [`HostError`] to them).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::providers::{Logins, RemoteProviders};
use super::slurm::{self, login_hosts};
use crate::hosts::{Host, HostsError, HostsFile, discover};
use crate::plan::preflight::remote_host_needs;
use crate::plan::{ClientHost, HostFacts, HostPlan, Plan, PlanContext, ProviderKind};
use crate::provider::docker::{DockerOptions, DockerProvider};
use crate::provider::reach::Reaching;
use crate::provider::ssh::{Reach, SshProvider};
use crate::shutdown::Shutdown;
use crate::ssh::{
    ConnectOptions, HostKeyPolicy, HostLock, HostReport, LockWait, Pool, PreflightError,
    RemoteDocker, Session, SshError, preflight,
};

/// Why a task's hosts cannot be used. [`HostError::is_bad_input`] tells the user's mistakes
/// (the hosts file, host keys, authentication) from failures of the run.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("no hosts file: pass --hosts FILE or create ./hosts.yaml")]
    NoHostsFile,
    #[error(transparent)]
    Hosts(#[from] HostsError),
    /// Some hosts could not be reached; one line per host.
    #[error("cannot reach the hosts of task `{task}`; nothing was started:\n{problems}")]
    Unreachable {
        task: String,
        problems: String,
        /// A host key or authentication problem (the user's to fix).
        bad_input: bool,
    },
    #[error("task `{task}`")]
    Preflight {
        task: String,
        #[source]
        source: PreflightError,
    },
    #[error(
        "task `{task}` waited {waited} for host `{host}` in vain (wait longer with `run --lock-wait`, or stop that task)"
    )]
    Busy {
        task: String,
        host: String,
        waited: String,
        #[source]
        source: Box<SshError>,
    },
    #[error(transparent)]
    Ssh(Box<SshError>),
    /// A host the plan uses that `connect` did not resolve (a bug).
    #[error("host `{host}` of task `{task}` was not connected")]
    NotConnected { task: String, host: String },
    /// Slurm's pre-flight found problems (or could not ask Slurm); one line each.
    #[error("pre-flight of task `{task}` on Slurm failed; nothing was started:\n{problems}")]
    Slurm {
        task: String,
        problems: String,
        /// The hosts file is at fault (a partition that does not exist, ...).
        bad_input: bool,
    },
}

impl From<SshError> for HostError {
    fn from(e: SshError) -> Self {
        HostError::Ssh(Box::new(e))
    }
}

impl HostError {
    /// The user must fix their input (hosts file, host keys, authentication).
    pub fn is_bad_input(&self) -> bool {
        match self {
            HostError::NoHostsFile | HostError::Hosts(_) => true,
            HostError::Unreachable { bad_input, .. } | HostError::Slurm { bad_input, .. } => {
                *bad_input
            }
            HostError::Preflight { .. }
            | HostError::Busy { .. }
            | HostError::Ssh(_)
            | HostError::NotConnected { .. } => false,
        }
    }
}

/// Overrides the lock file on every host; `{host}` is replaced by the host's name. For several
/// host entries that are really one machine (tests); by default all share
/// `/tmp/orchestrate-host.lock`, so one machine runs one task whatever it is called.
const LOCK_FILE_ENV: &str = "ORCHESTRATE_HOST_LOCK";

/// The hosts file of this invocation and the process-wide connection pool.
pub struct Remote {
    pub hosts: Option<HostsFile>,
    pub pool: Arc<Pool>,
    /// Local-only tasks queue on this (the host "local").
    local: Arc<tokio::sync::Mutex<()>>,
}

impl Remote {
    /// `--hosts FILE`, else `./hosts.yaml` when present, else none.
    pub fn load(path: Option<&Path>, accept_new_host_keys: bool) -> Result<Self, HostError> {
        let hosts = discover(path)?;
        let known_hosts = match &hosts {
            Some(h) => h.known_hosts.clone(),
            None => std::path::PathBuf::new(),
        };
        let mut options = ConnectOptions::new(known_hosts);
        if accept_new_host_keys {
            options.host_keys = HostKeyPolicy::AcceptNew;
        }
        Ok(Self {
            hosts,
            pool: Arc::new(Pool::new(options)),
            local: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// The plan context with this file's hosts and clusters.
    pub fn plan_context(&self) -> PlanContext {
        plan_context(self.hosts.as_ref())
    }

    fn file(&self) -> Result<&HostsFile, HostError> {
        self.hosts.as_ref().ok_or(HostError::NoHostsFile)
    }

    /// Resolve every remote host of `plan` (its instances' hosts, its client host, the login
    /// hosts of its Slurm clusters) in the hosts file and connect to all at once. Every
    /// failure is reported together and nothing is started. Host-key and authentication
    /// failures are bad input (exit 2); anything else (unreachable, handshake) fails the run
    /// (exit 1).
    pub async fn connect(&self, plan: &Plan) -> Result<PlanHosts, HostError> {
        let used = remote_hosts(plan);
        let mut names = used.clone();
        names.extend(login_hosts(plan).into_values());
        names.sort();
        names.dedup();
        let mut reached = PlanHosts {
            task: plan.task.clone(),
            used,
            hosts: BTreeMap::new(),
            pool: self.pool.clone(),
            local: self.local.clone(),
        };
        if names.is_empty() {
            return Ok(reached);
        }
        let file = self.file()?;
        let mut hosts = Vec::new();
        for name in &names {
            hosts.push(file.host(name)?.clone());
        }
        let results = join_all(hosts.iter().map(|h| self.pool.get(h))).await;
        let mut bad_input = false;
        let mut problems = Vec::new();
        for (host, result) in hosts.into_iter().zip(results) {
            match result {
                Ok(session) => {
                    reached.hosts.insert(host.name.clone(), (host, session));
                }
                Err(e) => {
                    bad_input |= matches!(
                        e,
                        SshError::UnknownHostKey { .. }
                            | SshError::ChangedHostKey { .. }
                            | SshError::Auth { .. }
                            | SshError::KnownHosts { .. }
                    );
                    problems.push(format!("  {}: {e}", host.name));
                }
            }
        }
        if !problems.is_empty() {
            return Err(HostError::Unreachable {
                task: plan.task.clone(),
                problems: problems.join("\n"),
                bad_input,
            });
        }
        Ok(reached)
    }
}

/// The remote hosts of one plan, resolved in the hosts file and connected once: by name, the
/// host's entry and its session. Everything a task does on its hosts goes through it.
pub struct PlanHosts {
    task: String,
    /// The hosts the plan places instances (or its client) on, by name: the ones it locks.
    used: Vec<String>,
    hosts: BTreeMap<String, (Host, Session)>,
    /// The pool the sessions came from (the pre-flight asks it, and finds them there).
    pool: Arc<Pool>,
    /// Local-only tasks queue on this (the host "local").
    local: Arc<tokio::sync::Mutex<()>>,
}

impl PlanHosts {
    /// The entry and session of host `name`, which `connect` resolved.
    fn get(&self, name: &str) -> Result<&(Host, Session), HostError> {
        self.hosts.get(name).ok_or_else(|| HostError::NotConnected {
            task: self.task.clone(),
            host: name.to_string(),
        })
    }

    /// Pre-flight every remote host of `plan` (tools, Docker, GPUs, ports), all at once, and
    /// its Slurm clusters; every failure together (exit 1), nothing started. The hosts'
    /// reports go into the manifest.
    pub async fn preflight(&self, plan: &Plan) -> Result<Vec<HostReport>, HostError> {
        slurm::preflight(plan, &self.slurm_logins(plan)?)
            .await
            .map_err(|failed| HostError::Slurm {
                task: plan.task.clone(),
                problems: failed.problems,
                bad_input: failed.bad_input,
            })?;
        if self.used.is_empty() {
            return Ok(Vec::new());
        }
        let checks = remote_host_needs(&plan.deployments)
            .into_iter()
            .map(|need| {
                let (host, _) = self.get(&need.host)?;
                Ok(need.on(host.clone()))
            })
            .collect::<Result<Vec<_>, HostError>>()?;
        preflight(&self.pool, &checks)
            .await
            .map_err(|source| HostError::Preflight {
                task: plan.task.clone(),
                source,
            })
    }

    /// Take the lock of every host the plan uses, in name order (so two tasks never
    /// deadlock), waiting up to `wait` for each. A local-only task takes the in-process lock
    /// of the host "local".
    pub async fn lock(&self, owner: &str, wait: Duration) -> Result<HeldLocks, HostError> {
        if self.used.is_empty() {
            return Ok(HeldLocks {
                remote: Vec::new(),
                _local: Some(self.local.clone().lock_owned().await),
            });
        }
        let mut remote = Vec::new();
        for name in &self.used {
            let (_, session) = self.get(name)?;
            let lock = match std::env::var(LOCK_FILE_ENV) {
                Ok(path) if !path.is_empty() => {
                    let path = path.replace("{host}", name);
                    HostLock::acquire_at(session, &path, owner, LockWait::For(wait)).await
                }
                _ => HostLock::acquire(session, owner, LockWait::For(wait)).await,
            };
            let lock = lock.map_err(|e| match e {
                busy @ SshError::HostBusy { .. } => HostError::Busy {
                    task: self.task.clone(),
                    host: name.clone(),
                    waited: crate::units::format_duration(wait),
                    source: Box::new(busy),
                },
                other => HostError::from(other),
            })?;
            remote.push(lock);
        }
        Ok(HeldLocks {
            remote,
            _local: None,
        })
    }

    /// Sessions to the login hosts of the Slurm clusters `plan` uses (`login:`), by cluster.
    fn slurm_logins(&self, plan: &Plan) -> Result<Logins, HostError> {
        let mut out = Logins::new();
        for (cluster, login) in login_hosts(plan) {
            let (_, session) = self.get(&login)?;
            out.insert(cluster, session.clone());
        }
        Ok(out)
    }

    /// A provider per (kind, host) the plan uses on remote hosts. Remote Docker clients keep
    /// their tunnels open in the returned value.
    pub async fn providers(
        &self,
        plan: &Plan,
        shutdown: &Shutdown,
    ) -> Result<RemoteProviders, HostError> {
        let mut out = RemoteProviders {
            slurm_logins: self.slurm_logins(plan)?,
            ..RemoteProviders::default()
        };
        if let ClientHost::Remote { name, .. } = &plan.client.host {
            out.client = Some(self.get(name)?.1.clone());
        }
        for (kind, name) in remote_uses(plan) {
            let (host, session) = self.get(&name)?;
            let session = session.clone();
            out.plain.entry(name.clone()).or_insert_with(|| {
                Arc::new(SshProvider::new(
                    session.clone(),
                    shutdown.clone(),
                    Reach::Direct,
                ))
            });
            match kind {
                ProviderKind::Docker => {
                    let remote = RemoteDocker::connect(&session).await?;
                    let options = DockerOptions {
                        host_label: name.clone(),
                        address: host.address.clone(),
                        engine_is_local: false,
                        ..DockerOptions::default()
                    };
                    let provider = DockerProvider::with_client(
                        remote.client().clone(),
                        shutdown.clone(),
                        options,
                    );
                    let provider = Reaching::new(Arc::new(provider), session, plan.client.reach);
                    out.docker.insert(name, (Arc::new(provider), remote));
                }
                _ => {
                    let provider =
                        SshProvider::new(session.clone(), shutdown.clone(), Reach::Direct);
                    let provider = Reaching::new(Arc::new(provider), session, plan.client.reach);
                    out.processes.insert(name, Arc::new(provider));
                }
            }
        }
        Ok(out)
    }
}

/// The plan context for `hosts` (none: every task must run locally).
pub fn plan_context(hosts: Option<&HostsFile>) -> PlanContext {
    let Some(file) = hosts else {
        return PlanContext::new();
    };
    let facts: BTreeMap<String, HostFacts> = file
        .hosts()
        .map(|h| {
            (
                h.name.clone(),
                HostFacts {
                    address: h.address.clone(),
                    gpus: h.gpus.as_ref().map(|g| g.count),
                    gpu_name: h.gpus.as_ref().map(|g| g.model.clone()),
                },
            )
        })
        .collect();
    let clusters = file
        .clusters()
        .map(|(name, members)| (name.to_string(), members.to_vec()))
        .collect();
    let slurm = file
        .slurm_clusters()
        .map(|c| (c.name.clone(), c.clone()))
        .collect();
    let kubernetes = file
        .kubernetes_clusters()
        .map(|c| (c.name.clone(), c.clone()))
        .collect();
    PlanContext::new()
        .with_hosts(facts)
        .with_clusters(clusters)
        .with_slurm(slurm)
        .with_kubernetes(kubernetes)
}

/// The remote hosts a plan places instances (or its client) on, sorted by name.
pub fn remote_hosts(plan: &Plan) -> Vec<String> {
    let mut names: Vec<String> = remote_uses(plan).into_iter().map(|(_, n)| n).collect();
    if let ClientHost::Remote { name, .. } = &plan.client.host {
        names.push(name.clone());
    }
    names.sort();
    names.dedup();
    names
}

/// `(provider kind, host name)` of every remote instance, deduplicated.
fn remote_uses(plan: &Plan) -> Vec<(ProviderKind, String)> {
    let mut uses = Vec::new();
    for role in plan.deployments.iter().flat_map(|d| &d.roles) {
        for instance in &role.instances {
            if let HostPlan::Remote { name, .. } = &instance.host {
                let key = (role.provider.clone(), name.clone());
                if !uses.contains(&key) {
                    uses.push(key);
                }
            }
        }
    }
    uses
}

/// The locks a running task holds; released (and confirmed by the hosts) by `release`, or
/// dropped on any other path.
pub struct HeldLocks {
    remote: Vec<HostLock>,
    _local: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl HeldLocks {
    pub async fn release(self) {
        for lock in self.remote {
            lock.release().await;
        }
    }
}
