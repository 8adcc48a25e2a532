//! The bookkeeping every kind of point shares (embedded client, external command): mark it
//! running in the archive and announce it; record how it ended, refresh the run's summaries
//! and announce that; mark points that will not run skipped. An archive that cannot be
//! written stops the run ([`RunError`]). Measuring is the caller's.

use chrono::Utc;

use super::events::{Event, Reporter};
use crate::archive::{Archive, ArchiveError, PointRecord, PointStatus};

/// Run failures that stop the whole run (a failed point or deployment does not: it is
/// recorded and the sweep goes on).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Which manifest record a point is, and its place in the run's order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub index: usize,
    pub ordinal: usize,
    pub total: usize,
}

/// The point's record, now marked running (started now, no error) and announced.
pub(super) fn begin(
    archive: &mut Archive,
    reporter: &dyn Reporter,
    slot: Slot,
) -> Result<PointRecord, RunError> {
    let record = archive.manifest().points[slot.index].clone();
    reporter.event(&Event::PointStarted {
        ordinal: slot.ordinal,
        total: slot.total,
        id: &record.id,
        repetition: record.repetition,
    });
    archive.update(|m| {
        let p = &mut m.points[slot.index];
        p.status = PointStatus::Running;
        p.started_at = Some(Utc::now());
        p.error = None;
    })?;
    Ok(record)
}

/// Record how the point ended and announce it; returns whether it completed.
pub(super) fn finish(
    archive: &mut Archive,
    reporter: &dyn Reporter,
    slot: Slot,
    status: PointStatus,
    error: Option<String>,
) -> Result<bool, RunError> {
    let error = error.map(|e| crate::plan::secrets::redact(&e).into_owned());
    archive.update(|m| {
        let p = &mut m.points[slot.index];
        p.status = status;
        p.error = error.clone();
        p.ended_at = Some(Utc::now());
    })?;
    archive.write_run_summaries()?;
    let id = archive.manifest().points[slot.index].id.clone();
    reporter.event(&Event::PointFinished {
        ordinal: slot.ordinal,
        total: slot.total,
        id: &id,
        status,
        error: error.as_deref(),
    });
    Ok(status == PointStatus::Completed)
}

/// Mark `points` (manifest indices) skipped, with `why`.
pub(super) fn skip(archive: &mut Archive, points: &[usize], why: &str) -> Result<(), ArchiveError> {
    archive.update(|m| {
        for &i in points {
            m.points[i].status = PointStatus::Skipped;
            m.points[i].error = Some(why.to_string());
        }
    })
}
