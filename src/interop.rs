//! Other tools' result formats, in and out. Import: `vllm bench serve --save-result` JSON
//! (one file per point) and SGLang `bench_serving --output-file` JSONL (one line per point)
//! become an archived run, so existing results can be reported, compared and checked like
//! ours. Export: each point of a run as an llm-d Benchmark Report v0.2 JSON document.
//! Owns the field mappings only; the archive writes the files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::archive::{
    self, Archive, DeploymentRecord, DeploymentStatus, FORMAT_VERSION, ImportedLoad, ImportedShape,
    Manifest, PointLoad, PointRecord, PointStatus, PointSummary, RunStatus, ToolInfo,
};
use crate::dataset::DatasetSpec;
use crate::load::{Limit, Rate};
use crate::validity::{self, Requested, ValidityBounds, Verdict};

/// Result formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImportFormat {
    /// `vllm bench serve --save-result` JSON: one object per file.
    Vllm,
    /// SGLang `bench_serving --output-file` JSONL: one object per line.
    Sglang,
}

/// Import failures.
#[derive(Debug, thiserror::Error)]
pub enum InteropError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a result object: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("no results found in the given files")]
    Empty,
    #[error("failed to write the imported run")]
    Archive(#[from] archive::ArchiveError),
}

/// What the imported run is called.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    pub format: ImportFormat,
    pub task: String,
    pub tag: Option<String>,
    /// Planned lengths, when the result files do not say (vllm's do not).
    pub input_len: Option<u64>,
    pub output_len: Option<u64>,
    pub now: DateTime<Utc>,
}

/// One result object, normalized to vllm bench serve field names.
fn normalize(format: ImportFormat, raw: &Value) -> Value {
    let mut out = raw.as_object().cloned().unwrap_or_default();
    // Bulky per-request arrays stay out of summary.json.
    for k in [
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "generated_texts",
        "errors",
    ] {
        out.remove(k);
    }
    if format == ImportFormat::Sglang {
        for stat in ["mean", "median", "std", "p99", "p90", "p95"] {
            if let Some(v) = out.remove(&format!("{stat}_e2e_latency_ms")) {
                out.insert(format!("{stat}_e2el_ms"), v);
            }
        }
        if !out.contains_key("total_token_throughput") {
            let total = out
                .get("total_throughput")
                .and_then(Value::as_f64)
                .or_else(|| {
                    Some(
                        out.get("input_throughput")?.as_f64()?
                            + out.get("output_throughput")?.as_f64()?,
                    )
                });
            if let Some(t) = total {
                out.insert("total_token_throughput".into(), json!(t));
            }
        }
    }
    if !out.contains_key("failed")
        && let Some(errors) = raw.get("errors").and_then(Value::as_array)
    {
        let failed = errors
            .iter()
            .filter(|e| e.as_str().is_some_and(|s| !s.is_empty()))
            .count();
        out.insert("failed".into(), json!(failed));
    }
    Value::Object(out)
}

fn read_objects(format: ImportFormat, path: &Path) -> Result<Vec<Value>, InteropError> {
    let text = std::fs::read_to_string(path).map_err(|source| InteropError::Read {
        path: path.into(),
        source,
    })?;
    let parse = |line: usize, s: &str| -> Result<Value, InteropError> {
        let v: Value = serde_json::from_str(s).map_err(|e| InteropError::Parse {
            path: path.into(),
            line,
            message: e.to_string(),
        })?;
        if !v.is_object() || v.get("completed").is_none() {
            return Err(InteropError::Parse {
                path: path.into(),
                line,
                message: "no `completed` field".into(),
            });
        }
        Ok(v)
    };
    match format {
        ImportFormat::Vllm => Ok(vec![parse(1, &text)?]),
        ImportFormat::Sglang => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| parse(i + 1, l))
            .collect(),
    }
}

/// The planned load we can reconstruct from a result object (for grouping and validity).
fn load_of(raw: &Value, opts: &ImportOptions) -> PointLoad {
    let n = |k: &str| raw.get(k).and_then(Value::as_u64);
    let input = opts.input_len.or_else(|| n("random_input_len"));
    let output = opts.output_len.or_else(|| n("random_output_len"));
    let len = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let dataset = match (input, output) {
        (Some(i), Some(o)) => Some(DatasetSpec::Random {
            input_len: len(i),
            output_len: len(o),
            range_ratio: raw
                .get("random_range_ratio")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
            prefix_len: 0,
        }),
        _ => None,
    };
    let rate = raw.get("request_rate").and_then(Value::as_f64);
    PointLoad::Imported(Box::new(ImportedLoad {
        imported_from: raw
            .get("backend")
            .and_then(Value::as_str)
            .map(str::to_string),
        dataset,
        shape: ImportedShape {
            max_concurrency: n("max_concurrency").map(len),
            rate: match rate {
                Some(rps) if rps.is_finite() => Rate::Poisson { rps },
                _ => Rate::Unlimited,
            },
            ramp_up: None,
            limit: n("num_prompts").map(Limit::Requests),
        },
    }))
}

