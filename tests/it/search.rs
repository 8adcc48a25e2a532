//! `orchestrate bench --search` end to end against the in-process mock server, whose decode
//! step takes 10 + 1 ms per running sequence: with p90 TPOT <= 30 ms its capacity is 20
//! concurrent streams, and the search must bracket it within 10% in at most 8 levels and
//! archive the AIPerf-shaped result. And `benchmark.search` in a task file, which `run` does
//! not do yet, is refused where it is written.

use std::path::Path;
use std::process::Command;

use orchestrate::plan::{self, PlanContext};
use orchestrate::spec;

use orchestrate_mock::{self as mock, Curve, MockConfig, Preset};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::{bin, repo};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_search_brackets_the_mocks_computable_capacity() {
    let mut c = MockConfig::new(Preset::Fixed);
    c.latency.decode = Curve::linear(10.0, 1.0);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    let _stop = cancel.clone().drop_guard();
    tokio::spawn(mock::serve(c, listener, cancel));

    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["bench", "--base-url", &base, "--model", "mock-model"])
        .arg("--tokenizer")
        .arg(repo().join("data/tokenizer/tokenizer.json"))
        .args(["--random-input-len", "8", "--random-output-len", "10"])
        .args([
            "--ignore-eos",
            "--num-prompts",
            "60",
            "--request-timeout",
            "60s",
        ])
        .args([
            "--search",
            "concurrency",
            "--search-min",
            "4",
            "--search-max",
            "64",
        ])
        .args(["--search-slo", "p90:tpot:30ms"])
        .args([
            "--save-result",
            "--result-filename",
            "r.json",
            "--result-dir",
        ])
        .arg(dir.path());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("Capacity Search Result"), "{stdout}");
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("r.slo_search.json")).unwrap(),
    )
    .unwrap();
    let p = r["max_passing_concurrency"].as_f64().unwrap();
    let f = r["first_failing_concurrency"].as_f64().unwrap();
    // Above 20 the model's TPOT is over 30 ms for every request: no level there can pass.
    // A busy machine only slows steps down, so the measured edge may sit a little lower.
    assert!(p <= 20.0 && f >= 15.0, "[{p}, {f}]\n{stderr}");
    assert!(f / p <= 1.1 + 1e-9, "[{p}, {f}]\n{stderr}");
    assert!(r["points"].as_u64().unwrap() <= 8, "{stderr}");
    assert_eq!(r["convergence_reason"], "precision_reached");
    assert_eq!(
        r["boundary_summary"]["binding_constraint"],
        "p90 TPOT <= 30 ms"
    );
    assert_eq!(r["first_failing_breach"]["metric_tag"], "tpot");
    assert!(
        r["throughput_at_edge"]["output_throughput"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{r}"
    );
    // One progress line per measurement, each with its verdict.
    let lines = stderr.lines().filter(|l| l.starts_with("search: ")).count();
    assert_eq!(
        lines as u64,
        r["measurements"].as_u64().unwrap(),
        "{stderr}"
    );
}

#[test]
fn a_task_files_search_is_refused_where_it_is_written() {
    let yaml = "name: t
model: m
commands: [\"true\"]
benchmark:
  dataset: {kind: random, input_len: 8, output_len: 8}
  num_prompts: 1
  search: {axis: concurrency, slo: [\"p99:ttft:2s\"]}
";
    let task = spec::load_str(Path::new("inline.yaml"), yaml.to_string()).unwrap();
    let err = plan::build(&task, &PlanContext::new())
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("inline.yaml:7:"), "{err}");
    assert!(
        err.contains("not supported by `orchestrate run` yet"),
        "{err}"
    );
    assert!(err.contains("orchestrate bench --search"), "{err}");
}
