//! Resuming a run in place: its archive reopened, the task re-planned by the caller and
//! checked unchanged, every unfinished point pending again.
//!
//! Does not own: planning (the caller plans the run's task file) or the run loop.

use std::path::{Path, PathBuf};

use crate::archive::{Archive, ArchiveError, PointStatus, RunStatus};
use crate::plan::Plan;

/// Why a run cannot be resumed. All but [`ResumeError::Reopen`] are the user's to fix.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error(transparent)]
    Open(ArchiveError),
    #[error(
        "the run's task file {} is not there; run `orchestrate run --resume` from the directory the run was started in",
        .0.display()
    )]
    SourceMissing(PathBuf),
    #[error(
        "{} changed since run {run_id} was started (sha256 {then} then, {now} now); start a new run instead of resuming",
        source_file.display()
    )]
    Changed {
        source_file: PathBuf,
        run_id: String,
        then: String,
        now: String,
    },
    #[error("failed to reopen the run")]
    Reopen(#[source] ArchiveError),
}

/// The archive of the run in `dir`, whose task file (`manifest.source`) must still exist.
pub fn open(dir: &Path) -> Result<Archive, ResumeError> {
    let archive = Archive::open(dir).map_err(ResumeError::Open)?;
    let source = &archive.manifest().source;
    if !source.exists() {
        return Err(ResumeError::SourceMissing(source.clone()));
    }
    Ok(archive)
}

/// Mark the run running again with its unfinished points pending, once `plan` (the run's
/// task planned again) is checked to be the task the run started with.
pub fn reopen(archive: &mut Archive, plan: &Plan) -> Result<(), ResumeError> {
    let manifest = archive.manifest();
    if plan.spec_hash != manifest.spec_hash {
        return Err(ResumeError::Changed {
            source_file: manifest.source.clone(),
            run_id: manifest.run_id.clone(),
            then: manifest.spec_hash.clone(),
            now: plan.spec_hash.clone(),
        });
    }
    archive
        .update(|m| {
            m.status = RunStatus::Running;
            m.ended_at = None;
            for p in m
                .points
                .iter_mut()
                .filter(|p| p.status != PointStatus::Completed)
            {
                p.status = PointStatus::Pending;
                p.error = None;
            }
        })
        .map_err(ResumeError::Reopen)?;
    archive.reserve_space().map_err(ResumeError::Reopen)
}
