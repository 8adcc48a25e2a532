//! One point of the sweep against a ready deployment: build its prompts (through the model's
//! tokenizer), drive the client while watching the deployment, stream request records into
//! the archive, summarize, check the server is still healthy, and record the outcome.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::bookkeeping::{self, RunError, Slot};
use super::events::{Event, Reporter};
use super::sample::{self, Sample, SampleError, Sampled};
use crate::archive::{Archive, PointStatus, PointSummary, RequestsWriter};
use crate::client::{
    ClientConfig, MetricsSource, Observer, Progress, RequestOutcome, RequestRecord,
};
use crate::dataset::{DatasetSpec, Tokenizer, TokenizerSource};
use crate::fleet::slurm::Allocated;
use crate::load::{Limit, OverSaturation, Rate};
use crate::metrics::{self, ResultHeader, SummaryOptions};
use crate::plan::{Plan, PointPlan, ReadinessPlan};
use crate::provider::ExitInfo;
use crate::validity::{self, Requested, ValidityBounds};

/// Prompts generated for a duration-bound point (they are reused cyclically).
const DURATION_PROMPTS: usize = 1000;

/// Where a point runs and how it is numbered.
pub(super) struct PointContext<'a> {
    pub plan: &'a Plan,
    pub point: &'a PointPlan,
    /// Which manifest record the point is, and its place in the run.
    pub slot: Slot,
    pub base_url: &'a str,
    pub readiness: &'a ReadinessPlan,
    pub cancel: &'a CancellationToken,
    /// The client on a host of the cluster (`client.host`); `None`: here.
    pub client: Option<&'a Result<super::remote_client::RemoteSite, String>>,
    /// GPU samplers beside the load (`run --telemetry`); `None`: no telemetry.
    pub telemetry: Option<super::telemetry::PointTelemetry<'a>>,
    /// The deployment's Slurm jobs, asked after the point whether Slurm ended one under it.
    pub slurm: Option<&'a Allocated>,
    /// The deployment's other instances, whose `/metrics` join the entry's in the point's
    /// time series.
    pub metrics_sources: &'a [MetricsSource],
}

/// Tokenizers loaded during a run, by source, so each is loaded once.
#[derive(Default)]
pub(super) struct Tokenizers {
    loaded: Mutex<HashMap<String, Arc<Tokenizer>>>,
}

impl Tokenizers {
    async fn get(
        &self,
        plan: &Plan,
        point: &PointPlan,
        base_url: &str,
    ) -> Result<Arc<Tokenizer>, String> {
        let source = tokenizer_source(plan, point.load.tokenizer.as_deref(), base_url);
        let key = source.name();
        if let Some(t) = self
            .loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(t.clone());
        }
        let fallback = TokenizerSource::Server {
            base_url: base_url.to_string(),
            model: plan.model.clone(),
        };
        let explicit = point.load.tokenizer.is_some();
        let loaded = tokio::task::spawn_blocking(move || match Tokenizer::load(&source) {
            Ok(t) => Ok(t),
            // No tokenizer named and none cached for the model: the server's own /tokenize.
            Err(e) if !explicit => Tokenizer::load(&fallback)
                .map_err(|e2| format!("{e}; and the server's tokenizer: {e2}")),
            Err(e) => Err(e.to_string()),
        })
        .await
        .map_err(|e| format!("tokenizer loading panicked: {e}"))??;
        let loaded = Arc::new(loaded);
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, loaded.clone());
        Ok(loaded)
    }
}

/// `tokenizer:` as written (a path relative to the task file, or a model id), else the model.
fn tokenizer_source(plan: &Plan, tokenizer: Option<&str>, base_url: &str) -> TokenizerSource {
    match tokenizer {
        Some(arg) => {
            let relative = plan
                .source
                .parent()
                .map(|dir| dir.join(arg))
                .filter(|p| Path::new(arg).is_relative() && p.exists());
            match relative {
                Some(path) => TokenizerSource::File(path),
                None => TokenizerSource::from_arg(arg),
            }
        }
        None if base_url.is_empty() => TokenizerSource::Model(plan.model.clone()),
        None => TokenizerSource::Model(plan.model.clone()),
    }
}

/// Streams records into requests.jsonl and progress to the reporter.
struct PointObserver {
    writer: Mutex<RequestsWriter>,
    write_error: Mutex<Option<String>>,
    /// Told of every request that ended as stalled (the silence watch checks the server).
    stalled: tokio::sync::Notify,
    reporter: Arc<dyn Reporter>,
    ordinal: usize,
    total: usize,
    id: String,
}

