//! The allocation of one deployment: `salloc --no-shell` (the job id is known from salloc's
//! first line, before the nodes are granted, so it is recorded and guarded at once), the
//! wait until the job runs, its nodes and their addresses, and `scancel` on every path:
//! [`Allocation::release`] (cancel and wait until the job has left the queue), `Drop` (cancel
//! without waiting) and a forced exit (the shutdown registry). Every command runs on the
//! cluster's [`SlurmHost`] (this machine or its login host over SSH).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::SlurmError;
use super::cli::{SlurmHost, output, remote_line, scancel_blocking, scancel_detached};
use super::commands::{self, describe_state, parse_fields};
use crate::hosts::SlurmCluster;
use crate::shutdown::{KillRegistration, Shutdown};

/// How long a granted job may take to be RUNNING (nodes booting, prolog).
pub const RUNNING_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `release` waits for a cancelled job to leave the queue.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(250);

/// One allocated node: its Slurm name and the address servers on it are reached at.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    pub name: String,
    pub address: String,
}

/// Cancels the job unless released: `Drop` and the forced-exit hook.
struct JobGuard {
    job: String,
    host: SlurmHost,
    released: bool,
    _registration: KillRegistration,
}

impl JobGuard {
    fn new(job: &str, host: &SlurmHost, shutdown: &Shutdown) -> Self {
        let id = job.to_string();
        let on = host.clone();
        let registration = shutdown.register(format!("slurm job {job}"), move || {
            scancel_blocking(&on, &id);
        });
        Self {
            job: job.to_string(),
            host: host.clone(),
            released: false,
            _registration: registration,
        }
    }
}

impl Drop for JobGuard {
    fn drop(&mut self) {
        if !self.released {
            tracing::warn!(
                "slurm job {} dropped without release: cancelling it",
                self.job
            );
            scancel_detached(&self.host, &self.job);
        }
    }
}

/// A submitted allocation whose nodes may not be granted yet.
pub struct PendingAllocation {
    cluster: SlurmCluster,
    salloc: Salloc,
    stderr: Vec<String>,
    guard: JobGuard,
}

/// The running `salloc`: a local child (its stderr read line by line) or a command on the
/// login host (its output, both streams, split into lines).
enum Salloc {
    Here {
        child: Box<tokio::process::Child>,
        lines: Box<tokio::io::Lines<BufReader<tokio::process::ChildStderr>>>,
    },
    Login {
        command: crate::ssh::RemoteCommand,
        buffer: Vec<u8>,
        exit: Option<Result<crate::ssh::RemoteExit, String>>,
    },
}

impl Salloc {
    /// Start `argv` on `host`.
    async fn start(host: &SlurmHost, argv: &[String]) -> Result<Self, SlurmError> {
        let command = commands::display(argv);
        match host {
            SlurmHost::Here => {
                let mut child = tokio::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|source| SlurmError::Spawn { command, source })?;
                let lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
                Ok(Salloc::Here {
                    child: Box::new(child),
                    lines: Box::new(lines),
                })
            }
            SlurmHost::Login(session) => {
                let remote =
                    session
                        .exec(&remote_line(argv))
                        .await
                        .map_err(|source| SlurmError::Ssh {
                            command,
                            host: session.host().name.clone(),
                            source: Box::new(source),
                        })?;
                remote.close_stdin();
                Ok(Salloc::Login {
                    command: remote,
                    buffer: Vec::new(),
                    exit: None,
                })
            }
        }
    }

    /// The next line salloc prints; `None` once it has ended.
    async fn next_line(&mut self) -> Option<String> {
        match self {
            Salloc::Here { lines, .. } => lines.next_line().await.ok().flatten(),
            Salloc::Login {
                command,
                buffer,
                exit,
            } => loop {
                if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    return Some(String::from_utf8_lossy(&line).trim_end().to_string());
                }
                if exit.is_some() {
                    if buffer.is_empty() {
                        return None;
                    }
                    let line = String::from_utf8_lossy(buffer).trim_end().to_string();
                    buffer.clear();
                    return Some(line);
                }
                match command.next().await {
                    Some(
                        crate::ssh::CommandEvent::Stdout(b) | crate::ssh::CommandEvent::Stderr(b),
                    ) => {
                        buffer.extend(b);
                    }
                    Some(crate::ssh::CommandEvent::Exit(e)) => *exit = Some(Ok(e)),
                    Some(crate::ssh::CommandEvent::Failed(e)) => *exit = Some(Err(e.to_string())),
                    None => *exit = Some(Err("the ssh session was lost".to_string())),
                }
            },
        }
    }

    /// Wait for salloc's end (reading what it still prints); `Ok` when it succeeded, else
    /// how it ended.
    async fn wait(&mut self, stderr: &mut Vec<String>) -> Result<(), String> {
        while let Some(line) = self.next_line().await {
            stderr.push(line);
        }
        match self {
            Salloc::Here { child, .. } => match child.wait().await {
                Ok(s) if s.success() => Ok(()),
                Ok(s) => Err(s.to_string()),
                Err(e) => Err(e.to_string()),
            },
            Salloc::Login { exit, .. } => match exit.take() {
                Some(Ok(e)) if e.code == 0 && e.signal.is_none() => Ok(()),
                Some(Ok(e)) => Err(format!("exit code {} signal {:?}", e.code, e.signal)),
                Some(Err(e)) => Err(e),
                None => Err("no exit status".to_string()),
            },
        }
    }
}

