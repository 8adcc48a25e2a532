//! Where the client runs and how it reaches servers (`client:`), end to end against real sshd:
//! a server bound to its host's loopback reached through the tunnel (forced, and `auto`
//! falling back to it), `auto` going direct when the port answers, and the client on a host
//! of the cluster (our binary installed there, records streamed back, nothing left behind,
//! Ctrl-C included).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::fixture::{connected, hosts_file, trusted_host, two_trusted_hosts};
use super::run::{assert_completed, gone, gone_within, manifest, orchestrate, run, stderr};
use super::sshd::{Keys, Sshd, running};
use crate::common::{bin, json, latest, repo};

/// The client-agent tests look for agents by their binary directory; one at a time keeps
/// their checks apart from each other's runs.
static AGENT_TESTS: Mutex<()> = Mutex::new(());

/// A task running the mock server on `host` listening on `bind` (a template such as
/// `{{ host_address }}` or an address), with `client` as the task's `client:` value.
fn task_file(
    dir: &Path,
    name: &str,
    host: &str,
    bind: &str,
    client: &str,
    marker: &str,
    prompts: usize,
) -> PathBuf {
    let text = format!(
        r#"name: {name}
backend: vllm
model: {marker}
port: auto
hosts: [{host}]
client: {client}
commands:
  - "{{{{ orchestrate }}}} mock-server --host {bind} --port {{{{ port }}}} --model {marker} --preset fixed --itl-ms 40"
readiness: {{http: /health, timeout: 20s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 30}}
  tokenizer: {tokenizer}
  ignore_eos: true
  concurrency: 2
  num_prompts: {prompts}
"#,
        tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn run_dir(dir: &Path, task: &str) -> PathBuf {
    latest(&dir.join("results"), task)
}

fn point_file(dir: &Path, task: &str, file: &str) -> PathBuf {
    std::fs::read_dir(run_dir(dir, task).join("points"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join(file)
}

fn summary(dir: &Path, task: &str) -> Value {
    json(&point_file(dir, task, "summary.json"))
}

fn server_facts(m: &Value) -> &Value {
    &m["deployments"][0]["instances"]["server-0"]
}

#[test]
fn a_server_on_its_hosts_loopback_is_reached_through_the_tunnel() {
    // The host is 127.0.0.2; its server listens on 127.0.0.1 only: not reachable directly.
    let Some((_keys, _sshd, dir, hosts)) = trusted_host("127.0.0.2") else {
        return;
    };
    let mark = super::marker("tunnel");
    let forced = task_file(
        dir.path(),
        "forced",
        "h1",
        "127.0.0.1",
        "{reach: tunnel}",
        &mark,
        2,
    );
    let auto = task_file(dir.path(), "auto", "h1", "127.0.0.1", "{}", &mark, 2);
    let out = run(dir.path(), &hosts, &[&forced, &auto], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    for task in ["forced", "auto"] {
        let m = manifest(dir.path(), task);
        assert_completed(&m, 1);
        let facts = server_facts(&m);
        assert_eq!(facts["reach"], "tunnel", "{task}: {facts:#}");
        let direct = facts["direct_url"].as_str().unwrap();
        let used = facts["base_url"].as_str().unwrap();
        assert!(direct.starts_with("http://127.0.0.2:"), "{facts:#}");
        assert!(
            used.starts_with("http://127.0.0.1:") && used != direct,
            "{facts:#}"
        );
        assert_eq!(summary(dir.path(), task)["completed"], 2, "{task}");
    }
    assert!(gone(&mark), "a remote mock server outlived the run");
}

#[test]
fn auto_reach_goes_direct_when_the_published_port_answers() {
    let Some((_keys, _sshd, dir, hosts)) = trusted_host("127.0.0.2") else {
        return;
    };
    let mark = super::marker("direct");
    let task = task_file(
        dir.path(),
        "direct",
        "h1",
        "{{ host_address }}",
        "{reach: auto}",
        &mark,
        2,
    );
    let out = run(dir.path(), &hosts, &[&task], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(dir.path(), "direct");
    assert_completed(&m, 1);
    let facts = server_facts(&m);
    assert_eq!(facts["reach"], "direct", "{facts:#}");
    assert_eq!(facts["base_url"], facts["direct_url"], "{facts:#}");
    assert!(gone(&mark), "a remote mock server outlived the run");
}

#[test]
fn a_client_host_that_is_not_in_the_hosts_file_is_located() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.user_key);
    let task = task_file(dir.path(), "nohost", "h1", "x", "{host: h9}", "m", 2);
    let out = run(dir.path(), &hosts, &[&task], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown client host `h9`") && err.contains("nohost.yaml:6"),
        "{err}"
    );
    assert!(err.contains("h1"), "the help names the hosts: {err}");

    // A client on a host cannot load a server on this machine (`hosts: []`).
    let task = task_file(dir.path(), "here", "", "x", "{host: h1}", "m", 2);
    let out = run(dir.path(), &hosts, &[&task], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the client runs on `h1` but the server runs on this machine")
            && err.contains("here.yaml:6"),
        "{err}"
    );
}

/// Environment of a run whose agents go to `bin_dir`.
fn agent_env(cmd: &mut Command, dir: &Path, bin_dir: &Path) {
    cmd.current_dir(dir)
        .env("NO_COLOR", "1")
        .env(
            "ORCHESTRATE_HOST_LOCK",
            dir.join("lock-{host}").display().to_string(),
        )
        .env("ORCHESTRATE_REMOTE_BIN_DIR", bin_dir)
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("ORCHESTRATE_HOSTS")
        .env_remove("ORCHESTRATE_RESULTS");
}

fn run_args<'a>(dir: &'a Path, hosts: &'a Path, task: &'a Path) -> Vec<String> {
    vec![
        "run".into(),
        "--no-report".into(),
        "--hosts".into(),
        hosts.display().to_string(),
        "--results".into(),
        dir.join("results").display().to_string(),
        task.display().to_string(),
    ]
}

#[test]
fn a_client_on_a_cluster_host_runs_there_and_streams_its_records_back() {
    let _one = AGENT_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    // The server on h1, the client on h2 (another address: another host).
    let Some((_keys, (_a, _b), dir, hosts)) = two_trusted_hosts() else {
        return;
    };
    let bin_dir = dir.path().join("remote-bin");
    let mark = super::marker("agent");
    let task = task_file(
        dir.path(),
        "placed",
        "h1",
        "{{ host_address }}",
        "{host: h2}",
        &mark,
        4,
    );
    let mut cmd = Command::new(bin());
    cmd.args(run_args(dir.path(), &hosts, &task));
    agent_env(&mut cmd, dir.path(), &bin_dir);
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(dir.path(), "placed");
    assert_completed(&m, 1);
    let client = &m["hosts"]["client"];
    assert_eq!(client["host"], "h2", "{:#}", m["hosts"]);
    let binary = client["binary"].as_str().unwrap();
    assert!(
        binary.starts_with(&bin_dir.display().to_string()) && Path::new(binary).is_file(),
        "installed on the host: {client:#}"
    );
    let s = summary(dir.path(), "placed");
    assert_eq!(s["client_host"], "h2", "{s:#}");
    assert_eq!(s["completed"], 4, "{s:#}");
    // Every record came back and was archived, with times relative to the client's start.
    let lines =
        std::fs::read_to_string(point_file(dir.path(), "placed", "requests.jsonl")).unwrap();
    let records: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 4, "{lines}");
    for r in &records {
        assert_eq!(r["outcome"]["status"], "completed", "{r}");
        assert_eq!(r["chunks"].as_array().unwrap().len(), 30, "{r}");
        assert!(r["end_us"].as_u64().unwrap() >= r["sent_us"].as_u64().unwrap());
        assert!(
            r["end_us"].as_u64().unwrap() < 60_000_000,
            "relative times: {r}"
        );
    }
    assert!(
        gone_within(&bin_dir.display().to_string(), 5),
        "a client agent outlived the run"
    );
    assert!(gone(&mark), "a remote mock server outlived the run");
}

#[test]
fn ctrl_c_during_a_remote_client_point_leaves_no_remote_process() {
    let _one = AGENT_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_keys, (_a, _b), dir, hosts)) = two_trusted_hosts() else {
        return;
    };
    let bin_dir = dir.path().join("remote-bin");
    let agents = format!("{}/orchestrate-", bin_dir.display());
    let mark = super::marker("agentint");
    // 200 requests of ~1.2 s at concurrency 2: minutes, far longer than the test waits.
    let task = task_file(
        dir.path(),
        "stopped",
        "h1",
        "{{ host_address }}",
        "{host: h2}",
        &mark,
        200,
    );
    let mut cmd = Command::new(bin());
    cmd.args(run_args(dir.path(), &hosts, &task));
    agent_env(&mut cmd, dir.path(), &bin_dir);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The point runs (the agent starts right after the binary was installed) and an agent
    // process is up.
    let started = Instant::now();
    let point_running = || {
        std::fs::read_link(dir.path().join("results/stopped/latest"))
            .ok()
            .and_then(|link| {
                let path = dir
                    .path()
                    .join("results/stopped")
                    .join(link)
                    .join("manifest.json");
                std::fs::read_to_string(path).ok()
            })
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .is_some_and(|m| m["points"][0]["status"] == "running")
    };
    while !(point_running() && running(&agents)) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the client agent never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let some requests finish, so records are streaming.
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let waited = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if waited.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the run did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(gone_within(&agents, 5), "a client agent outlived Ctrl-C");
    assert!(gone(&mark), "a remote mock server outlived Ctrl-C");
    let m = manifest(dir.path(), "stopped");
    assert_eq!(m["status"], "interrupted", "{m:#}");
    // What finished before the interrupt came back from the host and is archived.
    let lines =
        std::fs::read_to_string(point_file(dir.path(), "stopped", "requests.jsonl")).unwrap();
    assert!(lines.lines().count() >= 2, "{lines}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_lock_wait_fails_naming_the_holder() {
    use orchestrate::ssh::{HostLock, LockWait};
    let Some((keys, sshd, session)) = connected().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.user_key);
    // `run` uses ORCHESTRATE_HOST_LOCK=<dir>/lock-{host}: hold h1's lock here.
    let path = dir.path().join("lock-h1").display().to_string();
    let held = HostLock::acquire_at(&session, &path, "the test's holder", LockWait::NoWait)
        .await
        .unwrap();
    let mark = super::marker("lockwait");
    let task = task_file(dir.path(), "waits", "h1", "127.0.0.1", "{}", &mark, 2);
    let (d, h, t) = (dir.path().to_path_buf(), hosts.clone(), task.clone());
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || run(&d, &h, &[&t], &["--lock-wait", "2s"]))
        .await
        .unwrap();
    let waited = started.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the test's holder") && err.contains("--lock-wait") && err.contains("2s"),
        "{err}"
    );
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(30),
        "waited {waited:?}"
    );
    assert!(
        !dir.path().join("results/waits").exists(),
        "nothing started"
    );
    held.release().await;
    assert!(gone(&mark));
}

