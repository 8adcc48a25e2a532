//! The delivered-load gates end to end on the mock: a normal closed-loop run delivers its cap
//! and is valid with its delivered-load figures in summary.json; a paced run held to a dispatch
//! lag bound no client can meet is marked invalid, naming the `dispatch_lag` gate. Also the
//! summary's percentiles chosen by `benchmark.percentiles`.

use serde_json::Value;

use crate::common::{json, latest, mock_task, run_command};

/// Run `benchmark` against the mock; the manifest's only point and its summary.json.
fn one_point(name: &str, benchmark: &str) -> (Value, Value) {
    let work = tempfile::tempdir().unwrap();
    let task = mock_task(work.path(), name, 5, benchmark);
    let results = work.path().join("results");
    let out = run_command(&task, &results, &work.path().join("state"))
        .output()
        .unwrap();
    let dir = latest(&results, name);
    let manifest = json(&dir.join("manifest.json"));
    let point = manifest["points"][0].clone();
    assert_eq!(
        point["status"],
        "completed",
        "{point}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = json(
        &dir.join("points")
            .join(point["dir"].as_str().unwrap())
            .join("summary.json"),
    );
    (point, summary)
}

fn gate<'a>(point: &'a Value, name: &str) -> &'a Value {
    point["validity"]["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no gate {name}: {point}"))
}

#[test]
fn a_closed_loop_on_the_mock_delivers_its_cap_and_is_valid() {
    let (point, summary) = one_point(
        "delivered",
        "  dataset: {kind: random, input_len: 16, output_len: 20}\n  concurrency: 4\n  num_prompts: 24\n",
    );
    assert_eq!(point["validity"]["valid"], true, "{point}");
    let ratio = summary["delivered_concurrency_ratio"].as_f64().unwrap();
    assert!((0.9..=1.0001).contains(&ratio), "ratio {ratio}: {summary}");
    let mean = summary["mean_in_flight"].as_f64().unwrap();
    assert!((ratio * 4.0 - mean).abs() < 1e-3, "{mean} vs {ratio}");
    assert!(
        summary["p99_event_loop_lag_ms"].as_f64().is_some(),
        "{summary}"
    );
    // A closed loop has no schedule to lag behind.
    assert!(summary.get("p99_dispatch_lag_ms").is_none(), "{summary}");
    assert_eq!(gate(&point, "delivered_concurrency")["verdict"], "pass");
    assert_eq!(gate(&point, "event_loop_lag")["verdict"], "pass");
    assert_eq!(gate(&point, "dispatch_lag")["verdict"], "not_measured");
}

#[test]
fn a_paced_point_that_sent_late_is_invalid_with_the_reason() {
    let (point, summary) = one_point(
        "late",
        "  dataset: {kind: random, input_len: 16, output_len: 5}\n  request_rate: 100\n  num_prompts: 30\n  validity: {max_dispatch_lag_ms: 0.000001}\n",
    );
    let lag = summary["p99_dispatch_lag_ms"].as_f64().unwrap();
    assert!(lag > 0.000001, "{summary}");
    assert_eq!(point["validity"]["valid"], false, "{point}");
    let g = gate(&point, "dispatch_lag");
    assert_eq!(g["verdict"], "fail", "{g}");
    assert_eq!(g["threshold"], "<= 0.000001 ms", "{g}");
    assert_eq!(
        g["observed"].as_f64(),
        Some((lag * 1e4).round() / 1e4),
        "{g}"
    );
    // Paced, no cap: nothing to fill.
    assert_eq!(
        gate(&point, "delivered_concurrency")["verdict"],
        "not_measured"
    );
}

/// `benchmark.percentiles` chooses the summary's percentiles (vLLM's `--metric-percentiles`),
/// and a percentile out of range is refused where it is written.
#[test]
fn the_task_files_percentiles_are_the_summarys_and_a_bad_one_is_refused() {
    let (_, summary) = one_point(
        "percentiles",
        "  dataset: {kind: random, input_len: 16, output_len: 8}\n  concurrency: 2\n  num_prompts: 6\n  percentiles: [50, 90]\n",
    );
    for key in ["p50_ttft_ms", "p90_ttft_ms", "p50_tpot_ms", "p90_itl_ms"] {
        assert!(summary[key].as_f64().is_some(), "{key}: {summary}");
    }
    assert!(summary.get("p99_ttft_ms").is_none(), "{summary}");

    let work = tempfile::tempdir().unwrap();
    let task = mock_task(
        work.path(),
        "badpct",
        5,
        "  dataset: {kind: random, input_len: 16, output_len: 8}\n  num_prompts: 6\n  percentiles: [50, 0]\n",
    );
    let out = std::process::Command::new(crate::common::bin())
        .arg("plan")
        .arg(&task)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = std::fs::read_to_string(&task).unwrap().lines().count();
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("badpct.yaml:{lines}:"))
            && stderr.contains("`percentiles` has `0`: each must be above 0 and at most 100"),
        "{stderr}"
    );
}
