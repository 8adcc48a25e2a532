//! Fixture runs written through the real `archive::Archive` with numbers from a simple
//! saturation model (scaled by a speed factor, with per-repetition jitter), and helpers to
//! drive the built binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use orchestrate::archive::{
    Archive, DeploymentRecord, DeploymentStatus, FORMAT_VERSION, Manifest, PointRecord,
    PointStatus, PointSummary, RunStatus, ToolInfo,
};
use orchestrate::validity::{self, Requested, ValidityBounds};
use serde_json::{Value, json};

use crate::common;

/// A run to write: numbers follow a simple saturation model scaled by `speed`.
pub(super) struct Fixture {
    pub task: &'static str,
    pub backend: &'static str,
    pub run_id: &'static str,
    pub tag: Option<&'static str>,
    /// 2.0 = twice as fast as 1.0 (half the latencies, twice the throughput).
    pub speed: f64,
    /// One relative jitter per repetition (e.g. [0.0, 0.03, -0.03]).
    pub jitter: Vec<f64>,
    pub concurrency: Vec<u32>,
    /// (input_len, output_len) groups.
    pub lengths: Vec<(u32, u32)>,
    /// Concurrency at which the client's in-flight peak falls short (invalid point).
    pub short_at: Option<u32>,
    /// Concurrency at which the point failed (server crashed): no summary, status failed.
    pub failed_at: Option<u32>,
    /// Use SGLang's generated-shared-prefix dataset (5/8 of the input is a shared prefix).
    pub shared_prefix: bool,
    /// A 30 s warm-up and 10 s cool-down were trimmed, and inside that window the server ran
    /// at this speed (the whole point's figures keep `speed`).
    pub trimmed_speed: Option<f64>,
    /// Several deployments split by an `image` axis: (image, speed factor on top of
    /// `speed`). Empty: one deployment `d1` without axes.
    pub deployments: Vec<(&'static str, f64)>,
    /// SLOs were given and this fraction of requests met them (`request_goodput` =
    /// `request_throughput` x fraction, with the `goodput` block of `metrics::Summary`).
    pub goodput: Option<f64>,
    /// The prefix cache's (achieved hit rate, ideal hit rate); the achieved one `None`: the
    /// server reported none (only the workload's ideal is known).
    pub prefix_cache: Option<(Option<f64>, f64)>,
}

impl Fixture {
    pub(super) fn demo(run_id: &'static str) -> Self {
        Self {
            task: "demo",
            backend: "vllm",
            run_id,
            tag: None,
            speed: 1.0,
            jitter: vec![0.0],
            concurrency: vec![1, 4, 16, 64],
            lengths: vec![(1000, 1000), (3000, 150)],
            short_at: Some(64),
            failed_at: None,
            shared_prefix: false,
            trimmed_speed: None,
            deployments: Vec::new(),
            goodput: None,
            prefix_cache: None,
        }
    }
}

pub(super) const PROMPTS: u64 = 100;

pub(super) fn load(c: u32, isl: u32, osl: u32, shared_prefix: bool) -> Value {
    let dataset = if shared_prefix {
        json!({"shared_prefix": {"num_groups": 10, "prompts_per_group": 10,
            "system_prompt_len": isl * 5 / 8, "question_len": isl - isl * 5 / 8, "output_len": osl}})
    } else {
        json!({"random": {"input_len": isl, "output_len": osl, "range_ratio": 0.0, "prefix_len": 0}})
    };
    json!({
        "endpoint": "completions",
        "dataset": dataset,
        "tokenizer": null,
        "ignore_eos": true,
        "shape": {"max_concurrency": c, "rate": "unlimited", "ramp_up": null,
                  "limit": {"requests": PROMPTS}, "warmup": "0s", "cooldown": "0s"},
        "seed": 0,
        "extra_body": {},
        "request_timeout": null
    })
}

pub(super) fn summary(c: u32, isl: u32, osl: u32, speed: f64, jitter: f64, reached: u32) -> Value {
    let slow = (1.0 + jitter) / speed;
    let c = c as f64;
    let tpot = (30.0 + 0.45 * c) * slow;
    let ttft = 0.15 * isl as f64 * (1.0 + c / 16.0) * slow;
    let e2el = ttft + tpot * (osl as f64 - 1.0);
    let rps = c / (e2el / 1000.0);
    let r2 = |v: f64| (v * 100.0).round() / 100.0;
    json!({
        "completed": PROMPTS, "failed": 0, "max_concurrency": c as u64,
        "max_concurrency_reached": reached,
        "total_input_tokens": PROMPTS * isl as u64, "total_output_tokens": PROMPTS * osl as u64,
        "duration": r2(PROMPTS as f64 / rps),
        "request_throughput": r2(rps), "output_throughput": r2(rps * osl as f64),
        "total_token_throughput": r2(rps * (isl + osl) as f64),
        "mean_ttft_ms": r2(ttft), "median_ttft_ms": r2(ttft), "p99_ttft_ms": r2(ttft * 1.2),
        "mean_tpot_ms": r2(tpot), "median_tpot_ms": r2(tpot), "p99_tpot_ms": r2(tpot * 1.05),
        "mean_itl_ms": r2(tpot), "median_itl_ms": r2(tpot), "p99_itl_ms": r2(tpot * 1.5),
        "mean_e2el_ms": r2(e2el), "median_e2el_ms": r2(e2el), "p99_e2el_ms": r2(e2el * 1.1)
    })
}

/// A `trimmed` block (30 s warm-up, 10 s cool-down) with the window's throughput and
/// latencies at `speed`, as `metrics::Trimmed` writes it.
pub(super) fn trimmed(c: u32, isl: u32, osl: u32, speed: f64, jitter: f64) -> Value {
    let whole = summary(c, isl, osl, speed, jitter, c);
    let mut block = json!({
        "warmup_s": 30.0, "cooldown_s": 10.0, "window_start_s": 30.0, "window_end_s": 90.0,
        "output_tokens": PROMPTS * osl as u64 / 2, "requests_started": PROMPTS / 2,
        "requests_completed": PROMPTS / 2,
    });
    for (k, v) in whole.as_object().unwrap() {
        if k == "output_throughput" || k.ends_with("_ms") {
            block[k] = v.clone();
        }
    }
    block
}

/// The fixture's deployments: (id, image axis, speed factor).
type Deployments<'a> = Vec<(String, Option<&'a str>, f64)>;

