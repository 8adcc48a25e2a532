//! How a running deployment's failure is found and told, once: its first cause (the Slurm
//! job's end with Slurm's state and reason, which comes before the exits it brings; else the
//! instance that exited first, where it ran and how it ended), when (during or after which
//! point), and what was kept (the points it completed; the rest are not run).
//!
//! Does not own: measuring (`measure`, `external`) or the order of a deployment's steps
//! (`deployment`).

use std::collections::BTreeMap;

use super::bookkeeping::RunError;
use super::events::{Event, Kept, Reporter};
use super::instances::{ExitOrder, Exited, Instances, StartError, any_exit};
use super::measure::Measured;
use crate::archive::{Archive, DeploymentStatus, PointStatus};
use crate::fleet::slurm::Allocated;
use crate::plan::DeploymentPlan;

/// A ready deployment's running parts, watched for its failure.
pub(super) struct Running<'a> {
    pub instances: &'a Instances,
    /// Its Slurm jobs, when it runs on Slurm nodes.
    pub allocated: Option<&'a Allocated>,
    /// Which instance exited first.
    pub order: ExitOrder,
}

impl Running<'_> {
    /// `slurm job J ended: JobState=... Reason=...` once Slurm has ended a job of the
    /// deployment (time limit, node failure, `scancel` from outside); asked of Slurm now.
    pub(super) async fn job_end(&self) -> Option<String> {
        match self.allocated {
            Some(allocated) => allocated.ended().await,
            None => None,
        }
    }

    /// When an instance has exited (or Slurm ended the deployment's job): the deployment's
    /// first cause, `when` it was seen (`during point X`, `after point X`), with the log tail.
    pub(super) async fn cause(&self, when: &str) -> Option<String> {
        // An exit is seen by the provider a moment after the process ends.
        let exited = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            self.order.first_exit(self.instances),
        )
        .await;
        let (key, exit, tail) = exited.ok()?;
        // A job Slurm ended kills its steps: the job's end is the cause, not their exits.
        if let Some(end) = self.job_end().await {
            return Some(format!("{end} ({when})"));
        }
        Some(
            Exited {
                place: self.place(&key),
                key,
                exit,
                tail,
                when: when.to_string(),
            }
            .to_string(),
        )
    }

    /// The deployment's first cause when a sweep point ended as `measured` did (`during`:
    /// `during point X`): Slurm ended the job under it, the server went silent or was down,
    /// or an instance exited.
    pub(super) async fn point_cause(&self, measured: &Measured, during: &str) -> Option<String> {
        match (&measured.ended, &measured.silent, &measured.down) {
            // Slurm ended the job under the point: its state and reason.
            (Some(end), _, _) => Some(format!("{end} ({during})")),
            (None, Some(reason), _) => Some(format!(
                "the deployment went silent {during} (no byte within the stall timeout): {reason}"
            )),
            // A process that ended says why better than a failed health check: give its exit
            // a moment to be seen.
            (None, None, Some(_))
                if tokio::time::timeout(DOWN_EXIT_GRACE, any_exit(self.instances))
                    .await
                    .is_ok() =>
            {
                self.cause(during).await
            }
            (None, None, Some(reason)) => {
                Some(format!("the deployment was down {during}: {reason}"))
            }
            (None, None, None) if measured.exited => self.cause(during).await,
            (None, None, None) => None,
        }
    }

    /// Where instance `key` ran (`slurm job 5 step on n2 (local process group 77)`).
    pub(super) fn place(&self, key: &str) -> Option<String> {
        self.instances
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, instance)| instance.describe())
    }
}

/// How long a server found down after a point may take to show as an exited process.
const DOWN_EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// When a failure found between points came: `after point X` (the last one measured), or
/// `before the first point`.
pub(super) fn after(last: Option<&str>) -> String {
    match last {
        Some(id) => format!("after point {id}"),
        None => "before the first point".to_string(),
    }
}