/// A task whose server prints its GPU visibility variables, pinned to `gpu_ids` (GPU count
/// 0: the test machine has none, and pre-flight must pass).
fn gpu_task(dir: &Path, name: &str, hosts: &str, vendor: &str, marker: &str) -> PathBuf {
    let text = format!(
        r#"name: {name}
model: {marker}
port: auto
{hosts}
resources: {{gpu: {{count: 0, vendor: {vendor}}}}}
container: {{gpu_ids: ["1", "3"]}}
commands:
  - echo "seen CUDA=${{CUDA_VISIBLE_DEVICES:-unset}} HIP=${{HIP_VISIBLE_DEVICES:-unset}} ROCR=${{ROCR_VISIBLE_DEVICES:-unset}}"
  - "{{{{ orchestrate }}}} mock-server --host {{{{ host_address }}}} --port {{{{ port }}}} --model {marker} --preset fixed --itl-ms 5"
readiness: {{http: /health, timeout: 20s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  tokenizer: {tokenizer}
  num_prompts: 1
"#,
        tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn server_log(dir: &Path, task: &str) -> String {
    std::fs::read_to_string(run_dir(dir, task).join("logs/server-r0-n0.log")).unwrap()
}

#[test]
fn pinned_gpus_reach_local_and_remote_processes_as_visibility_variables() {
    let dir = tempfile::tempdir().unwrap();
    let mark = super::marker("gpu");
    // Locally, NVIDIA (the default vendor's variable).
    let local = gpu_task(dir.path(), "gpulocal", "", "nvidia", &mark);
    let results = dir.path().join("results");
    let out = orchestrate(
        dir.path(),
        &[
            "run",
            "--no-report",
            "--results",
            results.to_str().unwrap(),
            local.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let log = server_log(dir.path(), "gpulocal");
    assert!(log.contains("seen CUDA=1,3 HIP=unset ROCR=unset"), "{log}");
    let m = manifest(dir.path(), "gpulocal");
    assert_eq!(
        server_facts(&m)["gpu_env"],
        serde_json::json!({"CUDA_VISIBLE_DEVICES": "1,3"}),
        "{m:#}"
    );
    // Over SSH, AMD.
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.user_key);
    let remote = gpu_task(dir.path(), "gpuremote", "hosts: [h1]", "amd", &mark);
    let out = run(dir.path(), &hosts, &[&remote], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = server_log(dir.path(), "gpuremote");
    assert!(log.contains("seen CUDA=unset HIP=1,3 ROCR=1,3"), "{log}");
    let m = manifest(dir.path(), "gpuremote");
    assert_eq!(
        server_facts(&m)["gpu_env"],
        serde_json::json!({"HIP_VISIBLE_DEVICES": "1,3", "ROCR_VISIBLE_DEVICES": "1,3"}),
        "{m:#}"
    );
    assert!(gone(&mark));
}