fn deployments(f: &Fixture) -> Deployments<'_> {
    if f.deployments.is_empty() {
        vec![("d1".to_string(), None, 1.0)]
    } else {
        f.deployments
            .iter()
            .enumerate()
            .map(|(i, (image, speed))| (format!("d{}", i + 1), Some(*image), *speed))
            .collect()
    }
}

/// Every point x repetition of the fixture, pending.
fn point_records(f: &Fixture, deployments: &Deployments<'_>) -> Vec<PointRecord> {
    let mut points = Vec::new();
    for (dep, image, _) in deployments {
        for &(isl, osl) in &f.lengths {
            for &c in &f.concurrency {
                let mut axes = BTreeMap::from([
                    ("concurrency".to_string(), json!(c)),
                    ("input_len".to_string(), json!(isl)),
                    ("output_len".to_string(), json!(osl)),
                ]);
                let mut id = format!("concurrency={c},input_len={isl},output_len={osl}");
                if let Some(image) = image {
                    axes.insert("image".to_string(), json!(image));
                    id = format!("concurrency={c},image={image},input_len={isl},output_len={osl}");
                }
                for rep in 1..=f.jitter.len() as u32 {
                    points.push(PointRecord {
                        id: id.clone(),
                        deployment: dep.clone(),
                        repetition: rep,
                        dir: PointRecord::dir_name(&id, rep),
                        axes: axes.clone(),
                        load: serde_json::from_value(load(c, isl, osl, f.shared_prefix)).unwrap(),
                        status: PointStatus::Pending,
                        error: None,
                        started_at: None,
                        ended_at: None,
                        validity: None,
                    });
                }
            }
        }
    }
    points
}

