//! One run of a plan: every deployment in turn (see deployment), the archive's status and
//! run summaries at the end, and the first manifest of a run ([`manifest_for`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;

use super::bookkeeping::{RunError, skip};
use super::deployment::{RunState, Work, run_deployment};
use super::events::{Event, Reporter};
use super::measure;
use super::search::SearchRun;
use crate::archive::{
    Archive, DeploymentRecord, DeploymentStatus, FORMAT_VERSION, Manifest, PointRecord,
    PointStatus, RunStatus, ToolInfo,
};
use crate::fleet::{ProviderSet, RunClient};
use crate::plan::Plan;
use crate::shutdown::Shutdown;

/// What a run ended as, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RunResult {
    pub status: RunStatus,
    pub points_completed: usize,
    pub points_failed: usize,
    pub points_skipped: usize,
}

/// The first manifest of a run of `plan`: every deployment and point pending.
pub(super) fn manifest_for(plan: &Plan, run_id: &str, tag: Option<String>) -> Manifest {
    let mut points = Vec::new();
    // A search's points are added as it measures them.
    let planned = if plan.search.is_some() {
        &[][..]
    } else {
        &plan.deployments[..]
    };
    for deployment in planned {
        for point in &deployment.points {
            for repetition in 1..=point.repetitions.max(1) {
                points.push(PointRecord {
                    id: point.id.clone(),
                    deployment: deployment.id.clone(),
                    repetition,
                    dir: PointRecord::dir_name(&point.id, repetition),
                    axes: point.axes.clone(),
                    load: point.load.clone().into(),
                    status: PointStatus::Pending,
                    error: None,
                    started_at: None,
                    ended_at: None,
                    validity: None,
                });
            }
        }
    }
    Manifest {
        format_version: FORMAT_VERSION,
        tool: ToolInfo::current(),
        run_id: run_id.to_string(),
        task: plan.task.clone(),
        backend: serde_json::to_value(plan.backend)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        model: plan.model.clone(),
        tag,
        source: plan.source.clone(),
        spec_hash: plan.spec_hash.clone(),
        started_at: Utc::now(),
        ended_at: None,
        status: RunStatus::Running,
        resolved: plan.resolved.clone(),
        hosts: BTreeMap::new(),
        deployments: plan
            .deployments
            .iter()
            .map(|d| DeploymentRecord {
                id: d.id.clone(),
                axes: d.axes.clone(),
                status: DeploymentStatus::Pending,
                time_to_ready_s: None,
                error: None,
                served_model: None,
                search: None,
                instances: BTreeMap::new(),
                gpus: planned_gpus(d),
            })
            .collect(),
        points,
        invocation: None,
    }
}

/// The GPUs a deployment holds as planned: over its roles, instances x GPUs each asks for
/// (`resources.gpu`); `None` when no role asks for any.
fn planned_gpus(d: &crate::plan::DeploymentPlan) -> Option<u32> {
    let total: u32 = d
        .roles
        .iter()
        .map(|r| {
            let each = r.resources.gpu.as_ref().map_or(0, |g| g.count);
            each.saturating_mul(r.instances.len() as u32)
        })
        .sum();
    (total > 0).then_some(total)
}

/// Execute `plan` into `archive`. Points already completed in the archive are skipped (resume).
pub(super) async fn run(
    plan: &Plan,
    providers: &dyn ProviderSet,
    archive: &mut Archive,
    reporter: Arc<dyn Reporter>,
    (shutdown, telemetry): (&Shutdown, Option<&super::telemetry::Telemetry>),
) -> Result<RunResult, RunError> {
    let cancel = shutdown.token();
    let total = archive
        .manifest()
        .points
        .iter()
        .filter(|p| p.status != PointStatus::Completed)
        .count();
    reporter.event(&Event::RunStarted {
        run_dir: archive.dir(),
        deployments: plan.deployments.len(),
        points: total,
    });
    let client = RunClient::prepare(plan, providers.client_session(), shutdown).await;
    if let RunClient::Remote(remote) = &client {
        archive.update(|m| {
            m.hosts.insert("client".to_string(), remote.facts());
        })?;
    }
    let probed = match telemetry {
        Some(t) => Some(t.probed(plan, providers, archive).await),
        None => None,
    };
    let mut state = RunState {
        plan,
        providers,
        reporter: reporter.clone(),
        tokenizers: measure::Tokenizers::default(),
        shutdown,
        client,
        telemetry: probed.as_ref(),
        total,
        counter: 0,
    };
    let mut any_failed = false;
    for deployment in &plan.deployments {
        if let Some(spec) = &plan.search {
            if !search_pending(archive, &deployment.id)
                || cancel.is_cancelled()
                || (any_failed && plan.stop_on_failure)
            {
                continue;
            }
            // A search left unfinished (an interrupted run resumed) starts again.
            archive.update(|m| m.points.retain(|p| p.deployment != deployment.id))?;
            let Some(mut search) = SearchRun::new(spec, deployment) else {
                continue;
            };
            let work = Work::Search(&mut search);
            any_failed |= !run_deployment(&mut state, archive, deployment, work).await?;
            continue;
        }
        let pending: Vec<usize> = archive
            .manifest()
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.deployment == deployment.id && p.status != PointStatus::Completed)
            .map(|(i, _)| i)
            .collect();
        if pending.is_empty() {
            continue;
        }
        if cancel.is_cancelled() || (any_failed && plan.stop_on_failure) {
            skip(archive, &pending, "the run stopped before this point")?;
            continue;
        }
        let ok = run_deployment(&mut state, archive, deployment, Work::Points(&pending)).await?;
        any_failed |= !ok;
    }
    let status = if cancel.is_cancelled() {
        RunStatus::Interrupted
    } else if any_failed {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    archive.update(|m| {
        m.status = status;
        m.ended_at = Some(Utc::now());
    })?;
    archive.write_run_summaries()?;
    let count = |s: PointStatus| {
        archive
            .manifest()
            .points
            .iter()
            .filter(|p| p.status == s)
            .count()
    };
    let result = RunResult {
        status,
        points_completed: count(PointStatus::Completed),
        points_failed: count(PointStatus::Failed),
        points_skipped: count(PointStatus::Skipped)
            + count(PointStatus::Pending)
            + count(PointStatus::Interrupted),
    };
    reporter.event(&Event::RunFinished {
        status,
        run_dir: archive.dir(),
    });
    Ok(result)
}

/// Whether deployment `id`'s search is still to run (it has not finished).
fn search_pending(archive: &Archive, id: &str) -> bool {
    !archive
        .manifest()
        .deployments
        .iter()
        .filter(|d| d.id == id)
        .filter_map(|d| d.search.as_ref())
        .any(|s| s.finished)
}