/// A granted, running allocation. Release it with [`Allocation::release`].
pub struct Allocation {
    pub cluster: SlurmCluster,
    pub job: String,
    /// The nodes, in Slurm's order.
    pub nodes: Vec<Node>,
    guard: JobGuard,
}

impl PendingAllocation {
    /// Submit `salloc --no-shell` for `nodes` nodes (with room for `per_node` processes on
    /// each) on `host` and read until Slurm names the job.
    pub async fn submit(
        cluster: &SlurmCluster,
        host: &SlurmHost,
        (nodes, per_node, name, comment): (usize, usize, &str, &str),
        shutdown: &Shutdown,
    ) -> Result<Self, SlurmError> {
        let argv = commands::salloc(cluster, (nodes, per_node), name, comment);
        let command = commands::display(&argv);
        let mut salloc = Salloc::start(host, &argv).await?;
        let mut stderr = Vec::new();
        while let Some(line) = salloc.next_line().await {
            if let Some(job) = commands::parse_allocation_line(&line) {
                stderr.push(line);
                return Ok(Self {
                    cluster: cluster.clone(),
                    salloc,
                    stderr,
                    guard: JobGuard::new(&job, host, shutdown),
                });
            }
            stderr.push(line);
        }
        let status = match salloc.wait(&mut stderr).await {
            Ok(()) => "exit code 0".to_string(),
            Err(status) => status,
        };
        Err(SlurmError::Failed {
            command,
            status,
            stderr: stderr.join("\n"),
        })
    }

    /// The job id (known before the nodes are granted).
    pub fn job(&self) -> &str {
        &self.guard.job
    }

