//! `orchestrate run` with a docker task: the container log is archived and nothing is left;
//! SIGINT or SIGKILL of the runner (then `clean`) leaves no container; pre-flight problems
//! are all reported before anything starts.

use super::*;

/// A task file running the mock server in the test image through `orchestrate run`.
fn docker_task(
    dir: &std::path::Path,
    name: &str,
    prompts: u32,
    output_len: u32,
) -> std::path::PathBuf {
    let tokenizer = common::repo().join("data/tokenizer/tokenizer.json");
    let text = format!(
        "name: {name}
backend: vllm
model: m
image: {IMAGE}
port: auto
commands:
  - echo starting in docker
  - exec orchestrate mock-server --host 0.0.0.0 --port {{{{ port }}}} --model m --speed 20
readiness: {{http: /health, timeout: 30s}}
benchmark:
  dataset: {{kind: random, input_len: 32, output_len: {output_len}}}
  tokenizer: {tokenizer}
  ignore_eos: true
  num_prompts: {prompts}
  matrix:
    concurrency: [1, 2]
",
        tokenizer = tokenizer.display()
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// `orchestrate run <task>` with its archive under `dir/results`.
fn orchestrate_run(dir: &std::path::Path, task: &std::path::Path) -> Command {
    let mut command = Command::new(common::bin());
    command
        .arg("run")
        .arg(task)
        .arg("--results")
        .arg(dir.join("results"))
        .arg("--no-report")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

fn task_filter(task: &str) -> LabelFilter {
    LabelFilter {
        run: None,
        task: Some(task.into()),
    }
}

/// Wait until the run's container serves (its log says so), at most 60 s.
async fn wait_until_serving(dir: &std::path::Path, task: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logs = std::fs::read_dir(dir.join("results").join(task))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|run| run.path().join("logs/server-r0-n0.log"));
        for log in logs {
            if std::fs::read_to_string(&log).is_ok_and(|t| t.contains("listening on")) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the run never got its container serving"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrate_run_through_docker_archives_the_container_log_and_leaves_nothing() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let task = format!("it-run-{}", std::process::id());
    let path = docker_task(dir.path(), &task, 4, 8);
    let out = orchestrate_run(dir.path(), &path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let archive = std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let log = std::fs::read_to_string(archive.join("logs/server-r0-n0.log")).unwrap();
    assert!(log.contains("starting in docker\n"), "{log}");
    assert!(log.contains("listening on http://0.0.0.0:"), "{log}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(archive.join("manifest.json")).unwrap())
            .unwrap();
    assert!(
        manifest["hosts"]["docker"]["docker"]["version"].is_string(),
        "{manifest:#}"
    );
    let instance = &manifest["deployments"][0]["instances"]["server-0"];
    assert_eq!(instance["provider"], "docker", "{manifest:#}");
    assert!(
        instance["image"]["id"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(archive.join("points/concurrency=2/summary.json").exists());
    assert!(provider.list(&task_filter(&task)).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_in_the_middle_of_a_run_leaves_no_container() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let task = format!("it-sigint-{}", std::process::id());
    // Long enough that the interrupt lands in the sweep.
    let path = docker_task(dir.path(), &task, 400, 400);
    let mut child = orchestrate_run(dir.path(), &path).spawn().unwrap();
    wait_until_serving(dir.path(), &task).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(provider.list(&task_filter(&task)).await.unwrap().len(), 1);
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the run did not stop after SIGINT"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "an interrupted run does not exit 0");
    assert!(
        provider.list(&task_filter(&task)).await.unwrap().is_empty(),
        "SIGINT left a container"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigkill_of_the_runner_clean_leaves_no_container() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let task = format!("it-sigkill-{}", std::process::id());
    let path = docker_task(dir.path(), &task, 400, 400);
    // With a GPU sampler on the host beside the container (the stand-in, deaf to SIGPIPE).
    let mark = format!("telemetry-docker-kill-{}", std::process::id());
    let mut child = orchestrate_run(dir.path(), &path)
        .args([
            "--telemetry-command",
            &crate::telemetry::deaf_stand_in("0.2", 1, &mark),
        ])
        .spawn()
        .unwrap();
    wait_until_serving(dir.path(), &task).await;
    crate::telemetry::sampling(&mark);
    child.kill().unwrap(); // SIGKILL: the runner can tear nothing down
    child.wait().unwrap();
    // The sampler's watchdog ends it; the container waits for `clean`.
    assert!(
        crate::telemetry::gone(&mark, Duration::from_secs(8)),
        "the sampler outlived a SIGKILLed orchestrate"
    );
    let left = provider.list(&task_filter(&task)).await.unwrap();
    assert_eq!(
        left.len(),
        1,
        "the killed runner's container is still there"
    );
    let out = Command::new(common::bin())
        .args(["clean", "--task", &task])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), left[0].name);
    assert!(provider.list(&task_filter(&task)).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrate_run_reports_every_preflight_problem_and_starts_nothing() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let task = format!("it-preflight-{}", std::process::id());
    let busy = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let path = docker_task(dir.path(), &task, 4, 8);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(
            &format!("image: {IMAGE}"),
            "image: orchestrate-test/does-not-exist:0.0.1",
        )
        .replace("port: auto", &format!("port: {busy_port}"));
    std::fs::write(&path, text).unwrap();
    let started = Instant::now();
    let out = orchestrate_run(dir.path(), &path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(15), "{stderr}");
    assert!(stderr.contains("nothing was started"), "{stderr}");
    assert!(
        stderr.contains("image `orchestrate-test/does-not-exist:0.0.1` is not on local"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("port {busy_port} on 127.0.0.1 is already in use")),
        "{stderr}"
    );
    assert!(provider.list(&task_filter(&task)).await.unwrap().is_empty());
    assert!(!dir.path().join("results").join(&task).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_containers_gpus_are_sampled_on_the_host_it_runs_on() {
    let shutdown = Shutdown::new();
    let Some(_provider) = provider(&shutdown).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let task = format!("it-gpu-{}", std::process::id());
    let path = docker_task(dir.path(), &task, 4, 8);
    let mark = format!("telemetry-docker-{}", std::process::id());
    let out = orchestrate_run(dir.path(), &path)
        .args([
            "--telemetry-command",
            &crate::telemetry::stand_in("0.2", 1, &mark),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let archive = std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    for point in ["concurrency=1", "concurrency=2"] {
        let dir = archive.join("points").join(point);
        assert!(dir.join("telemetry/local.log").is_file(), "{point}");
        let summary = common::json(&dir.join("summary.json"));
        let gpu = &summary["telemetry"]["per_gpu"][0];
        assert_eq!(gpu["host"], "local", "{summary:#}");
        assert_eq!(gpu["instances"], serde_json::json!(["server-0"]));
        assert!(summary["joules_per_token"].as_f64().unwrap() > 0.0);
    }
    assert!(
        crate::telemetry::gone(&mark, Duration::from_secs(5)),
        "the sampler outlived the run"
    );
}