/// Write the fixture under `results/` through the real archive writer; returns the run dir.
pub(super) fn write_run(results: &Path, f: &Fixture) -> PathBuf {
    let deployments = deployments(f);
    let points = point_records(f, &deployments);
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        tool: ToolInfo {
            name: "orchestrate".into(),
            version: "0.1.0".into(),
            commit: None,
        },
        run_id: f.run_id.into(),
        task: f.task.into(),
        backend: f.backend.into(),
        model: "mock/model".into(),
        tag: f.tag.map(str::to_string),
        source: "tasks/demo.yaml".into(),
        spec_hash: "0".into(),
        started_at: "2026-11-22T18:00:00Z".parse().unwrap(),
        ended_at: Some("2026-11-22T18:01:00Z".parse().unwrap()),
        status: RunStatus::Running,
        resolved: json!({"name": f.task}),
        hosts: BTreeMap::from([("local".to_string(), json!({"gpus": []}))]),
        deployments: deployments
            .iter()
            .map(|(id, image, _)| DeploymentRecord {
                id: id.clone(),
                axes: image
                    .map(|i| BTreeMap::from([("image".to_string(), json!(i))]))
                    .unwrap_or_default(),
                status: DeploymentStatus::Stopped,
                time_to_ready_s: Some(1.0),
                error: None,
                served_model: None,
                search: None,
                instances: BTreeMap::new(),
                gpus: None,
            })
            .collect(),
        points,
        invocation: None,
    };
    let mut archive = Archive::create(results, manifest).unwrap();
    let records = archive.manifest().points.clone();
    for (i, p) in records.iter().enumerate() {
        let c = p.axes["concurrency"].as_u64().unwrap() as u32;
        let isl = p.axes["input_len"].as_u64().unwrap() as u32;
        let osl = p.axes["output_len"].as_u64().unwrap() as u32;
        if f.failed_at == Some(c) {
            archive
                .update(|m| {
                    m.points[i].status = PointStatus::Failed;
                    m.points[i].error = Some("server exited with status 137".into());
                })
                .unwrap();
            continue;
        }
        let reached = if f.short_at == Some(c) { c * 2 / 3 } else { c };
        let jitter = f.jitter[p.repetition as usize - 1];
        let speed = f.speed
            * deployments
                .iter()
                .find(|d| d.0 == p.deployment)
                .map_or(1.0, |d| d.2);
        let mut s = summary(c, isl, osl, speed, jitter, reached);
        if let Some(fraction) = f.goodput {
            let rps = s["request_throughput"].as_f64().unwrap();
            s["request_goodput"] = json!(rps * fraction);
            s["goodput"] = json!({
                "slos": [{"metric": "ttft", "ms": 2000.0}, {"metric": "tpot", "ms": 50.0}],
                "good_requests": (PROMPTS as f64 * fraction).round() as u64,
                "good_request_fraction": fraction,
            });
        }
        if let Some(speed) = f.trimmed_speed {
            s["trimmed"] = trimmed(c, isl, osl, speed, jitter);
        }
        if let Some((achieved, ideal)) = f.prefix_cache {
            s["prefix_cache_hit_rate"] = json!(achieved);
            s["server_prefix_cache_hit_rate"] = json!(achieved);
            s["ideal_prefix_cache_hit_rate"] = json!(ideal);
            s["prefix_cache_hit_vs_ideal"] = json!(achieved.map(|a| a / ideal));
        }
        let v = validity::evaluate(
            &Requested::from_load(&p.planned()),
            &PointSummary::from_json(&s),
            true,
            &ValidityBounds::default(),
        );
        archive.write_point_summary(&p.dir, &s).unwrap();
        archive
            .update(|m| {
                m.points[i].status = PointStatus::Completed;
                m.points[i].validity = Some(v);
            })
            .unwrap();
    }
    archive.update(|m| m.status = RunStatus::Completed).unwrap();
    archive.dir().to_path_buf()
}

pub(super) fn orchestrate(args: &[&str]) -> std::process::Output {
    Command::new(common::bin())
        .args(args)
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap()
}

pub(super) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

pub(super) fn clean(run_id: &'static str, speed: f64, jitter: Vec<f64>) -> Fixture {
    Fixture {
        speed,
        jitter,
        short_at: None,
        ..Fixture::demo(run_id)
    }
}

/// `orchestrate report RUN` (must succeed); the report.md it wrote.
pub(super) fn report_md(run: &Path) -> String {
    let out = orchestrate(&["report", s(run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(run.join("report.md")).unwrap()
}
