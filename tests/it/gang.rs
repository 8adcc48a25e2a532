//! A multi-node replica end to end on one machine: `orchestrate run` of one role with one
//! 2-node replica as two local processes on auto ports. Only node 0 (the built-in mock
//! server) is probed; node 1 listens on nothing and is ready by being alive. Each process
//! logs to `logs/<role>-r<replica>-n<node>.log` and is gone after the run.

use std::process::{Command, Stdio};

use crate::common::{bin, json, latest};
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

#[test]
fn a_two_node_replica_runs_with_only_its_leader_probed() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("gang.yaml");
    std::fs::write(&task, TASK).unwrap();
    let results = dir.path().join("results");
    let out = Command::new(bin())
        .args(["run"])
        .arg(&task)
        .arg("--results")
        .arg(&results)
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("ORCHESTRATE_STATE_DIR", dir.path().join("state"))
        .stdin(Stdio::null())
        .output()
        .expect("orchestrate runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let run = latest(&results, "gang");
    let manifest = json(&run.join("manifest.json"));
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
