//! Over-saturation end to end on the mock: a request-rate sweep against a server that runs
//! two sequences at once. The rate it keeps up with is judged steady and valid; a rate far
//! past its capacity is over-saturated (in flight and TTFT both rising), invalid through the
//! `over_saturation` gate; with `over_saturation: stop` the sweep's heavier rate is skipped
//! with the reason, and another workload in the same sweep is still measured.

use serde_json::Value;

use crate::common::{json, latest, repo, run_command};

/// A sweep of `rates` (and two input lengths) on a mock with 2 batch slots and 20 output
/// tokens at 5 ms each: about 100 ms a request, so about 20 requests/s in all.
fn sweep(mode: &str) -> (Value, std::path::PathBuf, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    let name = format!("saturation-{mode}");
    let task = work.path().join(format!("{name}.yaml"));
    std::fs::write(
        &task,
        format!(
            r#"name: {name}
backend: vllm
model: mock-model
port: auto
commands:
  - "{{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --preset fixed --itl-ms 5 --max-batch 2"
readiness: {{http: /health, timeout: 30s}}
benchmark:
  tokenizer: {tok}
  ignore_eos: true
  dataset: {{kind: random, output_len: 20}}
  num_prompts: 30
  burstiness: 50
  validity: {{over_saturation: {mode}}}
  matrix:
    input_len: [16, 32]
    request_rate: [5, 100, 150]
"#,
            tok = repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    let results = work.path().join("results");
    let out = run_command(&task, &results, &work.path().join("state"))
        .output()
        .unwrap();
    let dir = latest(&results, &name);
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(
        manifest["points"].as_array().map(Vec::len),
        Some(6),
        "{manifest}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (manifest, dir, work)
}

fn point(manifest: &Value, input_len: u64, rate: u64) -> &Value {
    manifest["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["axes"]["input_len"] == input_len && p["axes"]["request_rate"] == rate)
        .unwrap_or_else(|| panic!("no point {input_len}/{rate}: {manifest}"))
}

fn gate(point: &Value) -> &Value {
    point["validity"]["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "over_saturation")
        .unwrap_or_else(|| panic!("no over_saturation gate: {point}"))
}

fn block(dir: &std::path::Path, point: &Value) -> Value {
    let summary = json(
        &dir.join("points")
            .join(point["dir"].as_str().unwrap())
            .join("summary.json"),
    );
    summary["over_saturation"].clone()
}

#[test]
fn a_rate_past_capacity_is_over_saturated_and_stop_skips_the_heavier_rate() {
    let (manifest, dir, _work) = sweep("stop");
    for input_len in [16, 32] {
        let steady = point(&manifest, input_len, 5);
        assert_eq!(steady["status"], "completed", "{steady}");
        assert_eq!(gate(steady)["verdict"], "pass", "{steady}");
        assert_eq!(block(&dir, steady)["over_saturated"], false);

        let past = point(&manifest, input_len, 100);
        assert_eq!(past["status"], "completed", "{past}");
        let judged = block(&dir, past);
        assert_eq!(judged["over_saturated"], true, "{judged}");
        assert_eq!(judged["in_flight"]["rising"], true, "{judged}");
        assert_eq!(judged["ttft_ms"]["rising"], true, "{judged}");
        assert_eq!(gate(past)["verdict"], "fail", "{past}");
        assert_eq!(past["validity"]["valid"], false);

        // The heavier rate of the same workload is not run; the other input length's points
        // (another workload) are, each judged on its own.
        let skipped = point(&manifest, input_len, 150);
        assert_eq!(skipped["status"], "skipped", "{skipped}");
        let why = skipped["error"].as_str().unwrap();
        assert!(
            why.contains("the sweep stopped escalating")
                && why.contains(past["id"].as_str().unwrap())
                && why.contains("requests in flight rose"),
            "{why}"
        );
    }
}

#[test]
fn monitor_judges_every_point_and_skips_none() {
    let (manifest, dir, _work) = sweep("monitor");
    for p in manifest["points"].as_array().unwrap() {
        assert_eq!(p["status"], "completed", "{p}");
    }
    let past = point(&manifest, 16, 150);
    assert_eq!(block(&dir, past)["over_saturated"], true);
    assert_eq!(gate(past)["verdict"], "fail");
}
