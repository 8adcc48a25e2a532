//! Across runs: `compare`, the `runs` index, import of vllm/SGLang results and export as
//! llm-d Benchmark Reports.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use super::fixture::*;
use crate::common;

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
    // Three overlaid charts and the Pareto view.
    assert_eq!(html.matches("<svg ").count(), 4);
    assert_eq!(
        html.matches("data-series=\"vllm\"").count(),
        4,
        "one vllm curve per chart"
    );
    assert_eq!(
        html.matches("data-series=\"sglang\"").count(),
        4,
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

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario read top to bottom: two tools' results imported, then both exported"
)]
fn vllm_and_sglang_results_import_as_runs_and_export_as_llm_d_reports() {
    let results = tempfile::tempdir().unwrap();
    let dir = results.path();
    // vllm bench serve --save-result: one JSON object per point, lengths not recorded.
    for c in [4u32, 16] {
        let mut v = summary(c, 1000, 100, 1.0, 0.0, c);
        v["backend"] = json!("vllm");
        v["model_id"] = json!("org/model");
        v["num_prompts"] = json!(PROMPTS);
        v["request_rate"] = json!("inf");
        v["max_concurrency"] = json!(c);
        v["ttfts"] = json!([0.1, 0.2]);
        v.as_object_mut().unwrap().remove("max_concurrency_reached");
        std::fs::write(dir.join(format!("vllm-c{c}.json")), v.to_string()).unwrap();
    }
    // SGLang bench_serving --output-file: one line per point, e2e latency named differently.
    let mut lines = String::new();
    for c in [4u32, 16] {
        let v = summary(c, 1000, 100, 1.25, 0.0, c);
        let line = json!({
            "backend": "sglang", "dataset_name": "random", "request_rate": "inf",
            "max_concurrency": c, "random_input_len": 1000, "random_output_len": 100,
            "random_range_ratio": 0.0, "completed": PROMPTS, "duration": v["duration"],
            "total_input_tokens": v["total_input_tokens"], "total_output_tokens": v["total_output_tokens"],
            "request_throughput": v["request_throughput"], "input_throughput": 1.0,
            "output_throughput": v["output_throughput"],
            "mean_e2e_latency_ms": v["mean_e2el_ms"], "p99_e2e_latency_ms": v["p99_e2el_ms"],
            "mean_ttft_ms": v["mean_ttft_ms"], "p99_ttft_ms": v["p99_ttft_ms"],
            "mean_tpot_ms": v["mean_tpot_ms"], "p99_tpot_ms": v["p99_tpot_ms"],
            "concurrency": c as f64 * 0.9
        });
        lines.push_str(&format!("{line}\n"));
    }
    std::fs::write(dir.join("sglang.jsonl"), lines).unwrap();
    let results_dir = dir.join("results");
    let out = orchestrate(&[
        "runs",
        "import",
        "--format",
        "vllm",
        "--task",
        "ext-vllm",
        "--input-len",
        "1000",
        "--output-len",
        "100",
        "--results",
        s(&results_dir),
        s(&dir.join("vllm-c4.json")),
        s(&dir.join("vllm-c16.json")),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vllm_run = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let out = orchestrate(&[
        "runs",
        "import",
        "--format",
        "sglang",
        "--task",
        "ext-sglang",
        "--results",
        s(&results_dir),
        s(&dir.join("sglang.jsonl")),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sglang_run = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // The imported points are judged: the vllm files carry no in-flight peak (not measured).
    let m = orchestrate::archive::read_manifest(&vllm_run).unwrap();
    assert_eq!(m.backend, "vllm");
    assert_eq!(m.model, "org/model");
    assert_eq!(m.points.len(), 2);
    let gates = m.points[0].validity.as_ref().unwrap().to_value()["gates"].clone();
    let verdict = |name: &str| {
        gates
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap()["verdict"]
            .clone()
    };
    assert_eq!(verdict("completed"), "pass");
    assert_eq!(verdict("output_len"), "pass");
    assert_eq!(verdict("concurrency"), "not_measured");
    assert_eq!(verdict("server_healthy"), "not_measured");
    let s_summary = std::fs::read_to_string(
        sglang_run.join("points/concurrency=4,input_len=1000,output_len=100/summary.json"),
    )
    .unwrap();
    assert!(s_summary.contains("\"mean_e2el_ms\""), "{s_summary}");
    // Imported runs compare like ours.
    let out = orchestrate(&["compare", s(&vllm_run), s(&sglang_run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Mean TPOT (ms), ISL:OSL=1000:100"), "{text}");
    assert!(text.contains("-20.0% better"), "{text}");
    // Export: one llm-d Benchmark Report v0.2 per point.
    let out = orchestrate(&["runs", "export", s(&sglang_run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(files.len(), 2);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(files[0]).unwrap()).unwrap();
    assert_eq!(report["version"], "0.2");
    let agg = &report["results"]["request_performance"]["aggregate"];
    assert_eq!(agg["requests"]["total"], PROMPTS);
    assert_eq!(agg["latency"]["time_to_first_token"]["units"], "ms");
    assert_eq!(agg["latency"]["time_per_output_token"]["units"], "ms/token");
    // Field names and unit strings as llm-d-benchmark's v0.2 schema spells them (its models
    // forbid unknown fields, so a misspelt key fails their validation).
    assert_eq!(agg["throughput"]["request_rate"]["units"], "queries/s");
    assert_eq!(agg["throughput"]["output_token_rate"]["units"], "tokens/s");
    assert_eq!(agg["requests"]["input_length"]["units"], "count");
    let scenario_load = report["scenario"]["load"].as_object().unwrap();
    let mut keys: Vec<&str> = scenario_load.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["metadata", "native", "standardized"]);
    let load = &report["scenario"]["load"]["standardized"];
    assert_eq!(load["source"], "random");
    assert_eq!(
        load["input_seq_len"],
        json!({"distribution": "fixed", "value": 1000})
    );
    assert_eq!(load["concurrency"], 4);
}