    /// Wait until salloc has the nodes and the job runs, then read its nodes. Cancelled
    /// (Ctrl-C) or failed, the job is cancelled.
    pub async fn granted(
        mut self,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Allocation, SlurmError> {
        let waited = self.salloc.wait(&mut self.stderr);
        let status = tokio::select! {
            status = waited => status,
            () = cancel.cancelled() => {
                return Err(SlurmError::Other(format!(
                    "cancelled while waiting for slurm job {} to be granted",
                    self.guard.job
                )));
            }
        };
        if let Err(status) = status {
            return Err(SlurmError::Failed {
                command: "salloc".into(),
                status,
                stderr: self.stderr.join("\n"),
            });
        }
        let job = self.guard.job.clone();
        let host = self.guard.host.clone();
        let list = wait_running(&host, &job, cancel).await?;
        let names = output(&host, &commands::hostnames(&list)).await?;
        let mut nodes = Vec::new();
        for name in names.lines().map(str::trim).filter(|n| !n.is_empty()) {
            let fields = parse_fields(output(&host, &commands::show_node(name)).await?.trim());
            let address = fields
                .get("NodeAddr")
                .filter(|a| !a.is_empty())
                .cloned()
                .unwrap_or_else(|| name.to_string());
            nodes.push(Node {
                name: name.to_string(),
                address,
            });
        }
        Ok(Allocation {
            cluster: self.cluster,
            job,
            nodes,
            guard: self.guard,
        })
    }
}

/// Poll until `job` is RUNNING; its node list. A job that ends first is an error with its
/// state and reason.
async fn wait_running(
    host: &SlurmHost,
    job: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<String, SlurmError> {
    let deadline = tokio::time::Instant::now() + RUNNING_TIMEOUT;
    loop {
        let fields = parse_fields(output(host, &commands::show_job(job)).await?.trim());
        match fields.get("JobState").map(String::as_str) {
            Some("RUNNING") => {
                return fields.get("NodeList").cloned().ok_or_else(|| {
                    SlurmError::Other(format!("slurm job {job} runs on no NodeList"))
                });
            }
            Some("PENDING" | "CONFIGURING") | None => {}
            Some(_) => {
                return Err(SlurmError::Other(format!(
                    "slurm job {job} ended before it ran: {}",
                    describe_state(&fields)
                )));
            }
        }
        if tokio::time::Instant::now() >= deadline || cancel.is_cancelled() {
            return Err(SlurmError::Other(format!(
                "slurm job {job} was not RUNNING within {} s: {}",
                RUNNING_TIMEOUT.as_secs(),
                describe_state(&fields)
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How `job` ended, when it no longer runs: `JobState=CANCELLED Reason=None`; `None` while
/// it is RUNNING. A job that is ending shows COMPLETING until its steps are gone: that is
/// waited out (up to [`END_STATE_WAIT`]) for the final state.
pub async fn end_state(host: &SlurmHost, job: &str) -> Option<String> {
    let deadline = tokio::time::Instant::now() + END_STATE_WAIT;
    loop {
        let fields = match output(host, &commands::show_job(job)).await {
            Ok(text) => parse_fields(text.trim()),
            Err(e) => return Some(format!("the job is no longer known to Slurm ({e})")),
        };
        match fields.get("JobState").map(String::as_str) {
            Some("RUNNING") | None => return None,
            Some("COMPLETING") if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(POLL).await;
            }
            Some(_) => return Some(describe_state(&fields)),
        }
    }
}

/// How long [`end_state`] waits for an ending (COMPLETING) job's final state.
pub const END_STATE_WAIT: Duration = Duration::from_secs(5);

impl Allocation {
    /// `scancel` the job and wait (bounded) until it has left the queue.
    pub async fn release(mut self) -> Result<(), SlurmError> {
        self.guard.released = true;
        let job = self.job.clone();
        let host = self.guard.host.clone();
        if let Err(e) = output(&host, &commands::scancel(&job)).await
            && end_state(&host, &job).await.is_none()
        {
            // Still running and not cancelled: report it (the guard is disarmed, so cancel
            // once more without waiting).
            scancel_detached(&host, &job);
            return Err(e);
        }
        let deadline = tokio::time::Instant::now() + RELEASE_TIMEOUT;
        loop {
            if end_state(&host, &job).await.is_some() && !queued(&host, &job).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(SlurmError::Other(format!(
                    "slurm job {job} still in the queue {} s after scancel",
                    RELEASE_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Where the cluster's Slurm commands run.
    pub fn host(&self) -> &SlurmHost {
        &self.guard.host
    }

    /// What the manifest records.
    pub fn record(&self, name: &str, comment: &str) -> serde_json::Value {
        serde_json::json!({
            "cluster": self.cluster.name,
            "partition": self.cluster.partition,
            "job_id": self.job,
            "job_name": name,
            "comment": comment,
            "nodes": self.nodes,
            "login": self.cluster.login,
        })
    }
}

/// `squeue` still lists `job` (in any state).
async fn queued(host: &SlurmHost, job: &str) -> bool {
    let argv: Vec<String> = ["squeue", "-h", "-j", job, "-o", "%T"]
        .map(String::from)
        .to_vec();
    match output(host, &argv).await {
        Ok(text) => !text.trim().is_empty(),
        Err(_) => false,
    }
}
