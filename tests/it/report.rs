//! Reports, validity, compare, check and the run index over archives written with the real
//! `archive::Archive` (fixtures built here with known numbers), driven through the built
//! `orchestrate` binary where the CLI is the behaviour under test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use orchestrate::archive::{
    Archive, DeploymentRecord, DeploymentStatus, FORMAT_VERSION, Manifest, PointRecord,
    PointStatus, RunStatus, ToolInfo,
};
use orchestrate::validity::{self, Requested, ValidityBounds};
use serde_json::{Value, json};

use crate::common;

/// A run to write: numbers follow a simple saturation model scaled by `speed`.
pub struct Fixture {
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
}

impl Fixture {
    pub fn demo(run_id: &'static str) -> Self {
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
        }
    }
}

const PROMPTS: u64 = 100;

fn load(c: u32, isl: u32, osl: u32) -> Value {
    json!({
        "endpoint": "completions",
        "dataset": {"random": {"input_len": isl, "output_len": osl, "range_ratio": 0.0, "prefix_len": 0}},
        "tokenizer": null,
        "ignore_eos": true,
        "shape": {"max_concurrency": c, "rate": "unlimited", "ramp_up": null,
                  "limit": {"requests": PROMPTS}, "warmup": "0s", "cooldown": "0s"},
        "seed": 0,
        "extra_body": {},
        "request_timeout": null
    })
}

