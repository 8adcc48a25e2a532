//! `orchestrate bench --search` end to end against the in-process mock server, whose decode
//! step takes 10 + 1 ms per running sequence: with p90 TPOT <= 30 ms its capacity is 20
//! concurrent streams, and the search must bracket it within 10% in at most 8 levels and
//! archive the AIPerf-shaped result. And `benchmark.search` in a task file: `run` searches
//! each deployment, every level a point of the run, re-deploying the server between
//! repetitions; bad keys are refused where they are written.

use std::path::Path;
use std::process::Command;

use orchestrate::plan::{self, PlanContext};
use orchestrate::spec;

use orchestrate_mock::{self as mock, Curve, MockConfig, Preset};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::{bin, json, latest, repo, run_command};

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

/// A task whose server is the mock with a decode step of 10 + 1 ms per running sequence
/// (capacity 20 streams at p90 TPOT <= 30 ms), searched from 4 to 64 concurrent streams.
fn search_task(dir: &Path, search_extra: &str) -> std::path::PathBuf {
    let task = dir.join("tsearch.yaml");
    let text = format!(
        "name: tsearch
backend: vllm
model: mock-model
port: auto
commands:
  - \"{{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --preset fixed --decode-ms 0:10,100:110\"
readiness: {{http: /health, timeout: 30s}}
benchmark:
  tokenizer: {}
  ignore_eos: true
  dataset: {{kind: random, input_len: 8, output_len: 10}}
  num_prompts: 60
  request_timeout: 60s
  search:
    axis: concurrency
    min: 4
    max: 64
    slo: [\"p90:tpot:30ms\"]
{search_extra}",
        repo().join("data/tokenizer/tokenizer.json").display()
    );
    std::fs::write(&task, text).unwrap();
    task
}

#[test]
fn a_task_files_search_finds_the_capacity_and_redeploys_between_repetitions() {
    let work = tempfile::tempdir().unwrap();
    let task = search_task(work.path(), "    repeat_deployments: 2\n");
    let plan = Command::new(bin()).arg("plan").arg(&task).output().unwrap();
    let printed = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.status.success(), "{printed}");
    assert!(
        printed.contains("capacity search over concurrency: 4 first, then 64"),
        "{printed}"
    );
    assert!(printed.contains("measured on 2 deployments"), "{printed}");

    let results = work.path().join("results");
    let out = run_command(&task, &results, &work.path().join("state"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed:\n{stderr}");
    let dir = latest(&results, "tsearch");
    let manifest = json(&dir.join("manifest.json"));
    let d = &manifest["deployments"][0];
    let entry = &d["search"];
    assert_eq!(entry["finished"], true, "{entry}");
    // Started again (twice, or more when the bracket moved on a fresh deployment), each
    // time as a new process.
    let starts = entry["starts"].as_array().unwrap();
    assert!(starts.len() >= 2, "{entry}");
    let pid = |i: usize| starts[i]["server-0"].as_u64().unwrap();
    for i in 1..starts.len() {
        assert_ne!(pid(i - 1), pid(i), "{entry}");
    }

    let r = json(&dir.join(entry["file"].as_str().unwrap()));
    let p = r["max_passing_concurrency"].as_f64().unwrap();
    let f = r["first_failing_concurrency"].as_f64().unwrap();
    assert!(p <= 20.0 && f >= 15.0, "[{p}, {f}]\n{stderr}");
    assert!(f / p <= 1.1 + 1e-9, "[{p}, {f}]");
    assert_eq!(r["convergence_reason"], "precision_reached");
    assert_eq!(r["finished"], true);
    assert_eq!(
        r["boundary_summary"]["binding_constraint"],
        "p90 TPOT <= 30 ms"
    );
    let its = r["iterations"].as_array().unwrap();
    assert!(its.iter().any(|i| i["redeploy"] == true), "{r}");
    // Both ends were measured on the second deployment.
    for end in [p, f] {
        let at_end = r["all_points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["level"].as_f64() == Some(end))
            .unwrap();
        assert_eq!(at_end["deployments"], 2, "{at_end}");
    }
    // Every measurement is a point of the run, archived like a sweep's.
    let points = manifest["points"].as_array().unwrap();
    assert_eq!(points.len(), its.len());
    for (it, point) in its.iter().zip(points) {
        let pd = it["point_dir"].as_str().unwrap();
        assert_eq!(point["dir"], pd);
        assert_eq!(point["axes"]["concurrency"].as_f64(), it["level"].as_f64());
        let requests =
            std::fs::read_to_string(dir.join("points").join(pd).join("requests.jsonl")).unwrap();
        assert!(requests.lines().count() as u64 >= it["requests"].as_u64().unwrap());
        assert!(dir.join("points").join(pd).join("summary.json").exists());
    }
    report_draws_the_search(&dir, its.len());
    check_gates_the_capacity(&results, &dir, p);
}

/// `report` draws the search: its section, one history row per measurement, its chart.
fn report_draws_the_search(dir: &Path, measurements: usize) {
    let out = Command::new(bin()).arg("report").arg(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let section = md
        .split("## Capacity search")
        .nth(1)
        .expect("a search section");
    let section = section.split("\n## ").next().unwrap();
    assert!(section.contains("bound by p90 TPOT <= 30 ms"), "{section}");
    let history = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| #"))
        .count();
    assert_eq!(history, measurements, "{section}");
    assert!(
        section.contains("| yes |"),
        "a fresh deployment is marked: {section}"
    );
    // The Pareto view judges points by the search's SLO: the run's summaries hold its p90
    // (the plan adds `search.slo`'s percentiles), so no verdict is unknown.
    let pareto = md
        .split("## Throughput per GPU vs interactivity (Pareto)")
        .nth(1)
        .expect("a Pareto section");
    assert!(
        pareto.contains("SLOs (from the runs' capacity searches): p90 TPOT <= 30 ms"),
        "{pareto}"
    );
    assert!(
        !pareto.contains("is missing from the summaries"),
        "{pareto}"
    );
    assert!(!pareto.contains("| unknown |"), "{pareto}");
    assert!(
        pareto.contains("| yes |") || pareto.contains("| no |"),
        "{pareto}"
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<h2 id=\"search\">Capacity search</h2>"));
    let chart = std::fs::read_dir(dir.join("plots"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("search_"))
        .expect("a search chart");
    assert!(
        std::fs::read_to_string(chart.path())
            .unwrap()
            .contains("interval")
    );
}

/// `check` gates the capacity's lower bound against a baseline's: a baseline whose
/// capacity was `factor` times this run's.
fn check_gates_the_capacity(results: &Path, dir: &Path, capacity: f64) {
    let baseline = |name: &str, factor: f64| {
        let base = results.join("tsearch").join(name);
        let copy = Command::new("cp")
            .arg("-r")
            .arg(dir)
            .arg(&base)
            .status()
            .unwrap();
        assert!(copy.success());
        let mut m = json(&base.join("manifest.json"));
        m["run_id"] = name.into();
        std::fs::write(base.join("manifest.json"), m.to_string()).unwrap();
        let file = base.join(m["deployments"][0]["search"]["file"].as_str().unwrap());
        let mut r = json(&file);
        r["max_passing"] = (capacity * factor).into();
        std::fs::write(&file, r.to_string()).unwrap();
        base
    };
    let check = |base: &Path, threshold: &str| {
        let out = Command::new(bin())
            .arg("check")
            .arg(dir)
            .arg("--baseline")
            .arg(base)
            .args(["--threshold", threshold])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    // The baseline held 1.25 times the load: a 20% drop, beyond 10%.
    let higher = baseline("base-higher", 1.25);
    let (code, md) = check(&higher, "capacity=-10%");
    assert_eq!(code, Some(3), "{md}");
    assert!(md.contains("capacity") && md.contains("REGRESSED"), "{md}");
    // Within 25%, it passes; the levels themselves are not compared point by point.
    let (code, md) = check(&higher, "capacity=-25%");
    assert_eq!(code, Some(0), "{md}");
    assert!(!md.contains("concurrency="), "{md}");
}

#[test]
fn a_task_files_search_is_checked_where_it_is_written() {
    let cases = [
        ("    widht: 0.1\n", "tsearch.yaml:", "widht"),
        ("    width: 2\n", "tsearch.yaml:19:", "`search.width` 2"),
        (
            "    repeat_deployments: 0\n",
            "tsearch.yaml:19:",
            "`search.repeat_deployments`",
        ),
        (
            "    attainment: 90\n",
            "tsearch.yaml:",
            "per-request bounds",
        ),
    ];
    let work = tempfile::tempdir().unwrap();
    for (extra, place, needle) in cases {
        let task = search_task(work.path(), extra);
        let t = match spec::load(&task) {
            Ok(t) => t,
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains(place) && e.contains(needle), "{extra}: {e}");
                continue;
            }
        };
        let err = plan::build(&t, &PlanContext::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains(place), "{extra}: {err}");
        assert!(err.contains(needle), "{extra}: {err}");
    }
    // A swept concurrency leaves the search nothing to move.
    let yaml = "name: t
model: m
commands: [\"true\"]
benchmark:
  dataset: {kind: random, input_len: 8, output_len: 8}
  num_prompts: 1
  search: {axis: concurrency, slo: [\"p99:ttft:2s\"]}
  matrix: {concurrency: [1, 2]}
";
    let task = spec::load_str(Path::new("inline.yaml"), yaml.to_string()).unwrap();
    let err = plan::build(&task, &PlanContext::new())
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("inline.yaml:7:"), "{err}");
    assert!(err.contains("moves `concurrency` itself"), "{err}");
}
