//! Ray gangs with the real Ray (ray 2.40.0 from the venv of scripts/ray-venv.sh), as vLLM's
//! Ray form runs them: node 0 starts the Ray head (`ray start --head --block` in the
//! background of its shell, so it stays in the process's group) and then the server (the
//! built-in mock server standing in for `vllm serve`); node 1 joins with `ray start
//! --address {{ master_addr }}:PORT --block`. With `startup_order: master-first` node 1
//! starts only once the head answers `ray status`, and `readiness.ray` makes the run wait
//! until `ray status` counts 2 alive nodes before the leader is probed. Both Ray nodes run on
//! this machine (two raylets, one GCS). After the run no Ray process is left.
//!
//! The two tests share one lock: each starts a Ray cluster, and two at once would fight over
//! the machine's two cores (and Ray's fixed default ports).

pub(crate) mod venv;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{json, latest, run_command};
use crate::run::group_alive;

/// One Ray cluster at a time.
static RAY: Mutex<()> = Mutex::new(());

/// Held while a test's Ray cluster runs (tests of other modules that start Ray take it too).
pub(crate) fn one_cluster() -> MutexGuard<'static, ()> {
    RAY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A free TCP port on this machine (for the head's GCS).
pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The task: a 2-node Ray gang on this machine, the head's GCS on `gcs`, Ray's files under
/// `temp`; node 1 joins `join` (`{{ master_addr }}:<gcs>` normally).
fn task(ray: &Path, gcs: u16, temp: &Path, join: &str, timeout: &str) -> String {
    let ray = ray.display();
    let temp = temp.display();
    format!(
        r#"
name: ray-gang
model: ray-model
nodes: 2
port: auto
startup_order: master-first
env:
  RAY_USAGE_STATS_ENABLED: "0"
  RAY_memory_monitor_refresh_ms: "0"
readiness: {{timeout: {timeout}, ray: {{port: {gcs}, command: {ray}}}}}
commands:
  - >-
    {{% if node_rank == 0 %}}{ray} start --head --port {gcs} --num-cpus 1 --include-dashboard=false
    --disable-usage-stats --temp-dir {temp} --block &
    exec {{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --model {{{{ model }}}}
    {{%- else %}}exec {ray} start --address {join} --num-cpus 1 --block{{% endif %}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  num_prompts: 4
  concurrency: 2
"#
    )
}

/// `orchestrate run` of `yaml` in `dir`: whether it succeeded, its stderr, the manifest.
fn run(dir: &Path, yaml: &str) -> (bool, String, Value, PathBuf) {
    let task = dir.join("ray-gang.yaml");
    std::fs::write(&task, yaml).unwrap();
    let results = dir.join("results");
    let out = run_command(&task, &results, &dir.join("state"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("orchestrate runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let run = latest(&results, "ray-gang");
    let manifest = json(&run.join("manifest.json"));
    (out.status.success(), stderr, manifest, run)
}

/// Live (non-zombie) processes whose command line contains `needle`, as `pid comm`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        if !zombie && cmdline.contains(needle) {
            out.push(format!(
                "{} {}",
                entry.file_name().to_string_lossy(),
                &cmdline[..cmdline.len().min(160)]
            ));
        }
    }
    out
}

/// After the run: no process of any of the `nodes` ranks' groups, and no Ray process of this
/// cluster (its raylets, GCS and agents name the temp dir; a joining `ray start` names the
/// GCS address, as `--address ADDR` or `--address=ADDR`).
pub(crate) fn assert_nothing_left(manifest: &Value, temp: &Path, gcs: u16, nodes: usize) {
    let groups = manifest["deployments"][0]["instances"].as_object().unwrap();
    assert_eq!(groups.len(), nodes, "{groups:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut left = processes_with(&temp.display().to_string());
        left.extend(processes_with(&format!("127.0.0.1:{gcs}")));
        let groups_alive: Vec<i32> = groups
            .values()
            .filter_map(|f| f["pgid"].as_i64())
            .map(|p| p as i32)
            .filter(|p| group_alive(*p))
            .collect();
        if left.is_empty() && groups_alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left running after the run: groups {groups_alive:?}, processes {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_master_first_ray_gang_waits_for_two_real_ray_nodes_then_serves() {
    let Some(ray) = venv::ray() else { return };
    let _one = one_cluster();
    let dir = tempfile::tempdir().unwrap();
    let temp = dir.path().join("ray");
    let gcs = free_port();
    let started = Instant::now();
    let yaml = task(
        &ray,
        gcs,
        &temp,
        &format!("{{{{ master_addr }}}}:{gcs}"),
        "60s",
    );
    let (ok, stderr, manifest, run) = run(dir.path(), &yaml);
    let took = started.elapsed();
    assert!(ok, "run failed: {stderr}");
    assert_eq!(manifest["points"][0]["status"], "completed", "{manifest:#}");
    let instances = &manifest["deployments"][0]["instances"];
    let head = &instances["server-0"];
    assert_eq!(head["ray"]["nodes"], 2, "{head:#}");
    assert_eq!(head["ray"]["expected"], 2, "{head:#}");
    assert_eq!(
        head["ray"]["address"],
        format!("127.0.0.1:{gcs}"),
        "{head:#}"
    );
    // Master first: node 1 was launched only once the head's `ray status` listed it.
    let head_start = head["started_after_s"].as_f64().unwrap();
    let worker_start = instances["server-1"]["started_after_s"].as_f64().unwrap();
    assert!(
        worker_start > head_start + 0.5,
        "node 1 started {worker_start}s, the head {head_start}s"
    );
    // The leader was probed after the count: ready after the Ray wait.
    let ready = head["ready_after_s"].as_f64().unwrap();
    assert!(
        ready >= head["ray"]["waited_s"].as_f64().unwrap(),
        "{head:#}"
    );
    assert!(stderr.contains("ray: head up (1/2 nodes)"), "{stderr}");
    assert!(stderr.contains("ray: 2/2 nodes"), "{stderr}");
    let worker_log = std::fs::read_to_string(run.join("logs/server-r0-n1.log")).unwrap();
    assert!(worker_log.contains("Ray runtime started"), "{worker_log}");
    assert_nothing_left(&manifest, &temp, gcs, 2);
    eprintln!(
        "ray gang run took {took:?}; ray wait {}s",
        head["ray"]["waited_s"]
    );
}

#[test]
fn a_ray_worker_that_never_joins_fails_readiness_with_the_node_count() {
    let Some(ray) = venv::ray() else { return };
    let _one = one_cluster();
    let dir = tempfile::tempdir().unwrap();
    let temp = dir.path().join("ray");
    let gcs = free_port();
    // Node 1 joins a port where no GCS listens: Ray retries for ever, logging why.
    let wrong = free_port();
    let started = Instant::now();
    let yaml = task(&ray, gcs, &temp, &format!("127.0.0.1:{wrong}"), "20s");
    let (ok, stderr, manifest, _) = run(dir.path(), &yaml);
    let took = started.elapsed();
    assert!(!ok, "the run passed: {stderr}");
    let error = manifest["deployments"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains(&format!(
            "the Ray cluster at 127.0.0.1:{gcs} had 1 alive node after 20s, expected 2"
        )),
        "{error}"
    );
    // The tail of the rank that did not join says why.
    assert!(error.contains("last log lines of server-1"), "{error}");
    assert!(
        error.contains(&format!("127.0.0.1:{wrong}")) || error.contains(&format!(":{wrong}")),
        "{error}"
    );
    assert!(stderr.contains("ray: 1/2 nodes"), "{stderr}");
    assert_eq!(manifest["points"][0]["status"], "skipped", "{manifest:#}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert_nothing_left(&manifest, &temp, wrong, 2);
    eprintln!("failed as expected after {took:?}:\n{error}");
}

#[test]
fn a_head_that_exits_while_ray_is_awaited_fails_at_once() {
    let Some(ray) = venv::ray() else { return };
    let _one = one_cluster();
    let dir = tempfile::tempdir().unwrap();
    let temp = dir.path().join("ray");
    let gcs = free_port();
    // Node 0 dies before any Ray head answers: the wait for the head (master-first) stops
    // at its exit instead of running `ray status` until the 60 s timeout.
    let yaml = task(&ray, gcs, &temp, "127.0.0.1:1", "60s").replace(
        "{% if node_rank == 0 %}",
        "{% if node_rank == 0 %}echo no head here; sleep 1; exit 4; ",
    );
    let started = Instant::now();
    let (ok, stderr, manifest, _) = run(dir.path(), &yaml);
    let took = started.elapsed();
    assert!(!ok, "the run passed: {stderr}");
    let error = manifest["deployments"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains(&format!(
            "server-0 exited (exit code 4) while waiting for the Ray cluster at 127.0.0.1:{gcs} to count 1 node (it had no node count"
        )) && error.contains("no head here"),
        "{error}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // Node 1 was never started.
    assert!(
        manifest["deployments"][0]["instances"]
            .get("server-1")
            .is_none(),
        "{manifest:#}"
    );
}
