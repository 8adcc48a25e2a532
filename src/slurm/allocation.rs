//! The allocation of one deployment: `salloc --no-shell` (the job id is known from salloc's
//! first line, before the nodes are granted, so it is recorded and guarded at once), the
//! wait until the job runs, its nodes and their addresses, and `scancel` on every path:
//! [`Allocation::release`] (cancel and wait until the job has left the queue), `Drop` (cancel
//! without waiting) and a forced exit (the shutdown registry).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::SlurmError;
use super::cli::{output, scancel_blocking, scancel_detached};
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
    released: bool,
    _registration: KillRegistration,
}

impl JobGuard {
    fn new(job: &str, shutdown: &Shutdown) -> Self {
        let id = job.to_string();
        let registration = shutdown.register(format!("slurm job {job}"), move || {
            scancel_blocking(&id);
        });
        Self {
            job: job.to_string(),
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
            scancel_detached(&self.job);
        }
    }
}

/// A submitted allocation whose nodes may not be granted yet.
pub struct PendingAllocation {
    cluster: SlurmCluster,
    salloc: tokio::process::Child,
    stderr: Vec<String>,
    lines: Option<tokio::io::Lines<BufReader<tokio::process::ChildStderr>>>,
    guard: JobGuard,
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
    /// Submit `salloc --no-shell` for `nodes` nodes and read until Slurm names the job.
    pub async fn submit(
        cluster: &SlurmCluster,
        nodes: usize,
        name: &str,
        comment: &str,
        shutdown: &Shutdown,
    ) -> Result<Self, SlurmError> {
        let argv = commands::salloc(cluster, nodes, name, comment);
        let command = commands::display(&argv);
        let mut salloc = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| SlurmError::Spawn {
                command: command.clone(),
                source,
            })?;
        let mut lines = BufReader::new(salloc.stderr.take().expect("stderr piped")).lines();
        let mut stderr = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(job) = commands::parse_allocation_line(&line) {
                stderr.push(line);
                return Ok(Self {
                    cluster: cluster.clone(),
                    salloc,
                    stderr,
                    lines: Some(lines),
                    guard: JobGuard::new(&job, shutdown),
                });
            }
            stderr.push(line);
        }
        let status = salloc
            .wait()
            .await
            .map_or_else(|e| e.to_string(), |s| s.to_string());
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
        let mut lines = self.lines.take().expect("lines until granted");
        let waited = async {
            while let Ok(Some(line)) = lines.next_line().await {
                self.stderr.push(line);
            }
            self.salloc.wait().await
        };
        let status = tokio::select! {
            status = waited => status,
            () = cancel.cancelled() => {
                return Err(SlurmError::Other(format!(
                    "cancelled while waiting for slurm job {} to be granted",
                    self.guard.job
                )));
            }
        };
        match status {
            Ok(s) if s.success() => {}
            other => {
                return Err(SlurmError::Failed {
                    command: "salloc".into(),
                    status: other.map_or_else(|e| e.to_string(), |s| s.to_string()),
                    stderr: self.stderr.join("\n"),
                });
            }
        }
        let job = self.guard.job.clone();
        let list = wait_running(&job, cancel).await?;
        let names = output(&commands::hostnames(&list)).await?;
        let mut nodes = Vec::new();
        for name in names.lines().map(str::trim).filter(|n| !n.is_empty()) {
            let fields = parse_fields(output(&commands::show_node(name)).await?.trim());
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
    job: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<String, SlurmError> {
    let deadline = tokio::time::Instant::now() + RUNNING_TIMEOUT;
    loop {
        let fields = parse_fields(output(&commands::show_job(job)).await?.trim());
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
pub async fn end_state(job: &str) -> Option<String> {
    let deadline = tokio::time::Instant::now() + END_STATE_WAIT;
    loop {
        let fields = match output(&commands::show_job(job)).await {
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
        if let Err(e) = output(&commands::scancel(&job)).await
            && end_state(&job).await.is_none()
        {
            // Still running and not cancelled: report it (the guard is disarmed, so cancel
            // once more without waiting).
            scancel_detached(&job);
            return Err(e);
        }
        let deadline = tokio::time::Instant::now() + RELEASE_TIMEOUT;
        loop {
            if end_state(&job).await.is_some() && !queued(&job).await {
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

    /// What the manifest records.
    pub fn record(&self, name: &str, comment: &str) -> serde_json::Value {
        serde_json::json!({
            "cluster": self.cluster.name,
            "partition": self.cluster.partition,
            "job_id": self.job,
            "job_name": name,
            "comment": comment,
            "nodes": self.nodes,
        })
    }
}

/// `squeue` still lists `job` (in any state).
async fn queued(job: &str) -> bool {
    let argv: Vec<String> = ["squeue", "-h", "-j", job, "-o", "%T"]
        .map(String::from)
        .to_vec();
    match output(&argv).await {
        Ok(text) => !text.trim().is_empty(),
        Err(_) => false,
    }
}
