//! `orchestrate run --hosts FILE` end to end against real sshd servers on loopback: the mock
//! server as a remote process (archive complete, nothing left behind), unknown host keys and
//! wrong user keys (exit 2, clear message, nothing started), tasks on two hosts in parallel
//! and on one host one after the other (the host lock), `clean --host`, and a Docker task on
//! a remote host (with GPU telemetry sampled on that host).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::fixture::{connected, hosts_file, trusted_host, two_trusted_hosts};
use super::sshd::{Keys, Sshd, running};
use crate::common::{bin, json, latest, repo};

/// A task running the mock server (model `marker`, so its processes can be found) on `host`;
/// each request streams 30 tokens at 40 ms (about 1.2 s per point).
fn task_file(dir: &Path, name: &str, host: &str, marker: &str, points: usize) -> PathBuf {
    let lens: Vec<String> = (0..points).map(|i| (30 + i).to_string()).collect();
    let text = format!(
        r#"name: {name}
backend: vllm
model: {marker}
port: auto
hosts: [{host}]
commands:
  - "{{{{ orchestrate }}}} mock-server --host {{{{ host_address }}}} --port {{{{ port }}}} --model {marker} --preset fixed --itl-ms 40"
readiness: {{http: /health, timeout: 20s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 30}}
  tokenizer: {tokenizer}
  ignore_eos: true
  concurrency: 2
  num_prompts: 2
  matrix:
    output_len: [{lens}]
"#,
        tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
        lens = lens.join(", ")
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// `orchestrate ARGS` in `dir`, a per-test lock file per host, no ssh-agent, no stdin.
pub(super) fn orchestrate_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env(
            "ORCHESTRATE_HOST_LOCK",
            dir.join("lock-{host}").display().to_string(),
        )
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("ORCHESTRATE_HOSTS")
        .env_remove("ORCHESTRATE_RESULTS")
        .stdin(Stdio::null());
    cmd
}

/// `orchestrate run TASK` with the hosts file and `extra` flags, started in `dir` (results
/// under `dir/results`): stdout dropped, stderr piped.
pub(super) fn spawn_run(dir: &Path, hosts: &Path, task: &Path, extra: &[&str]) -> Child {
    let results = dir.join("results");
    let mut args = vec![
        "run",
        "--no-report",
        "--hosts",
        hosts.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
        task.to_str().unwrap(),
    ];
    args.extend(extra);
    orchestrate_command(dir, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `orchestrate run` with the hosts file, a per-test lock file per host, no ssh-agent.
pub(super) fn orchestrate(dir: &Path, args: &[&str]) -> Output {
    orchestrate_command(dir, args)
        .output()
        .expect("orchestrate runs")
}

pub(super) fn run(dir: &Path, hosts: &Path, tasks: &[&Path], extra: &[&str]) -> Output {
    let mut args = vec!["run", "--no-report", "--hosts", hosts.to_str().unwrap()];
    args.extend(extra);
    let results = dir.join("results");
    args.extend(["--results", results.to_str().unwrap()]);
    let tasks: Vec<&str> = tasks.iter().map(|t| t.to_str().unwrap()).collect();
    args.extend(tasks);
    orchestrate(dir, &args)
}

pub(super) fn manifest(dir: &Path, task: &str) -> Value {
    json(&latest(&dir.join("results"), task).join("manifest.json"))
}

/// First point start to last point end.
fn points_interval(manifest: &Value) -> (DateTime<Utc>, DateTime<Utc>) {
    let at = |p: &Value, key: &str| -> DateTime<Utc> { p[key].as_str().unwrap().parse().unwrap() };
    let points = manifest["points"].as_array().unwrap();
    let start = points.iter().map(|p| at(p, "started_at")).min().unwrap();
    let end = points.iter().map(|p| at(p, "ended_at")).max().unwrap();
    (start, end)
}

pub(super) fn assert_completed(manifest: &Value, points: usize) {
    assert_eq!(manifest["status"], "completed", "{manifest:#}");
    let list = manifest["points"].as_array().unwrap();
    assert_eq!(list.len(), points);
    for p in list {
        assert_eq!(p["status"], "completed", "{p}");
    }
}

/// No process carries `marker` within a few seconds (the remote watchdog, whose command line
/// carries the task's, exits once it has seen the group die).
pub(super) fn gone(marker: &str) -> bool {
    gone_within(marker, 5)
}

/// Same, waiting up to `seconds`.
pub(crate) fn gone_within(marker: &str, seconds: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while running(marker) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    true
}

pub(super) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn a_task_on_a_remote_host_runs_end_to_end_and_leaves_nothing() {
    let Some((_keys, _sshd, dir, hosts)) = trusted_host("127.0.0.1") else {
        return;
    };
    let mark = super::marker("e2e");
    let task = task_file(dir.path(), "remote", "h1", &mark, 1);
    let out = run(dir.path(), &hosts, &[&task], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(dir.path(), "remote");
    assert_completed(&m, 1);
    assert_eq!(m["deployments"][0]["status"], "stopped");
    // Pre-flight facts of the host are recorded.
    assert_eq!(m["hosts"]["h1"]["host"], "h1", "{:#}", m["hosts"]);
    let run_dir = latest(&dir.path().join("results"), "remote");
    let log = std::fs::read_to_string(run_dir.join("logs/server-r0-n0.log")).unwrap();
    assert!(
        log.contains("listening on"),
        "remote output streamed back: {log}"
    );
    let point = std::fs::read_dir(run_dir.join("points"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let summary = json(&point.join("summary.json"));
    assert_eq!(summary["completed"], 2);
    assert!(gone(&mark), "a remote mock server outlived the run");
}

#[test]
fn a_cluster_places_one_instance_per_member() {
    let Some(keys) = Keys::new() else { return };
    let (a, b) = (
        Sshd::start(&keys, "127.0.0.1"),
        Sshd::start(&keys, "127.0.0.2"),
    );
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&a, &b], &keys.user_key);
    let task = task_file(dir.path(), "clustered", "all", "m", 1);
    let out = orchestrate(
        dir.path(),
        &[
            "plan",
            "--format",
            "json",
            "--hosts",
            hosts.to_str().unwrap(),
            task.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let plans: Value = serde_json::from_slice(&out.stdout).unwrap();
    let instances = &plans[0]["deployments"][0]["roles"][0]["instances"];
    let on: Vec<&str> = instances
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["host"]["remote"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(on, ["h1", "h2"], "{instances:#}");
}

#[test]
fn an_unknown_host_key_is_bad_input_and_starts_nothing() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.user_key);
    let mark = super::marker("hostkey");
    let task = task_file(dir.path(), "untrusted", "h1", &mark, 1);
    let out = run(dir.path(), &hosts, &[&task], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown host key") && err.contains("--accept-new-host-keys"),
        "{err}"
    );
    assert!(err.contains("nothing was started"), "{err}");
    assert!(!dir.path().join("results/untrusted").exists(), "no archive");
    assert!(gone(&mark), "a remote process outlived the run");

    // Trusting on first use records the key and the run goes through.
    let out = run(dir.path(), &hosts, &[&task], &["--accept-new-host-keys"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let known = std::fs::read_to_string(&keys.known_hosts).unwrap();
    assert!(
        known.contains(&format!("[127.0.0.1]:{}", sshd.port)),
        "{known}"
    );
}

#[test]
fn a_wrong_user_key_is_bad_input_and_starts_nothing() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.stranger_key);
    let mark = super::marker("auth");
    let task = task_file(dir.path(), "stranger", "h1", &mark, 1);
    let out = run(dir.path(), &hosts, &[&task], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("failed to authenticate") && err.contains("authorized_keys"),
        "{err}"
    );
    assert!(!dir.path().join("results/stranger").exists(), "no archive");
    assert!(gone(&mark), "a remote process outlived the run");
}

#[test]
fn tasks_on_two_hosts_run_in_parallel() {
    let Some((_keys, (_a, _b), dir, hosts)) = two_trusted_hosts() else {
        return;
    };
    let mark = super::marker("par");
    let one = task_file(dir.path(), "one", "h1", &mark, 2);
    let two = task_file(dir.path(), "two", "h2", &mark, 2);
    let out = run(dir.path(), &hosts, &[&one, &two], &[]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("[one] ") && err.contains("[two] "), "{err}");
    let (m1, m2) = (manifest(dir.path(), "one"), manifest(dir.path(), "two"));
    assert_completed(&m1, 2);
    assert_completed(&m2, 2);
    let ((s1, e1), (s2, e2)) = (points_interval(&m1), points_interval(&m2));
    assert!(
        s1 < e2 && s2 < e1,
        "points should overlap: one {s1}..{e1}, two {s2}..{e2}"
    );
    assert!(gone(&mark), "a remote process outlived the run");
}

#[test]
fn tasks_on_one_host_run_one_after_the_other() {
    let Some((_keys, _sshd, dir, hosts)) = trusted_host("127.0.0.1") else {
        return;
    };
    let mark = super::marker("serial");
    let one = task_file(dir.path(), "first", "h1", &mark, 1);
    let two = task_file(dir.path(), "second", "h1", &mark, 1);
    let out = run(dir.path(), &hosts, &[&one, &two], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (m1, m2) = (
        manifest(dir.path(), "first"),
        manifest(dir.path(), "second"),
    );
    assert_completed(&m1, 1);
    assert_completed(&m2, 1);
    let ((s1, e1), (s2, e2)) = (points_interval(&m1), points_interval(&m2));
    assert!(
        e1 <= s2 || e2 <= s1,
        "points must not overlap: first {s1}..{e1}, second {s2}..{e2}"
    );
    assert!(gone(&mark), "a remote process outlived the run");
}

#[tokio::test]
async fn clean_host_kills_leftover_remote_processes() {
    use orchestrate::provider::ssh::{Reach, SshProvider};
    use orchestrate::provider::{LaunchRequest, Provider};

    let Some((keys, sshd, session)) = connected().await else {
        return;
    };
    let mark = super::marker("clean");
    let log = orchestrate::provider::LogSink::memory();
    let provider = SshProvider::new(
        session,
        orchestrate::shutdown::Shutdown::new(),
        Reach::Direct,
    );
    let instance = provider
        .launch(LaunchRequest {
            run_id: mark.clone(),
            task: "t".to_string(),
            deployment: "d1".to_string(),
            role: "server".to_string(),
            index: 0,
            place: orchestrate::provider::ProcessPlace::default(),
            image: None,
            commands: vec![format!("echo ready; sleep 300; : {mark}")],
            env: Vec::new(),
            port: 8000,
            volumes: Vec::new(),
            resources: Default::default(),
            log: log.clone(),
            container: Default::default(),
        })
        .await
        .unwrap();
    // As if orchestrate had been killed while the connection stayed up: the group lives on.
    let started = super::sshd::eventually(std::time::Duration::from_secs(10), || {
        log.tail(5).iter().any(|l| l == "ready")
    });
    assert!(started.await);
    std::mem::forget(instance);
    assert!(running(&mark));
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.user_key);
    let out = orchestrate(
        dir.path(),
        // Only this run: other tests' remote processes run on the same machine.
        &[
            "clean",
            "--host",
            "h1",
            "--run",
            &mark,
            "--hosts",
            hosts.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("h1: process group") && stdout.contains(&mark),
        "{stdout}"
    );
    assert!(gone(&mark), "clean --host left the process running");
}

#[test]
fn killing_sshd_mid_run_fails_the_run_and_keeps_the_finished_points() {
    let Some((_keys, mut sshd, dir, hosts)) = trusted_host("127.0.0.1") else {
        return;
    };
    let mark = super::marker("drop");
    // A quick first point, then one far longer than the test waits (3000 tokens at 40 ms).
    let task = task_file(dir.path(), "dropped", "h1", &mark, 1);
    let text = std::fs::read_to_string(&task)
        .unwrap()
        .replace("output_len: [30]", "output_len: [30, 3000]");
    std::fs::write(&task, text).unwrap();
    let results = dir.path().join("results");
    let mut child = spawn_run(dir.path(), &hosts, &task, &[]);
    let first_done = || {
        let base = results.join("dropped");
        let Ok(link) = std::fs::read_link(base.join("latest")) else {
            return false;
        };
        std::fs::read_to_string(base.join(link).join("manifest.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|m| m["points"][0]["status"] == "completed")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !first_done() {
        assert!(
            std::time::Instant::now() < deadline,
            "first point never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    sshd.kill();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("orchestrate did not end after sshd died");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(status.code(), Some(1), "{err}");
    let m = manifest(dir.path(), "dropped");
    assert_eq!(m["status"], "failed", "{m:#}");
    assert_eq!(m["points"][0]["status"], "completed", "{m:#}");
    assert_ne!(m["points"][1]["status"], "completed", "{m:#}");
    // The remote watchdog sends SIGTERM, then SIGKILL after the 10 s grace (the mock drains
    // its 3000-token streams on SIGTERM, so it may need all of it).
    assert!(
        gone_within(&mark, 15),
        "a remote process outlived the dropped connection"
    );
}

#[test]
fn a_docker_task_on_a_remote_host_runs_through_the_tunnel() {
    const IMAGE: &str = "orchestrate-mock:test";
    let Some(keys) = Keys::new() else { return };
    if !Path::new(orchestrate::ssh::DOCKER_SOCKET).exists() {
        assert!(
            !crate::common::in_ci(),
            "CI=true but no Docker engine socket"
        );
        eprintln!("skipping: no Docker engine");
        return;
    }
    let built = Command::new(repo().join("scripts/build-mock-image.sh"))
        .arg(bin())
        .arg(IMAGE)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.user_key);
    let name = format!("remote-docker-{}", std::process::id());
    let task = dir.path().join("docker.yaml");
    std::fs::write(
        &task,
        format!(
            "name: {name}
backend: vllm
model: m
image: {IMAGE}
port: auto
hosts: [h1]
commands:
  - echo starting in remote docker
  - exec orchestrate mock-server --host 0.0.0.0 --port {{{{ port }}}} --model m --speed 20
readiness: {{http: /health, timeout: 30s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 8}}
  tokenizer: {}
  ignore_eos: true
  num_prompts: 2
  matrix:
    concurrency: [1]
",
            repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    // With GPU telemetry: the sampler runs on the host, beside the container.
    let mark = super::marker("docker-telemetry");
    let sampler = crate::telemetry::stand_in("0.2", 1, &mark);
    let out = run(
        dir.path(),
        &hosts,
        &[&task],
        &["--telemetry-command", &sampler],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(dir.path(), &name);
    assert_completed(&m, 1);
    assert_eq!(m["hosts"]["h1"]["docker"], "OK", "{:#}", m["hosts"]);
    let point = latest(&dir.path().join("results"), &name).join("points/concurrency=1");
    assert!(point.join("telemetry/h1.log").is_file());
    let summary = json(&point.join("summary.json"));
    assert_eq!(
        summary["telemetry"]["per_gpu"][0]["host"], "h1",
        "{summary:#}"
    );
    assert!(
        crate::telemetry::gone(&mark, std::time::Duration::from_secs(8)),
        "the sampler outlived the run"
    );
    let instance = &m["deployments"][0]["instances"]["server-0"];
    assert_eq!(instance["provider"], "docker", "{m:#}");
    // Nothing of this task is left on the engine.
    let ps = Command::new("docker")
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&ps.stdout);
    assert!(!names.contains(&name), "{names}");
}
