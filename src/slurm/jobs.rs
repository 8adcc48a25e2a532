//! Our jobs still in Slurm's queue (by the comment every allocation carries), for
//! `orchestrate ps` and `orchestrate clean`, on this machine or on a cluster's login host.
//! Without the Slurm commands here there are none.

use super::SlurmError;
use super::cli::{SlurmHost, output};
use super::commands::{self, QueuedJob, parse_comment, parse_squeue};

/// One of our jobs: the queue's line and what its comment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurJob {
    pub queued: QueuedJob,
    pub run: String,
    pub task: String,
    pub deployment: String,
    /// The pid of the orchestrate that made it.
    pub owner: String,
}

/// Whether this machine talks to a Slurm cluster: `SLURM_CONF` is set, or Slurm's default
/// config file exists.
pub fn configured() -> bool {
    std::env::var_os("SLURM_CONF").is_some_and(|v| !v.is_empty())
        || ["/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf"]
            .iter()
            .any(|p| std::path::Path::new(p).exists())
}

/// Our jobs in the queue of the cluster driven from `host`; `Ok(empty)` when, on this
/// machine, Slurm is not installed or not configured.
pub async fn list(host: &SlurmHost) -> Result<Vec<OurJob>, SlurmError> {
    if matches!(host, SlurmHost::Here) && !configured() {
        return Ok(Vec::new());
    }
    let text = match output(host, &commands::squeue_all()).await {
        Ok(text) => text,
        Err(SlurmError::Spawn { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    Ok(ours(&text))
}

/// The lines of `squeue` output that are our jobs.
pub fn ours(text: &str) -> Vec<OurJob> {
    parse_squeue(text)
        .into_iter()
        .filter_map(|queued| {
            let fields = parse_comment(&queued.comment)?;
            let get = |k: &str| fields.get(k).cloned().unwrap_or_default();
            Some(OurJob {
                run: get("run"),
                task: get("task"),
                deployment: get("deployment"),
                owner: get("owner"),
                queued,
            })
        })
        .collect()
}

/// `scancel` one job.
pub async fn cancel(host: &SlurmHost, job: &str) -> Result<(), SlurmError> {
    output(host, &commands::scancel(job)).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jobs_with_our_comment_are_ours() {
        let text = "5|orchestrate-t|orchestrate run=R1 task=t deployment=d1 owner=42|RUNNING|n[1-2]|None\n\
                    6|other|(null)|RUNNING|n1|None\n";
        let jobs = ours(text);
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].run, "R1");
        assert_eq!(jobs[0].owner, "42");
        assert_eq!(jobs[0].queued.id, "5");
    }
}