/// Import result files as one run under `results/<task>/<run-id>/`; returns its directory.
pub fn import(
    results: &Path,
    files: &[PathBuf],
    opts: &ImportOptions,
) -> Result<PathBuf, InteropError> {
    let mut raws = Vec::new();
    for f in files {
        for raw in read_objects(opts.format, f)? {
            raws.push((f.clone(), raw));
        }
    }
    if raws.is_empty() {
        return Err(InteropError::Empty);
    }
    let first = &raws[0].1;
    let text = |k: &str| first.get(k).and_then(Value::as_str).map(str::to_string);
    let mut points = Vec::new();
    let mut summaries = Vec::new();
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for (file, raw) in &raws {
        let load = load_of(raw, opts);
        let mut axes = BTreeMap::new();
        if let Some(c) = raw.get("max_concurrency").filter(|v| v.is_number()) {
            axes.insert("concurrency".to_string(), c.clone());
        }
        if let Some(r) = raw
            .get("request_rate")
            .filter(|v| v.as_f64().is_some_and(f64::is_finite))
        {
            axes.insert("request_rate".to_string(), r.clone());
        }
        for (k, v) in [
            (
                "input_len",
                opts.input_len
                    .or(raw.get("random_input_len").and_then(Value::as_u64)),
            ),
            (
                "output_len",
                opts.output_len
                    .or(raw.get("random_output_len").and_then(Value::as_u64)),
            ),
        ] {
            if let Some(v) = v {
                axes.insert(k.to_string(), json!(v));
            }
        }
        let id = if axes.is_empty() {
            file.file_stem()
                .map_or("point".into(), |s| s.to_string_lossy().to_string())
        } else {
            archive::axes_label(&axes)
        };
        let rep = seen.entry(id.clone()).and_modify(|r| *r += 1).or_insert(1);
        let summary = normalize(opts.format, raw);
        let mut v = validity::evaluate(
            &Requested::from_load(&load.planned()),
            &PointSummary::from_json(&summary),
            true,
            &ValidityBounds::default(),
        );
        // The server's health after an imported point is unknown: not measured, not passed.
        for g in v.gates.iter_mut().filter(|g| g.name == "server_healthy") {
            g.verdict = Verdict::NotMeasured;
            g.observed = Value::Null;
            g.threshold = "unknown for imported results".into();
        }
        v.valid = v.gates.iter().all(|g| g.verdict != Verdict::Fail);
        points.push(PointRecord {
            dir: PointRecord::dir_name(&id, *rep),
            id,
            deployment: "d1".into(),
            repetition: *rep,
            axes,
            load,
            status: PointStatus::Completed,
            error: None,
            started_at: None,
            ended_at: None,
            validity: Some(v),
        });
        summaries.push(summary);
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        tool: ToolInfo::current(),
        run_id: Archive::new_run_id(results, &opts.task, opts.now),
        task: opts.task.clone(),
        backend: text("backend").unwrap_or_else(|| "unknown".into()),
        model: text("model_id")
            .or_else(|| text("model"))
            .unwrap_or_else(|| "unknown".into()),
        tag: opts.tag.clone(),
        source: files[0].clone(),
        spec_hash: String::new(),
        started_at: opts.now,
        ended_at: Some(opts.now),
        status: RunStatus::Completed,
        resolved: json!({"imported": {"format": format!("{:?}", opts.format).to_lowercase(),
            "files": files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>()}}),
        hosts: BTreeMap::new(),
        deployments: vec![DeploymentRecord {
            id: "d1".into(),
            axes: BTreeMap::new(),
            status: DeploymentStatus::Stopped,
            time_to_ready_s: None,
            error: None,
            served_model: None,
            search: None,
            instances: BTreeMap::new(),
            gpus: None,
        }],
        points: points.clone(),
        invocation: None,
    };
    let archive = Archive::create(results, manifest)?;
    for (p, s) in points.iter().zip(&summaries) {
        archive.write_point_summary(&p.dir, s)?;
    }
    Ok(archive.dir().to_path_buf())
}

fn stats(summary: &PointSummary, field: &str, units: &str) -> Option<Value> {
    let get = |stat: &str| summary.metric(&format!("{stat}_{field}"));
    let mean = get("mean")?;
    let mut s = json!({"units": units, "mean": mean});
    for (ours, theirs) in [
        ("std", "stddev"),
        ("median", "p50"),
        ("p90", "p90"),
        ("p95", "p95"),
        ("p99", "p99"),
    ] {
        if let Some(v) = get(ours) {
            s[theirs] = json!(v);
        }
    }
    Some(s)
}

fn rate(summary: &PointSummary, field: &str, units: &str) -> Option<Value> {
    summary
        .metric(field)
        .map(|v| json!({"units": units, "mean": v}))
}

