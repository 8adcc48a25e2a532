//! A multi-node replica end to end on one machine: `orchestrate run` of one role with one
//! 2-node replica as two local processes on auto ports. Only node 0 (the built-in mock
//! server) is probed; node 1 listens on nothing and is ready by being alive. Each process
//! logs to `logs/<role>-r<replica>-n<node>.log` and is gone after the run. And two named
//! deployments (`deployments:`) serving different models, run under one benchmark.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{json, latest, run_command};
use crate::run::group_alive;

const TASK: &str = r#"
name: gang
model: gang-model
nodes: 2
port: auto
readiness: {timeout: 20s}
commands:
  - >-
    {% if node_rank == 0 %}exec {{ orchestrate }} mock-server --port {{ port }} --model {{ model }}
    {%- else %}echo "rank {{ node_rank }} of {{ nnodes }} master {{ master_addr }} dstack $DSTACK_NODE_RANK/$DSTACK_NODES_NUM"; exec sleep 600{% endif %}
benchmark:
  dataset: {kind: random, input_len: 16, output_len: 4}
  num_prompts: 8
  concurrency: 2
"#;

/// `orchestrate run` of task `name` (text `yaml`) in `dir`: the run directory and manifest.
fn run_task(dir: &Path, name: &str, yaml: &str) -> (PathBuf, Value) {
    let task = dir.join(format!("{name}.yaml"));
    std::fs::write(&task, yaml).unwrap();
    let results = dir.join("results");
    let out = run_command(&task, &results, &dir.join("state"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("orchestrate runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let run = latest(&results, name);
    let manifest = json(&run.join("manifest.json"));
    (run, manifest)
}

#[test]
fn a_two_node_replica_runs_with_only_its_leader_probed() {
    let dir = tempfile::tempdir().unwrap();
    let (run, manifest) = run_task(dir.path(), "gang", TASK);
    assert_eq!(manifest["status"], "completed", "{manifest}");
    let point = &manifest["points"][0];
    assert_eq!(point["status"], "completed", "{point}");
    let instances = &manifest["resolved"]["deployments"]["d1"]["roles"][0]["instances"];
    assert_eq!(instances[1]["node_rank"], 1);
    assert_eq!(instances[1]["probe"], "alive");
    assert_ne!(instances[0]["port"], instances[1]["port"]);
    let leader = std::fs::read_to_string(run.join("logs/server-r0-n0.log")).unwrap();
    assert!(leader.contains("listening on"), "{leader}");
    let headless = std::fs::read_to_string(run.join("logs/server-r0-n1.log")).unwrap();
    assert!(
        headless.contains("rank 1 of 2 master 127.0.0.1 dstack 1/2"),
        "{headless}"
    );
    // Both processes were stopped with the deployment.
    let groups = manifest["deployments"][0]["instances"].as_object().unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    for facts in groups.values() {
        let pgid = facts["pgid"]
            .as_i64()
            .expect("a local process records its group") as i32;
        assert!(!group_alive(pgid), "process group {pgid} outlived the run");
    }
}

const TWO: &str = r#"
name: two
model: model-a
port: auto
commands: ["{{ orchestrate }} mock-server --port {{ port }} --model {{ model }}"]
deployments:
  a: {}
  b:
    model: model-b
    backend: vllm
benchmark:
  dataset: {kind: random, input_len: 16, output_len: 4}
  num_prompts: "{{ concurrency * 2 }}"
  matrix:
    concurrency: [1, 2]
"#;

#[test]
fn two_named_deployments_run_one_after_the_other_each_with_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let (run, manifest) = run_task(dir.path(), "two", TWO);
    let deployments: Vec<(&str, &str)> = manifest["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["axes"]["deployment"].as_str().unwrap(),
                d["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(deployments, [("a", "stopped"), ("b", "stopped")]);
    // The mock answers 404 to another model's id: every point completing shows each
    // deployment was measured with its own model.
    let points: Vec<(&str, &str)> = manifest["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        points,
        [
            ("deployment=a,concurrency=1", "completed"),
            ("deployment=a,concurrency=2", "completed"),
            ("deployment=b,concurrency=1", "completed"),
            ("deployment=b,concurrency=2", "completed"),
        ]
    );
    assert_eq!(manifest["resolved"]["deployments"]["d2"]["name"], "b");
    assert_eq!(
        manifest["resolved"]["deployments"]["d2"]["model"],
        "model-b"
    );
    assert!(run.join("logs/d2/server-r0-n0.log").is_file());
}

/// A 2-node replica (node 0 the mock server, node 1 a sleeper) started in `order`.
fn ordered(order: &str) -> String {
    TASK.replace("nodes: 2\n", &format!("nodes: 2\nstartup_order: {order}\n"))
}

/// When each process of the run was launched (`started_after_s`), by `server-<index>`.
fn launched(manifest: &Value) -> (f64, f64) {
    let i = &manifest["deployments"][0]["instances"];
    let at = |k: &str| {
        i[k]["started_after_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("{k}: {i:#}"))
    };
    (at("server-0"), at("server-1"))
}

#[test]
fn startup_order_starts_the_master_or_the_workers_first() {
    let settle = 1.0; // gang::SETTLE: how long the first ones stay alive before the others
    let dir = tempfile::tempdir().unwrap();
    let (_, manifest) = run_task(dir.path(), "gang", &ordered("master-first"));
    assert_eq!(manifest["points"][0]["status"], "completed", "{manifest}");
    let (leader, worker) = launched(&manifest);
    assert!(
        worker >= leader + settle,
        "master-first: {leader} then {worker}"
    );
    let role = &manifest["resolved"]["deployments"]["d1"]["roles"][0];
    assert_eq!(role["startup_order"], "master-first");

    let dir = tempfile::tempdir().unwrap();
    let (_, manifest) = run_task(dir.path(), "gang", &ordered("workers-first"));
    assert_eq!(manifest["points"][0]["status"], "completed", "{manifest}");
    let (leader, worker) = launched(&manifest);
    assert!(
        leader >= worker + settle,
        "workers-first: {worker} then {leader}"
    );

    // `any` (the default): both at once.
    let dir = tempfile::tempdir().unwrap();
    let (_, manifest) = run_task(dir.path(), "gang", TASK);
    let (leader, worker) = launched(&manifest);
    assert!(
        (worker - leader).abs() < settle,
        "any: {leader} and {worker}"
    );
}
