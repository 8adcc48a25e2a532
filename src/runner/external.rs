//! One point measured by an external benchmark command (`benchmark.external`) instead of
//! the embedded client: run it in the entry instance (or on its host) while watching the
//! deployment, its output streamed into the point's `external.log`, bounded by its timeout
//! and killed on Ctrl-C; read its result file; parse our metrics out of it; write the
//! point's summary.json (our metric names plus an `external` record of the tool, command,
//! exit code and raw values) and record the outcome. Gates that need per-request records
//! come out `not_measured`. With `run --telemetry`, the GPUs are sampled over the command's
//! whole run (its startup included), and its output tokens and requests give the figures.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::bookkeeping::{self, RunError, Slot};
use super::events::Reporter;
use crate::archive::{Archive, PointStatus};
use crate::external::{self, ExternalPlan, Place};
use crate::plan::{DeploymentPlan, Plan, ReadinessPlan};
use crate::provider::exec::{PRINT_FILE, shell_quote};
use crate::provider::{ExecOutput, ExecRequest, ExecTarget, ExitInfo, Instance, LogSink};
use crate::units::error_chain;
use crate::validity::{self, Requested, ValidityBounds};

/// Environment variables handed to a command.
pub(super) type Env = Vec<(String, String)>;

/// Output lines quoted in a failed point's error.
const TAIL: usize = 15;

/// The point, the instance that runs the command, and the deployment it belongs to.
pub(super) struct ExternalContext<'a> {
    pub plan: &'a Plan,
    pub external: &'a ExternalPlan,
    /// Which manifest record the point is, and its place in the run.
    pub slot: Slot,
    /// The instance of `external.role` that runs the command.
    pub instance: &'a dyn Instance,
    /// That instance's environment (the command sees what the server saw).
    pub env: Env,
    /// Entry endpoint and readiness, for the health check after the point.
    pub base_url: &'a str,
    pub readiness: &'a ReadinessPlan,
    pub cancel: &'a CancellationToken,
    /// GPU samplers beside the command (`run --telemetry`); `None`: no telemetry.
    pub telemetry: Option<super::telemetry::PointTelemetry<'a>>,
}

/// The first instance of `role` and its environment, for an external command.
pub(super) fn instance<'a>(
    deployment: &DeploymentPlan,
    instances: &'a [(String, Box<dyn Instance>)],
    role: &str,
) -> Result<(&'a dyn Instance, Env), String> {
    let key = format!("{role}-0");
    let instance = instances
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, i)| i.as_ref())
        .ok_or_else(|| format!("no running instance {key} for the external command"))?;
    let env = deployment
        .roles
        .iter()
        .find(|r| r.name == role)
        .and_then(|r| r.instances.first())
        .map(|i| {
            i.env
                .iter()
                .map(|e| (e.name.clone(), e.value.expose().to_string()))
                .collect()
        })
        .unwrap_or_default();
    Ok((instance, env))
}

/// Measure one point with the external command; returns whether it completed. Only archive
/// failures are errors.
pub(super) async fn point(
    ctx: ExternalContext<'_>,
    archive: &mut Archive,
    reporter: Arc<dyn Reporter>,
    deployment_exit: BoxFuture<'_, (String, ExitInfo, Vec<String>)>,
) -> Result<bool, RunError> {
    let slot = ctx.slot;
    let record = bookkeeping::begin(archive, reporter.as_ref(), slot)?;
    let path = archive.point_dir(&record.dir)?.join("external.log");
    let log = LogSink::create(&path).map_err(|source| {
        RunError::Archive(crate::archive::ArchiveError::Write {
            path: path.clone(),
            source,
        })
    })?;
    let ext = ctx.external;
    log.line(&format!(
        "[orchestrate] {} in {} ({}): {}",
        match ext.place {
            Place::Container => "container",
            Place::Host => "host",
        },
        ctx.instance.describe(),
        ext.role,
        ext.command
    ));
    let samplers = super::telemetry::start(ctx.telemetry.as_ref(), archive, &record.dir).await;
    let started_at = chrono::Utc::now();
    let started = Instant::now();
    let outcome = tokio::select! {
        r = run(&ctx, log.clone()) => r,
        _ = tokio::time::sleep(ext.timeout) => Err(format!(
            "the external command timed out after {} and was killed{}",
            crate::units::format_duration(ext.timeout),
            tail_text(&log)
        )),
        _ = ctx.cancel.cancelled() => Err("interrupted before the point finished".to_string()),
        (key, exit, tail) = deployment_exit => Err(format!(
            "{key} exited during the point ({exit}); last log lines:\n{}",
            tail.iter().map(|l| format!("  | {l}")).collect::<Vec<_>>().join("\n")
        )),
    };
    let elapsed = started.elapsed().as_secs_f64();
    let collected = super::telemetry::stop(samplers).await;
    let (status, error) = match outcome
        .and_then(|(out, result)| parse(ext, &out, result.as_deref(), &log).map(|p| (out, p)))
    {
        Ok((out, parsed)) => {
            let healthy = crate::readiness::healthy(ctx.base_url, ctx.readiness).await;
            let mut summary = summary(ctx.plan, ext, &out, &parsed, elapsed, healthy);
            if let Some(collected) = collected {
                // The GPUs over the command's whole run: its output tokens and requests.
                let mut typed = crate::archive::PointSummary::from_json(&summary);
                let window = (
                    0.0,
                    elapsed,
                    typed.total_output_tokens.unwrap_or(0.0) as u64,
                    typed.completed.unwrap_or(0.0) as u64,
                );
                let dir = archive.point_dir(&record.dir)?;
                collected.apply_over(started_at, Some(window), &mut typed, &dir);
                summary = typed.to_value();
            }
            let bounds = ValidityBounds::of(&ctx.plan.validity);
            // No per-request records: asked counts and lengths are not the tool's to prove.
            let verdict = validity::evaluate(
                &Requested::default(),
                &crate::archive::PointSummary::from_json(&summary),
                healthy,
                &bounds,
            );
            archive.update(|m| m.points[slot.index].validity = Some(verdict))?;
            archive.write_point_summary(&record.dir, &summary)?;
            (PointStatus::Completed, None)
        }
        Err(e) if ctx.cancel.is_cancelled() => {
            log.line(&format!("[orchestrate] point interrupted: {e}"));
            (PointStatus::Interrupted, Some(e))
        }
        Err(e) => {
            log.line(&format!("[orchestrate] point failed: {e}"));
            (PointStatus::Failed, Some(e))
        }
    };
    log.flush();
    bookkeeping::finish(archive, reporter.as_ref(), slot, status, error)
}

