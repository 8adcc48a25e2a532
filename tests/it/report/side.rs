//! A run with several deployments (split by a deployment axis): per ISL:OSL, one table with
//! the deployments side by side (rows = load points, a column per deployment for each
//! metric) and one chart line per deployment. On a fixture archive with known numbers, and
//! end to end on two settings of the built-in mock server (which also carries goodput SLOs
//! from the task file into summary.json and the report).

use std::process::{Command, Stdio};

use super::fixture::*;
use crate::common;

fn two_deployments(run_id: &'static str) -> Fixture {
    Fixture {
        deployments: vec![("engine:a", 1.0), ("engine:b", 2.0)],
        concurrency: vec![1, 4],
        lengths: vec![(1000, 1000), (3000, 150)],
        ..clean(run_id, 1.0, vec![0.0])
    }
}

#[test]
fn a_fixture_run_with_two_deployments_has_them_side_by_side() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &two_deployments("20261122-180000"));
    let md = report_md(&run);
    for group in ["1000:1000", "3000:150"] {
        let title = format!("## Benchmark Result (ISL:OSL={group} · deployments side by side)");
        assert_eq!(md.matches(&title).count(), 1, "{md}");
    }
    let header = md
        .lines()
        .find(|l| l.starts_with("| Concurrency | Request Throughput (req/s) · image=engine:a |"))
        .expect("the side-by-side header");
    assert!(
        header.contains(
            "| Output Token Throughput (tok/s) · image=engine:a | Output Token Throughput (tok/s) · image=engine:b |"
        ),
        "{header}"
    );
    assert!(
        header.ends_with("| P99 TPOT (ms) · image=engine:b | Valid |"),
        "{header}"
    );
    // Row concurrency 4 of 1000:1000: each deployment's own figures, b twice as fast.
    let cell = |speed: f64, field: &str| {
        orchestrate::units::number(
            summary(4, 1000, 1000, speed, 0.0, 4)[field]
                .as_f64()
                .unwrap(),
        )
    };
    let want = format!(
        "| 4 | {} | {} | {} | {} |",
        cell(1.0, "request_throughput"),
        cell(2.0, "request_throughput"),
        cell(1.0, "output_throughput"),
        cell(2.0, "output_throughput"),
    );
    assert!(
        md.lines()
            .any(|l| l.starts_with(&want) && l.ends_with("| yes |")),
        "{want}\n{md}"
    );
    // The per-deployment tables are still there, after the side-by-side ones.
    let side = md.find("deployments side by side").unwrap();
    let single = md
        .find("## Benchmark Result (ISL:OSL=1000:1000 · image=engine:a)")
        .expect("the per-deployment table");
    assert!(side < single);
    // The html page has the same tables.
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("<th>Mean TTFT (ms) · image=engine:b</th>"));
    // Throughput vs latency: one line per deployment.
    let svg =
        std::fs::read_to_string(run.join("plots/throughput-vs-latency_1000-1000.svg")).unwrap();
    assert_eq!(svg.matches("<g class=\"series\"").count(), 2, "{svg}");
    assert!(svg.contains("data-series=\"vllm image=engine:a\""), "{svg}");
    assert!(svg.contains("data-series=\"vllm image=engine:b\""), "{svg}");
}

#[test]
fn a_run_with_one_deployment_has_no_side_by_side_table() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let md = report_md(&run);
    assert!(!md.contains("side by side"), "{md}");
}

#[test]
fn a_point_missing_in_one_deployment_reads_absent() {
    let results = tempfile::tempdir().unwrap();
    let f = Fixture {
        failed_at: Some(4),
        ..two_deployments("20261122-180000")
    };
    let run = write_run(results.path(), &f);
    let md = report_md(&run);
    let row = md
        .lines()
        .find(|l| l.starts_with("| 4 | -"))
        .expect("the failed row");
    assert!(
        row.ends_with("| NO (image=engine:a, image=engine:b) |"),
        "{row}"
    );
}