impl Observer for PointObserver {
    fn on_record(&self, record: &RequestRecord) {
        if matches!(record.outcome, RequestOutcome::Stalled { .. }) {
            self.stalled.notify_one();
        }
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = writer.write(record) {
            self.write_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e.to_string());
        }
    }

    fn on_progress(&self, p: &Progress) {
        if let Ok(mut writer) = self.writer.try_lock() {
            let _ = writer.flush();
        }
        self.reporter.event(&Event::PointProgress {
            ordinal: self.ordinal,
            total: self.total,
            id: &self.id,
            done: p.done,
            failed: p.failed,
            in_flight: p.in_flight,
            // Mean since the point started: closed-loop waves finish together, so the rate of
            // the last 250 ms interval is mostly 0 or a spike.
            output_tokens_per_s: p.output_tokens as f64 / p.elapsed.as_secs_f64().max(1e-3),
        });
    }
}

/// How a point ended.
pub(super) struct Measured {
    /// The point completed.
    pub ok: bool,
    /// The server went silent during the point (a request stalled and the health check then
    /// failed): why, to fail the deployment with.
    pub silent: Option<String>,
    /// The server was down after the point: no request of it completed and the health check
    /// then failed (a server killed between two points whose process lingers, such as a
    /// Slurm step's `srun` in Slurm's KillWait).
    pub down: Option<String>,
    /// Slurm ended a job of the deployment under the point (`slurm job J ended: JobState=...
    /// Reason=...`): the point failed with it, and so does the deployment.
    pub ended: Option<String>,
    /// An instance of the deployment exited during the point.
    pub exited: bool,
    /// With `over_saturation: stop`, the point was over-saturated: why.
    pub saturated: Option<String>,
}

/// Measure one point. Only archive failures are errors.
pub(super) async fn point(
    ctx: PointContext<'_>,
    tokenizers: &Tokenizers,
    archive: &mut Archive,
    reporter: Arc<dyn Reporter>,
    deployment_exit: BoxFuture<'_, (String, ExitInfo, Vec<String>)>,
) -> Result<Measured, RunError> {
    let slot = ctx.slot;
    let record = bookkeeping::begin(archive, reporter.as_ref(), slot)?;
    let writer = archive.requests_writer(&record.dir)?;
    let observer = Arc::new(PointObserver {
        writer: Mutex::new(writer),
        write_error: Mutex::new(None),
        stalled: tokio::sync::Notify::new(),
        reporter: reporter.clone(),
        ordinal: slot.ordinal,
        total: slot.total,
        id: record.id.clone(),
    });
    let mut silent = None;
    let samplers = super::telemetry::start(ctx.telemetry.as_ref(), archive, &record.dir).await;
    let mut exited = false;
    let outcome = tokio::select! {
        measured = watched(&ctx, tokenizers, observer.clone(), &mut silent) => measured,
        (key, exit, tail) = deployment_exit => {
            exited = true;
            Err(format!(
                "{key} exited during the point ({exit}); last log lines:\n{}",
                tail.iter().map(|l| format!("  | {l}")).collect::<Vec<_>>().join("\n")
            ))
        }
    };
    // A job Slurm ended (scancel, time limit, node failure) kills the servers under the
    // point, whose requests may then fail fast enough to finish it before any exit is seen:
    // Slurm is asked, and its state and reason are the point's first cause.
    // (An interrupted run's own stop is its cause.)
    let ended = match ctx.slurm {
        Some(allocated) if !ctx.cancel.is_cancelled() => allocated.ended().await,
        _ => None,
    };
    let collected = super::telemetry::stop(samplers).await;
    observer
        .writer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .flush()?;
    if let Some(e) = observer
        .write_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        return Err(RunError::Archive(crate::archive::ArchiveError::Write {
            path: PathBuf::from(&record.dir),
            source: std::io::Error::other(e),
        }));
    }
    let mut down = None;
    let mut saturated = None;
    let (status, error) = match outcome {
        Ok((summary, started_at, series)) => {
            keep_series(archive, &record.dir, series)?;
            let healthy = crate::readiness::healthy(ctx.base_url, ctx.readiness).await;
            let mut typed = PointSummary::from_json(&summary);
            if ctx.plan.validity.over_saturation == OverSaturation::Stop {
                saturated = over_saturated(&typed);
            }
            if let Some(collected) = collected {
                collected.apply(started_at, &mut typed, &archive.point_dir(&record.dir)?);
            }
            typed
                .other
                .insert("server_healthy_after".into(), serde_json::json!(healthy));
            let bounds = ValidityBounds::of(&ctx.plan.validity);
            let verdict = validity::evaluate(
                &Requested::from_plan(&ctx.point.load),
                &typed,
                healthy,
                &bounds,
            );
            archive.update(|m| m.points[slot.index].validity = Some(verdict))?;
            archive.write_point_summary(&record.dir, &typed)?;
            let cancelled = ctx.cancel.is_cancelled();
            let completed = typed.completed.unwrap_or(0.0);
            if let Some(end) = &ended {
                (PointStatus::Failed, Some(ended_error(end, &typed)))
            } else if let Some(reason) = &silent {
                (PointStatus::Failed, Some(reason.clone()))
            } else if cancelled {
                (
                    PointStatus::Interrupted,
                    Some("interrupted before the point finished".to_string()),
                )
            } else if completed == 0.0 {
                let error = first_error(&typed);
                if !healthy {
                    down = Some(format!(
                        "the server at {} failed its health check after a point in which no request completed ({error})",
                        ctx.base_url
                    ));
                }
                (PointStatus::Failed, Some(error))
            } else if let Some(error) = died_under(&typed, healthy, ctx.base_url) {
                // Never `completed` once its server died: the requests after the death
                // failed fast enough to end the point before the exit was seen.
                down = Some(error.clone());
                (PointStatus::Failed, Some(error))
            } else {
                (PointStatus::Completed, None)
            }
        }
        Err(e) => match &ended {
            Some(end) => (PointStatus::Failed, Some(format!("{end}; {e}"))),
            None if ctx.cancel.is_cancelled() && !exited => (
                PointStatus::Interrupted,
                Some(format!("interrupted before the point finished ({e})")),
            ),
            None => (PointStatus::Failed, Some(e)),
        },
    };
    let ok = bookkeeping::finish(archive, reporter.as_ref(), slot, status, error)?;
    Ok(Measured {
        ok,
        silent,
        down,
        ended,
        exited,
        saturated,
    })
}

