//! A point's time series end to end on the mock: a short closed-loop point archives
//! timeseries.json whose client in-flight holds the concurrency through the measured window
//! and whose server series (the mock's vLLM-named gauges, scraped on the same clock) shows
//! running requests; the report draws it with the window shaded; `off` archives none.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{bin, json, latest, mock_task, run_command};

/// Run `benchmark` against the mock; the run directory and its only point's directory.
fn one_point(work: &Path, name: &str, benchmark: &str) -> (PathBuf, PathBuf) {
    run_task(work, name, &mock_task(work, name, 5, benchmark))
}

/// Run the task `name` at `task`; the run directory and its only point's directory.
fn run_task(work: &Path, name: &str, task: &Path) -> (PathBuf, PathBuf) {
    let results = work.join("results");
    let out = run_command(task, &results, &work.join("state"))
        .output()
        .unwrap();
    let dir = latest(&results, name);
    let manifest = json(&dir.join("manifest.json"));
    let point = &manifest["points"][0];
    assert_eq!(
        point["status"],
        "completed",
        "{point}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let point_dir = dir.join("points").join(point["dir"].as_str().unwrap());
    (dir, point_dir)
}

#[test]
fn a_point_archives_client_and_server_series_on_one_clock() {
    let work = tempfile::tempdir().unwrap();
    // Four streams for 4 s, 1 s warm-up and cool-down, half-second bins: each request takes
    // about 40 x 5 ms, so the loop keeps four in flight throughout.
    let (run, point) = one_point(
        work.path(),
        "series",
        "  dataset: {kind: random, input_len: 16, output_len: 40}\n  concurrency: 4\n  duration: 4s\n  warmup: 1s\n  cooldown: 1s\n  timeseries_interval: 500ms\n",
    );
    let ts = json(&point.join("timeseries.json"));
    assert_eq!(ts["interval_s"], 0.5, "{ts}");
    let (from, to) = (
        ts["window"]["from_s"].as_f64().unwrap(),
        ts["window"]["to_s"].as_f64().unwrap(),
    );
    assert_eq!(from, 1.0, "{ts}");
    assert!(to > from + 1.0, "{ts}");
    // Every bin wholly inside the measured window holds the concurrency.
    let inside: Vec<&Value> = ts["client"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| {
            let t = b["t_s"].as_f64().unwrap();
            t >= from && t + 0.5 <= to
        })
        .collect();
    assert!(inside.len() >= 3, "{ts}");
    for b in &inside {
        let in_flight = b["in_flight"].as_f64().unwrap();
        assert!((3.6..=4.0001).contains(&in_flight), "{b}");
        assert!(b["output_tokens_per_s"].as_f64().unwrap() > 0.0, "{b}");
        assert!(b["ttft_p50_ms"].as_f64().is_some(), "{b}");
    }
    // The mock's own gauges, scraped on the same clock: requests running in the window.
    let entry = &ts["servers"][0];
    assert_eq!(entry["source"], "entry", "{ts}");
    let samples = entry["samples"].as_array().unwrap();
    let during: Vec<&Value> = samples
        .iter()
        .filter(|s| (from..to).contains(&s["t_s"].as_f64().unwrap()))
        .collect();
    assert!(!during.is_empty(), "{entry}");
    assert!(
        during
            .iter()
            .any(|s| s["running"].as_f64().unwrap_or(0.0) > 0.0),
        "{entry}"
    );
    assert!(
        samples
            .iter()
            .any(|s| s["kv_cache_usage"].as_f64().is_some()),
        "{entry}"
    );
    // The report draws it, with the window shaded.
    let out = std::process::Command::new(bin())
        .arg("report")
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("over time"), "no time-series figure");
    for label in [
        ">warm-up<",
        ">measured<",
        ">cool-down<",
        "entry running",
        "in flight",
    ] {
        assert!(html.contains(label), "{label} missing from the report");
    }
}

#[test]
fn off_archives_no_series() {
    let work = tempfile::tempdir().unwrap();
    let (_, point) = one_point(
        work.path(),
        "noseries",
        "  dataset: {kind: random, input_len: 16, output_len: 4}\n  concurrency: 2\n  num_prompts: 4\n  timeseries_interval: off\n",
    );
    assert!(point.join("summary.json").exists());
    assert!(!point.join("timeseries.json").exists());
}

#[test]
fn every_instance_of_the_deployment_is_scraped_on_the_same_clock() {
    // Two idle `worker` replicas beside the `front` the client loads: all three in the series.
    let work = tempfile::tempdir().unwrap();
    let mock = "\"{{ orchestrate }} mock-server --port {{ port }} --preset fixed --itl-ms 5\"";
    let ready = "{http: /health, timeout: 30s}";
    let task = work.path().join("instances.yaml");
    std::fs::write(
        &task,
        format!(
            "name: instances\nbackend: vllm\nmodel: mock-model\nroles:\n  worker:\n    replicas: 2\n    port: auto\n    readiness: {ready}\n    commands: [{mock}]\n  front:\n    port: auto\n    readiness: {ready}\n    depends_on: [worker]\n    commands: [{mock}]\nentry_role: front\nbenchmark:\n  tokenizer: {}\n  ignore_eos: true\n  dataset: {{kind: random, input_len: 16, output_len: 40}}\n  concurrency: 2\n  duration: 2s\n",
            crate::common::repo()
                .join("data/tokenizer/tokenizer.json")
                .display()
        ),
    )
    .unwrap();
    let (_, point) = run_task(work.path(), "instances", &task);
    let ts = json(&point.join("timeseries.json"));
    let servers = ts["servers"].as_array().unwrap();
    let mut names: Vec<&str> = servers
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["entry", "worker-0", "worker-1"], "{ts}");
    for s in servers {
        let samples = s["samples"].as_array().unwrap();
        // Before, about every second during, and after the load.
        assert!(samples.len() >= 3, "{s}");
        let busy = samples.iter().any(|x| x["running"].as_f64().unwrap() > 0.0);
        // Only the entry had requests; the workers' gauges are there, at zero.
        assert_eq!(busy, s["source"] == "entry", "{s}");
    }
}