/// Two mock-server settings (a deployment axis `itl` read by the command), two ISL:OSL
/// groups, goodput SLOs only the fast one meets.
const TASK: &str = r#"
name: side
backend: vllm
model: side-model
port: auto
commands:
  - "{{ orchestrate }} mock-server --port {{ port }} --model side-model --preset fixed --itl-ms {{ itl }}"
readiness: {timeout: 30s}
benchmark:
  dataset: {kind: random, input_len: 64, output_len: 8}
  tokenizer: TOKENIZER
  ignore_eos: true
  num_prompts: "{{ concurrency * 2 }}"
  request_timeout: 30s
  goodput: {ttft: 1s, tpot: 20ms}
  matrix:
    itl: [4, 40]
    concurrency: [2, 4]
    output_len: [8, 16]
"#;

#[test]
fn two_mock_deployments_run_side_by_side_with_goodput() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = common::repo().join("data/tokenizer/tokenizer.json");
    let task = dir.path().join("side.yaml");
    std::fs::write(&task, TASK.replace("TOKENIZER", s(&tokenizer))).unwrap();
    let results = dir.path().join("results");
    let state = dir.path().join("state");
    let out = Command::new(common::bin())
        .args(["run", s(&task), "--results", s(&results)])
        .env("ORCHESTRATE_STATE_DIR", &state)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = common::latest(&results, "side");
    let manifest = common::json(&run.join("manifest.json"));
    assert_eq!(manifest["deployments"].as_array().unwrap().len(), 2);
    // Every point's summary.json carries the SLOs and its goodput: the 4 ms deployment meets
    // TPOT <= 20 ms, the 40 ms one never does.
    for p in manifest["points"].as_array().unwrap() {
        assert_eq!(p["status"], "completed", "{p}");
        let summary = common::json(
            &run.join("points")
                .join(p["dir"].as_str().unwrap())
                .join("summary.json"),
        );
        assert_eq!(
            summary["goodput"]["slos"],
            serde_json::json!([{"metric": "ttft", "ms": 1000.0}, {"metric": "tpot", "ms": 20.0}])
        );
        let fraction = summary["goodput"]["good_request_fraction"]
            .as_f64()
            .unwrap();
        let goodput = summary["request_goodput"].as_f64().unwrap();
        if p["axes"]["itl"] == 4 {
            assert_eq!(fraction, 1.0, "{summary}");
            assert!(goodput > 0.0);
        } else {
            assert_eq!(fraction, 0.0, "{summary}");
            assert_eq!(goodput, 0.0);
        }
        assert_eq!(
            p["load"]["goodput"][1]["ms"], 20.0,
            "the planned load keeps the SLOs"
        );
        // Random prompts: the workload's ideal prefix-cache hit rate is known and ~0; the
        // mock keeps no cache, so no achieved rate (unknown, not 0).
        let ideal = summary["ideal_prefix_cache_hit_rate"].as_f64().unwrap();
        assert!(ideal < 0.05, "{summary}");
        assert_eq!(summary["prefix_block_tokens"], 16);
        assert!(summary["prefix_cache_hit_rate"].is_null(), "{summary}");
    }
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    for group in ["64:8", "64:16"] {
        let title = format!("## Benchmark Result (ISL:OSL={group} · deployments side by side)");
        assert_eq!(md.matches(&title).count(), 1, "{md}");
    }
    assert!(
        md.contains(
            "| Request Goodput (req/s) · itl=4 | Request Goodput (req/s) · itl=40 | Valid |"
        ),
        "{md}"
    );
    assert!(
        md.contains("Request goodput: completed requests per second that met TTFT <= 1000 ms, TPOT <= 20 ms (the whole point)."),
        "{md}"
    );
    let rows: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| 2 |") || l.starts_with("| 4 |"))
        .collect();
    assert!(!rows.is_empty(), "{md}");
    let svg = std::fs::read_to_string(run.join("plots/throughput-vs-latency_64-8.svg")).unwrap();
    assert!(svg.contains("data-series=\"vllm itl=4\""), "{svg}");
    assert!(svg.contains("data-series=\"vllm itl=40\""), "{svg}");
}