fn summary(c: u32, isl: u32, osl: u32, speed: f64, jitter: f64, reached: u32) -> Value {
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

/// Write the fixture under `results/` through the real archive writer; returns the run dir.
pub fn write_run(results: &Path, f: &Fixture) -> PathBuf {
    let mut points = Vec::new();
    for &(isl, osl) in &f.lengths {
        for &c in &f.concurrency {
            let id = format!("concurrency={c},input_len={isl},output_len={osl}");
            for rep in 1..=f.jitter.len() as u32 {
                points.push(PointRecord {
                    id: id.clone(),
                    deployment: "d1".into(),
                    repetition: rep,
                    dir: PointRecord::dir_name(&id, rep),
                    axes: BTreeMap::from([
                        ("concurrency".to_string(), json!(c)),
                        ("input_len".to_string(), json!(isl)),
                        ("output_len".to_string(), json!(osl)),
                    ]),
                    load: load(c, isl, osl),
                    status: PointStatus::Pending,
                    error: None,
                    started_at: None,
                    ended_at: None,
                    validity: None,
                });
            }
        }
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        tool: ToolInfo {
            name: "orchestrate".into(),
            version: "0.1.0".into(),
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
        deployments: vec![DeploymentRecord {
            id: "d1".into(),
            axes: BTreeMap::new(),
            status: DeploymentStatus::Stopped,
            time_to_ready_s: Some(1.0),
            error: None,
            instances: BTreeMap::new(),
        }],
        points,
    };
    let mut archive = Archive::create(results, manifest).unwrap();
    let records = archive.manifest().points.clone();
    for (i, p) in records.iter().enumerate() {
        let c = p.axes["concurrency"].as_u64().unwrap() as u32;
        let isl = p.axes["input_len"].as_u64().unwrap() as u32;
        let osl = p.axes["output_len"].as_u64().unwrap() as u32;
        let reached = if f.short_at == Some(c) { c * 2 / 3 } else { c };
        let jitter = f.jitter[p.repetition as usize - 1];
        let s = summary(c, isl, osl, f.speed, jitter, reached);
        let v = validity::evaluate(
            &Requested::from_load(&p.load),
            &s,
            true,
            &ValidityBounds::default(),
        );
        archive.write_point_summary(&p.dir, &s).unwrap();
        archive
            .update(|m| {
                m.points[i].status = PointStatus::Completed;
                m.points[i].validity = Some(v.to_value());
            })
            .unwrap();
    }
    archive.update(|m| m.status = RunStatus::Completed).unwrap();
    archive.dir().to_path_buf()
}

fn orchestrate(args: &[&str]) -> std::process::Output {
    Command::new(common::bin())
        .args(args)
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn report_md_has_the_seed_tables_per_isl_osl() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let out = orchestrate(&["report", s(&run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    insta::assert_snapshot!("report_md", md);
}

#[test]
fn report_html_is_self_contained_and_holds_every_chart() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let out = orchestrate(&["report", s(&run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let plots: Vec<PathBuf> = std::fs::read_dir(run.join("plots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // Per ISL:OSL: throughput vs latency, TTFT and TPOT vs concurrency.
    assert_eq!(plots.len(), 6, "{plots:?}");
    for plot in &plots {
        let svg = std::fs::read_to_string(plot).unwrap();
        let title = svg.lines().nth(1).unwrap();
        assert!(title.starts_with("<title>"), "{title}");
        assert!(
            html.contains(svg.trim()),
            "report.html inlines {}",
            plot.display()
        );
    }
    assert_eq!(html.matches("<svg ").count(), plots.len());
    assert_eq!(
        html.matches("<svg ").count(),
        html.matches("</svg>").count()
    );
    // Nothing from the network: the only URL is the SVG namespace.
    let urls = html.matches("http").count();
    assert_eq!(urls, html.matches("http://www.w3.org/2000/svg").count());
    assert!(!html.contains("<script") && !html.contains("<link"));
    // The invalid point is hollow, listed in the chart and in the page.
    assert!(html.contains("Invalid points (hollow markers):"));
    assert!(html.contains("concurrency=64,input_len=1000,output_len=1000"));
    assert!(html.contains("concurrency (observed 42, needs &gt;= 64)"));
    // Tags balance (a cheap well-formedness check).
    for tag in ["table", "tr", "figure", "ul", "g"] {
        assert_eq!(
            html.matches(&format!("<{tag}>")).count() + html.matches(&format!("<{tag} ")).count(),
            html.matches(&format!("</{tag}>")).count(),
            "<{tag}> balanced"
        );
    }
}

#[test]
fn templates_can_be_overridden() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let templates = tempfile::tempdir().unwrap();
    std::fs::write(
        templates.path().join("report.md.j2"),
        "custom {{ runs[0].backend }}: {{ tables | length }} tables\n",
    )
    .unwrap();
    let out = orchestrate(&["report", s(&run), "--template", s(templates.path())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert_eq!(md, "custom vllm: 2 tables\n");
    // report.html still came from the built-in template.
    assert!(
        std::fs::read_to_string(run.join("report.html"))
            .unwrap()
            .contains("<svg")
    );
}

#[test]
fn report_of_a_missing_run_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(&["report", s(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a run directory"), "{err}");
}

#[test]
fn terminal_table_is_what_the_runner_prints() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let text = orchestrate::report::terminal_table(&run).unwrap();
    insta::assert_snapshot!("terminal_table", text);
}

fn clean(run_id: &'static str, speed: f64, jitter: Vec<f64>) -> Fixture {
    Fixture {
        speed,
        jitter,
        short_at: None,
        ..Fixture::demo(run_id)
    }
}

#[test]
fn check_passes_a_run_against_itself() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let out = orchestrate(&["check", s(&run), "--baseline", s(&run)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("orchestrate check: passed"), "{md}");
    assert_eq!(std::fs::read_to_string(run.join("check.md")).unwrap(), md);
    let junit = std::fs::read_to_string(run.join("check.junit.xml")).unwrap();
    assert!(junit.contains("tests=\"32\" failures=\"0\""), "{junit}");
}

#[test]
fn check_fails_with_exit_3_against_a_baseline_twice_as_fast() {
    let results = tempfile::tempdir().unwrap();
    write_run(results.path(), &clean("20261121-180000", 2.0, vec![0.0]));
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let summary = results.path().join("step-summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let out = Command::new(common::bin())
        .args(["check", s(&run), "--baseline", "previous"])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("orchestrate check: REGRESSION"), "{md}");
    assert!(
        md.contains("against baseline `demo/20261121-180000`"),
        "{md}"
    );
    // Throughput halves (-50%), latencies double (+100%): every gated metric regresses.
    assert_eq!(md.matches("**REGRESSED**").count(), 32, "{md}");
    assert!(md.contains("| -50.0% |"), "{md}");
    let appended = std::fs::read_to_string(&summary).unwrap();
    assert!(appended.starts_with("earlier step\n## orchestrate check: REGRESSION"));
    let junit = std::fs::read_to_string(run.join("check.junit.xml")).unwrap();
    assert!(junit.contains("failures=\"32\""), "{junit}");
    assert!(
        junit.contains("<failure message=\"regressed: baseline"),
        "{junit}"
    );
}

#[test]
fn repeated_noisy_runs_do_not_fail_check() {
    let results = tempfile::tempdir().unwrap();
    // ±3% jitter over three repetitions; the current run's median is 3% slower.
    write_run(
        results.path(),
        &clean("20261121-180000", 1.0, vec![0.0, 0.03, -0.03]),
    );
    let run = write_run(
        results.path(),
        &clean("20261122-180000", 1.0, vec![0.03, 0.06, 0.0]),
    );
    let tight = [
        "--threshold",
        "p99_ttft_ms=+2%",
        "--threshold",
        "output_throughput=-2%",
    ];
    let mut args = vec!["check", s(&run), "--baseline", "previous"];
    args.extend(tight);
    let out = orchestrate(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        md.contains("| 3/3 |"),
        "medians over three repetitions: {md}"
    );
    // The same data without noise awareness would fail: the spread is what saves it.
    args.extend(["--noise-k", "0"]);
    let out = orchestrate(&args);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // And the report shows the spread.
    orchestrate(&["report", s(&run)]);
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(report.contains(" ±2.9%"), "{report}");
}

#[test]
fn an_invalid_point_fails_check() {
    let results = tempfile::tempdir().unwrap();
    let base = write_run(results.path(), &clean("20261121-180000", 1.0, vec![0.0]));
    let run = write_run(
        results.path(),
        &Fixture {
            short_at: Some(16),
            ..clean("20261122-180000", 1.0, vec![0.0])
        },
    );
    let out = orchestrate(&["check", s(&run), "--baseline", s(&base)]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("**INVALID**"));
}

#[test]
fn bad_threshold_syntax_is_exit_2_with_a_clear_message() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let out = orchestrate(&[
        "check",
        s(&run),
        "--baseline",
        s(&run),
        "--threshold",
        "p99_ttft_ms=10%",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("threshold `p99_ttft_ms=10%` is not `METRIC=+N%` or `METRIC=-N%`")
            && err.contains("needs a sign"),
        "{err}"
    );
    let out = orchestrate(&["check", s(&run), "--baseline", "nightly-42"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`nightly-42` is not a run directory"), "{err}");
}

#[test]
fn compare_two_runs_matches_points_and_overlays_curves() {
    let results = tempfile::tempdir().unwrap();
    let a = write_run(
        results.path(),
        &Fixture {
            lengths: vec![(1000, 1000)],
            ..clean("20261122-180000", 1.0, vec![0.0])
        },
    );
    let b = write_run(
        results.path(),
        &Fixture {
            task: "demo-sglang",
            backend: "sglang",
            concurrency: vec![1, 4, 16],
            lengths: vec![(1000, 1000)],
            ..clean("20261122-190000", 1.25, vec![0.0])
        },
    );
    let out_dir = results.path().join("cmp");
    let out = Command::new(common::bin())
        .args([
            "compare",
            s(&a),
            "demo-sglang",
            "--results",
            s(results.path()),
            "--out",
            s(&out_dir),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // 25% faster: throughput up 25%, TPOT down 20%; concurrency 64 only in vllm.
    assert!(
        text.contains("Output token throughput (tok/s), ISL:OSL=1000:1000"),
        "{text}"
    );
    assert!(text.contains("+25.0% better"), "{text}");
    assert!(text.contains("-20.0% better"), "{text}");
    assert!(text.contains("absent"), "{text}");
    assert!(
        text.contains("concurrency=64 (1000:1000): only in vllm"),
        "{text}"
    );
    let md = std::fs::read_to_string(out_dir.join("compare.md")).unwrap();
    assert!(
        md.contains("| Point | vllm | sglang | sglang vs vllm |"),
        "{md}"
    );
    let html = std::fs::read_to_string(out_dir.join("compare.html")).unwrap();
    assert_eq!(html.matches("<svg ").count(), 3);
    assert_eq!(
        html.matches("data-series=\"vllm\"").count(),
        3,
        "one vllm curve per chart"
    );
    assert_eq!(
        html.matches("data-series=\"sglang\"").count(),
        3,
        "one sglang curve per chart"
    );
    assert!(
        out_dir
            .join("plots/ttft-vs-concurrency_1000-1000.svg")
            .is_file()
    );
    let _ = b;
}

#[test]
fn report_of_two_runs_overlays_their_curves() {
    let results = tempfile::tempdir().unwrap();
    let a = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let b = write_run(
        results.path(),
        &Fixture {
            tag: Some("nightly"),
            ..clean("20261122-190000", 2.0, vec![0.0])
        },
    );
    let out_dir = results.path().join("both");
    let out = orchestrate(&["report", s(&a), s(&b), "--out", s(&out_dir)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    // Same backend and task: the run ids label the runs.
    assert!(
        md.contains("## Benchmark Result (ISL:OSL=1000:1000 · 20261122-190000)"),
        "{md}"
    );
    let svg =
        std::fs::read_to_string(out_dir.join("plots/tpot-vs-concurrency_3000-150.svg")).unwrap();
    assert_eq!(svg.matches("<g class=\"series\"").count(), 2);
}

#[test]
fn runs_lists_and_filters_the_index() {
    let results = tempfile::tempdir().unwrap();
    write_run(results.path(), &clean("20261121-180000", 1.0, vec![0.0]));
    write_run(
        results.path(),
        &Fixture {
            tag: Some("nightly"),
            ..clean("20261122-180000", 1.0, vec![0.0])
        },
    );
    write_run(
        results.path(),
        &Fixture {
            task: "other",
            ..clean("20261122-190000", 1.0, vec![0.0])
        },
    );
    let out = orchestrate(&["runs", "--results", s(results.path())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 4, "header + 3 runs: {text}");
    let out = orchestrate(&[
        "runs",
        "--results",
        s(results.path()),
        "--task",
        "demo",
        "--tag",
        "nightly",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("20261122-180000") && text.contains("nightly"),
        "{text}"
    );
    let out = orchestrate(&[
        "runs",
        "--results",
        s(results.path()),
        "--task",
        "demo",
        "--resolve",
        "previous",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .ends_with("demo/20261121-180000")
    );
    let out = orchestrate(&[
        "runs",
        "--results",
        s(results.path()),
        "--task",
        "demo",
        "--resolve",
        "nightly",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .ends_with("demo/20261122-180000")
    );
}