/// Why the point was over-saturated, per its summary's `over_saturation` block.
fn over_saturated(summary: &PointSummary) -> Option<String> {
    let block = summary.other.get("over_saturation")?;
    let judged: metrics::Saturation = serde_json::from_value(block.clone()).ok()?;
    judged.over_saturated.then_some(judged.reason)
}

/// Archive a point's time series, when it has one.
fn keep_series(
    archive: &Archive,
    dir: &str,
    series: Option<metrics::TimeSeries>,
) -> Result<(), crate::archive::ArchiveError> {
    series.map_or(Ok(()), |s| archive.write_timeseries(dir, &s))
}

/// The error of a point whose Slurm job ended under it: Slurm's words, then how far it got.
fn ended_error(end: &str, summary: &PointSummary) -> String {
    let done = summary.completed.unwrap_or(0.0);
    let failed = summary.failed.unwrap_or(0.0);
    format!(
        "{end}, under the point: {done} request(s) had completed and {failed} failed; its servers are gone"
    )
}

/// [`drive`], watched for a server gone silent: after a request stalls, the server's health
/// check is asked; when that fails too, the point's requests are cancelled (instead of each
/// waiting out the stall timeout) and `silent` says why.
async fn watched(
    ctx: &PointContext<'_>,
    tokenizers: &Tokenizers,
    observer: Arc<PointObserver>,
    silent: &mut Option<String>,
) -> Result<Measurement, String> {
    let cancel = ctx.cancel.child_token();
    let measured = drive(ctx, tokenizers, observer.clone(), cancel.clone());
    tokio::pin!(measured);
    let watch = async {
        loop {
            observer.stalled.notified().await;
            if !crate::readiness::healthy(ctx.base_url, ctx.readiness).await {
                break;
            }
        }
    };
    tokio::select! {
        done = &mut measured => return done,
        () = watch => {}
    }
    let after = ctx.point.load.stall_timeout.map_or_else(String::new, |d| {
        format!(" for {}", crate::units::format_duration(d))
    });
    *silent = Some(format!(
        "the server at {} went silent: a request got no byte{after} and its health check failed",
        ctx.base_url
    ));
    cancel.cancel();
    measured.await
}

/// A failed measurement as the point's error.
fn point_error(e: SampleError) -> String {
    match e {
        SampleError::Panicked(e) => format!("prompt generation panicked: {e}"),
        SampleError::Prompts(e) => format!("failed to build prompts: {e}"),
        SampleError::Client(e) => e.to_string(),
        SampleError::Remote(e) => e,
    }
}

/// A point some of whose requests failed, after which the server fails its health check:
/// the server died under it (why, as the point's error).
fn died_under(summary: &PointSummary, healthy: bool, base_url: &str) -> Option<String> {
    let failed = summary.failed.unwrap_or(0.0);
    if healthy || failed == 0.0 {
        return None;
    }
    let done = summary.completed.unwrap_or(0.0);
    let reason = summary
        .errors
        .first()
        .map_or("", |(reason, _)| reason.as_str());
    Some(format!(
        "the server at {base_url} failed its health check after the point: it died under it ({done} request(s) completed, then {failed} failed: {reason})"
    ))
}

fn first_error(summary: &PointSummary) -> String {
    let reason = summary
        .errors
        .first()
        .map_or("no request completed", |(reason, _)| reason.as_str());
    format!("no request completed: {reason}")
}