fn target(place: Place) -> ExecTarget {
    match place {
        Place::Container => ExecTarget::Instance,
        Place::Host => ExecTarget::Host,
    }
}

/// Run the command; on success read its result file. Errors carry the output's tail.
async fn run(
    ctx: &ExternalContext<'_>,
    log: LogSink,
) -> Result<(ExecOutput, Option<String>), String> {
    let ext = ctx.external;
    let out = ctx
        .instance
        .exec(ExecRequest {
            command: ext.command.clone(),
            target: target(ext.place),
            env: ctx.env.clone(),
            log: log.clone(),
        })
        .await
        .map_err(|e| format!("cannot run the external command: {}", error_chain(&e)))?;
    log.line(&format!(
        "[orchestrate] the external command ended: {}",
        out.exit
    ));
    if !out.success() {
        return Err(format!(
            "the external command failed ({}){}",
            out.exit,
            tail_text(&log)
        ));
    }
    let Some(file) = &ext.result_file else {
        return Ok((out, None));
    };
    let read = ctx
        .instance
        .exec(ExecRequest {
            command: format!("sh -c {} sh {}", shell_quote(PRINT_FILE), shell_quote(file)),
            target: target(ext.place),
            env: Vec::new(),
            log: LogSink::memory(),
        })
        .await
        .map_err(|e| format!("cannot read the result file {file}: {}", error_chain(&e)))?;
    if !read.success() {
        return Err(format!(
            "cannot read the result file {file} ({}): {}",
            read.exit,
            read.stderr.trim()
        ));
    }
    log.line(&format!("[orchestrate] result file {file}:"));
    log.write(read.stdout.as_bytes());
    Ok((out, Some(read.stdout)))
}

fn parse(
    ext: &ExternalPlan,
    out: &ExecOutput,
    result: Option<&str>,
    log: &LogSink,
) -> Result<external::ParseOutcome, String> {
    let parsed = external::extract(&ext.metrics, &out.stdout, &out.stderr, result)?;
    if !parsed.missing.is_empty() {
        return Err(format!(
            "the external command's output lacks {}{}",
            parsed.missing.join(", "),
            tail_text(log)
        ));
    }
    Ok(parsed)
}

fn tail_text(log: &LogSink) -> String {
    let lines = log.tail(TAIL);
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "; last output lines:\n{}",
        lines
            .iter()
            .map(|l| format!("  | {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The point's summary.json: our metric names at the top level (as the embedded client's
/// summaries have them), and what the tool did under `external`.
fn summary(
    plan: &Plan,
    ext: &ExternalPlan,
    out: &ExecOutput,
    parsed: &external::ParseOutcome,
    elapsed_s: f64,
    healthy: bool,
) -> Value {
    let mut summary = json!({
        "backend": plan.backend_name(),
        "model_id": plan.model,
    });
    for (metric, e) in &parsed.values {
        // Counts stay whole numbers, as in the embedded client's summaries.
        summary[metric] = match e.raw.parse::<i64>() {
            Ok(n) => json!(n),
            Err(_) => json!(e.value),
        };
    }
    summary["server_healthy_after"] = json!(healthy);
    summary["external"] = json!({
        "tool": ext.preset.map_or("custom", |p| p.name()),
        "command": ext.command,
        "where": ext.place,
        "role": ext.role,
        "exit_code": out.exit.code,
        "elapsed_s": elapsed_s,
        "result_file": ext.result_file,
        "values": parsed.values,
        "result": parsed.json,
    });
    summary
}