fn seq_len(planned: Option<u64>, range_ratio: f64, achieved: Option<f64>) -> Value {
    match (planned, achieved) {
        (Some(p), _) if range_ratio > 0.0 => json!({"distribution": "uniform", "value": p,
            "min": (p as f64 * (1.0 - range_ratio)).round() as u64,
            "max": (p as f64 * (1.0 + range_ratio)).round() as u64}),
        (Some(p), _) => json!({"distribution": "fixed", "value": p}),
        (None, Some(a)) => json!({"distribution": "other", "value": a}),
        (None, None) => json!({"distribution": "other", "value": 0}),
    }
}

/// One llm-d Benchmark Report v0.2 per point repetition with a summary. `scenario.stack` is
/// left out: its component schema is not something our manifest maps onto faithfully.
pub fn export_llm_d(run_dir: &Path) -> Result<Vec<(String, Value)>, archive::ArchiveError> {
    let archive = Archive::open(run_dir)?;
    let m = archive.manifest();
    let mut out = Vec::new();
    for p in &m.points {
        let Some(summary) = archive::read_point_summary(run_dir, &p.dir)? else {
            continue;
        };
        let num = |k: &str| summary.metric(k);
        let completed = summary.completed.unwrap_or(0.0);
        let failed = summary.failed.unwrap_or(0.0);
        let mean_len =
            |total: Option<f64>| total.filter(|_| completed > 0.0).map(|t| t / completed);
        let load = p.planned();
        let (input, output, _) = load
            .dataset
            .as_ref()
            .map_or((None, None, None), archive::planned_lengths);
        let range = match &load.dataset {
            Some(DatasetSpec::Random { range_ratio, .. }) => *range_ratio,
            _ => 0.0,
        };
        let rps = match load.shape.rate {
            Some(Rate::Constant { rps } | Rate::Poisson { rps } | Rate::Gamma { rps, .. }) => {
                Some(json!(rps))
            }
            Some(Rate::Unlimited) | None => None,
        };
        // How the prompts' tokens came about: drawn from the vocabulary, or sampled text.
        let source = match &load.dataset {
            Some(DatasetSpec::Random { .. } | DatasetSpec::SharedPrefix { .. }) => "random",
            Some(_) => "sampled",
            None => "unknown",
        };
        let mut standardized = json!({
            "tool": m.tool.name, "tool_version": m.tool.version, "stage": 1, "source": source,
            "input_seq_len": seq_len(input, range, mean_len(summary.total_input_tokens)),
            "output_seq_len": seq_len(output, range, mean_len(summary.total_output_tokens)),
        });
        if let Some(c) = load.shape.max_concurrency {
            standardized["concurrency"] = json!(c);
        }
        if let Some(r) = rps {
            standardized["rate_qps"] = r;
        }
        let mut latency = serde_json::Map::new();
        for (name, field, units) in [
            ("time_to_first_token", "ttft_ms", "ms"),
            ("time_per_output_token", "tpot_ms", "ms/token"),
            ("inter_token_latency", "itl_ms", "ms/token"),
            ("request_latency", "e2el_ms", "ms"),
        ] {
            if let Some(s) = stats(&summary, field, units) {
                latency.insert(name.into(), s);
            }
        }
        let mut throughput = serde_json::Map::new();
        for (name, field, units) in [
            ("output_token_rate", "output_throughput", "tokens/s"),
            ("total_token_rate", "total_token_throughput", "tokens/s"),
            ("request_rate", "request_throughput", "queries/s"),
        ] {
            if let Some(s) = rate(&summary, field, units) {
                throughput.insert(name.into(), s);
            }
        }
        let mut requests = json!({"total": (completed + failed) as u64, "failures": failed as u64});
        if let Some(v) = mean_len(summary.total_input_tokens) {
            requests["input_length"] = json!({"units": "count", "mean": v});
        }
        if let Some(v) = mean_len(summary.total_output_tokens) {
            requests["output_length"] = json!({"units": "count", "mean": v});
        }
        let mut time = json!({});
        if let Some(s) = p.started_at {
            time["start"] = json!(s.to_rfc3339());
        }
        if let Some(e) = p.ended_at {
            time["end"] = json!(e.to_rfc3339());
        }
        if let Some(d) = num("duration") {
            time["duration"] = json!(format!("PT{d}S"));
        }
        let report = json!({
            "version": "0.2",
            "run": {"uid": format!("{}/{}/{}", m.task, m.run_id, p.dir), "eid": format!("{}/{}", m.task, m.run_id), "time": time},
            "scenario": {"load": {
                "metadata": {"schema_version": "0.0.1", "cfg_id": m.spec_hash, "description": format!("orchestrate point {}", p.id)},
                "standardized": standardized,
                "native": {"config": p.load},
            }},
            "results": {"request_performance": {"aggregate": {
                "requests": requests,
                "latency": latency,
                "throughput": throughput,
            }}},
        });
        out.push((p.dir.clone(), report));
    }
    Ok(out)
}