/// The error of a deployment that did not start: a job Slurm ended kills the steps that were
/// starting, so its end, when it ended, comes first.
pub(super) async fn start_error(allocated: Option<&Allocated>, error: &StartError) -> String {
    match allocated {
        Some(allocated) => match allocated.ended().await {
            Some(end) => format!("{end} (while the deployment was starting); {error}"),
            None => error.to_string(),
        },
        None => error.to_string(),
    }
}

/// Mark the deployment failed with `error`, the first cause: the reporter's event and the
/// manifest record (with the instances' facts, when they were not recorded yet). A deployment
/// already failed keeps its first cause and is not told again. `started`: it had become
/// ready (what it kept is then told too).
pub(super) fn fail(
    reporter: &dyn Reporter,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    error: &str,
    facts: Option<BTreeMap<String, serde_json::Value>>,
    started: bool,
) -> Result<(), RunError> {
    let error = &*crate::plan::secrets::redact(error);
    let already = archive.manifest().deployments[dep_index].status == DeploymentStatus::Failed;
    if !already {
        let kept = started.then(|| kept(archive, &deployment.id));
        reporter.event(&Event::DeploymentFailed {
            id: &deployment.id,
            error,
            kept,
        });
    }
    archive.update(|m| {
        let d = &mut m.deployments[dep_index];
        if !already {
            d.status = DeploymentStatus::Failed;
            d.error = Some(error.to_string());
        }
        if let Some(facts) = facts {
            d.instances = facts;
        }
    })?;
    Ok(())
}

/// A job Slurm ended (time limit, node failure, scancel from outside) fails the deployment
/// with Slurm's state and reason, whatever the instances' exits showed; else `ok` stands.
pub(super) async fn slurm_ended(
    reporter: &dyn Reporter,
    archive: &mut Archive,
    (dep_index, deployment): (usize, &DeploymentPlan),
    allocated: &Allocated,
    ok: bool,
) -> Result<bool, RunError> {
    let Some(reason) = allocated.ended().await else {
        return Ok(ok);
    };
    // A deployment that already failed told its first cause (the job's end, when that came
    // first); it is not told again.
    let ready = archive.manifest().deployments[dep_index]
        .time_to_ready_s
        .is_some();
    let reason = if ready {
        format!("{reason} (after its last point)")
    } else {
        format!("{reason} (while the deployment was starting)")
    };
    fail(
        reporter,
        archive,
        (dep_index, deployment),
        &reason,
        None,
        ready,
    )?;
    Ok(false)
}

/// What a failing deployment leaves: its points completed so far, and those not begun.
fn kept(archive: &Archive, deployment: &str) -> Kept {
    let points = || {
        archive
            .manifest()
            .points
            .iter()
            .filter(move |p| p.deployment == deployment)
    };
    Kept {
        completed: points()
            .filter(|p| p.status == PointStatus::Completed)
            .count(),
        not_run: points()
            .filter(|p| p.status == PointStatus::Pending)
            .count(),
    }
}

/// `not run: <cause's first line>`, the error of the points a failed deployment leaves.
pub(super) fn not_run(deployment: &str, cause: &str) -> String {
    let first = cause.lines().next().unwrap_or_default();
    let first = first.strip_suffix("; last log lines:").unwrap_or(first);
    format!("not run: deployment {deployment} failed: {first}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_not_run_name_the_first_line_of_the_cause() {
        assert_eq!(
            not_run(
                "d1",
                "server-1 exited (signal 9) after point c=2 (local process group 7); last log lines:\n  | boom"
            ),
            "not run: deployment d1 failed: server-1 exited (signal 9) after point c=2 (local process group 7)"
        );
        assert_eq!(
            not_run(
                "d1",
                "slurm job 5 ended: JobState=CANCELLED Reason=None (during point c=3)"
            ),
            "not run: deployment d1 failed: slurm job 5 ended: JobState=CANCELLED Reason=None (during point c=3)"
        );
    }
}