/// A point's summary JSON, when its load started (0 on the run's clock) and its time series
/// (`None`: off).
type Measurement = (
    serde_json::Value,
    chrono::DateTime<chrono::Utc>,
    Option<metrics::TimeSeries>,
);

/// Prompts -> client -> summary JSON (vllm bench serve's fields + ours).
async fn drive(
    ctx: &PointContext<'_>,
    tokenizers: &Tokenizers,
    observer: Arc<PointObserver>,
    cancel: CancellationToken,
) -> Result<Measurement, String> {
    let load = &ctx.point.load;
    let tokenizer = tokenizers.get(ctx.plan, ctx.point, ctx.base_url).await?;
    let num_prompts = match load.shape.limit {
        Limit::Requests(n) => n as usize,
        // A replayed trace: the whole window, until the duration ends.
        Limit::Duration(_) if matches!(load.dataset, DatasetSpec::Mooncake { .. }) => usize::MAX,
        Limit::Duration(_) => DURATION_PROMPTS,
    };
    let mut config = ClientConfig::new(ctx.base_url, ctx.plan.model.clone(), load.shape.clone());
    config.backend = ctx.plan.backend;
    config.endpoint = load.endpoint;
    config.ignore_eos = load.ignore_eos;
    config.extra_body = load.extra_body.clone();
    config.request_timeout = load.request_timeout;
    config.stall_timeout = load.stall_timeout;
    config.seed = load.seed;
    config.timeseries_interval = load.timeseries_interval;
    config.metrics_sources = ctx.metrics_sources.to_vec();
    let site = match ctx.client {
        None => None,
        Some(site) => Some(site.as_ref().map_err(Clone::clone)?),
    };
    let sample = Sample {
        config: &config,
        dataset: &load.dataset,
        tokenizer: tokenizer.clone(),
        prompts: num_prompts,
        site,
        prefix_block_tokens: load.prefix_block_size,
    };
    let sampled = sample::sample(sample, |_| {}, observer, cancel)
        .await
        .map_err(point_error)?;
    let options = SummaryOptions {
        percentiles: load.percentiles.clone(),
        goodput: load.goodput.clone(),
        warmup: load.shape.warmup,
        cooldown: load.shape.cooldown,
    };
    let mut summary = metrics::summarize(&sampled.outcome.records, &options);
    sampled.prefix_cache(&mut summary);
    let series = sampled.time_series(&config);
    let Sampled {
        outcome,
        chat_counting,
        ..
    } = sampled;
    let header = ResultHeader {
        date: outcome.started_at.format("%Y%m%d-%H%M%S").to_string(),
        endpoint_type: ctx.plan.backend_name(),
        backend: ctx.plan.backend_name(),
        label: None,
        model_id: ctx.plan.model.clone(),
        tokenizer_id: Some(tokenizer.name().to_string()),
        num_prompts: outcome.records.len() as u64,
        request_rate: match load.shape.rate {
            Rate::Unlimited => serde_json::json!("inf"),
            Rate::Constant { rps } | Rate::Poisson { rps } | Rate::Gamma { rps, .. } => {
                serde_json::json!(rps)
            }
        },
        burstiness: match load.shape.rate {
            Rate::Gamma { burstiness, .. } => burstiness,
            _ => 1.0,
        },
        max_concurrency: load.shape.max_concurrency,
        ramp_up: None,
        metadata: Vec::new(),
    };
    let mut extra = vec![
        (
            "self_check",
            serde_json::to_value(&outcome.self_check).unwrap_or_default(),
        ),
        (
            "max_concurrency_reached",
            serde_json::json!(outcome.max_in_flight),
        ),
    ];
    extra.extend(metrics::delivered_load(&load.shape, &outcome));
    if ctx.plan.validity.over_saturation != OverSaturation::Off {
        let judged = metrics::over_saturation(
            &outcome.records,
            u64::try_from(load.shape.warmup.as_micros()).unwrap_or(u64::MAX),
            u64::try_from(load.shape.cooldown.as_micros()).unwrap_or(u64::MAX),
        );
        if let Some(judged) = judged {
            extra.push((
                "over_saturation",
                serde_json::to_value(&judged).unwrap_or_default(),
            ));
        }
    }
    if let Some(c) = &chat_counting {
        let warning = c.warning(tokenizer.name());
        if let Some(w) = &warning {
            tracing::warn!("{w}");
        }
        extra.push(("chat_template", serde_json::json!(c.chat_template)));
        extra.push((
            "warnings",
            serde_json::json!(warning.into_iter().collect::<Vec<_>>()),
        ));
    }
    let mut result = metrics::result_json(&header, &summary, &outcome.records, false, &extra);
    if let Some(Ok(site)) = ctx.client {
        result["client_host"] = serde_json::json!(site.host());
    }
    Ok((result, outcome.started_at, series))
}
