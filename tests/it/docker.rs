//! The docker provider against the real engine on this machine, with an image built locally
//! from our own binary (scripts/build-mock-image.sh; no registry): containers start, logs
//! land in the sink, exits are seen at once, every teardown path removes the container, and
//! `orchestrate ps` / `orchestrate clean` find what a dead owner left behind.
//!
//! Needs the Docker engine: in CI (`CI=true`) a missing engine fails these tests; elsewhere
//! they skip with a printed reason.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use orchestrate::plan::{GpuRequest, GpuVendor, HttpProbePlan, ReadinessPlan, Resources};
use orchestrate::provider::docker::{
    DockerOptions, DockerProvider, LabelFilter, PreflightCheck, PreflightProblem,
};
use orchestrate::provider::{ContainerOptions, LaunchRequest, LogSink, Network, Provider};
use orchestrate::readiness::{self, ReadinessError};
use orchestrate::shutdown::Shutdown;
use tokio_util::sync::CancellationToken;

use crate::common;

pub(crate) const IMAGE: &str = "orchestrate-mock:test";

/// The provider for the local engine, or `None` (skip) outside CI when there is no engine.
pub(crate) async fn provider(shutdown: &Shutdown) -> Option<DockerProvider> {
    provider_with(
        shutdown,
        DockerOptions {
            stop_grace: Duration::from_secs(2),
            pull_idle_timeout: Duration::from_secs(10),
            ..DockerOptions::default()
        },
    )
    .await
}

async fn provider_with(shutdown: &Shutdown, options: DockerOptions) -> Option<DockerProvider> {
    match DockerProvider::connect(shutdown.clone(), options).await {
        Ok(provider) => {
            mock_image();
            Some(provider)
        }
        Err(e) if common::in_ci() => panic!("CI=true but the docker engine is unreachable: {e}"),
        Err(e) => {
            eprintln!("skipping: no docker engine ({e})");
            None
        }
    }
}

/// Build (once per test process, and only when the binary changed) the local test image.
pub(crate) fn mock_image() -> &'static str {
    static BUILT: OnceLock<Result<String, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = Command::new(common::repo().join("scripts/build-mock-image.sh"))
            .arg(common::bin())
            .arg(IMAGE)
            .output()
            .map_err(|e| format!("cannot run scripts/build-mock-image.sh: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    if let Err(e) = built {
        panic!("cannot build {IMAGE}: {e}");
    }
    IMAGE
}

/// A run id no other test (or earlier run) uses.
fn run_id(test: &str) -> String {
    format!("it-{}-{test}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    nanos % 100_000
}

fn request(run: &str, task: &str, commands: &[&str], log: LogSink) -> LaunchRequest {
    LaunchRequest {
        run_id: run.into(),
        task: task.into(),
        deployment: "d1".into(),
        role: "server".into(),
        index: 0,
        image: Some(IMAGE.into()),
        commands: commands.iter().map(|c| c.to_string()).collect(),
        env: vec![("GREETING".into(), "hello from the container".into())],
        port: free_port(),
        volumes: vec![],
        resources: Resources::default(),
        log,
        container: ContainerOptions::default(),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Containers of `run` still on the engine.
async fn containers_of(provider: &DockerProvider, run: &str) -> Vec<String> {
    let filter = LabelFilter {
        run: Some(run.into()),
        task: None,
    };
    provider
        .list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// Sleeps until SIGTERM, then says so (the last line must survive the teardown).
const WAIT_FOR_TERM: &str = "trap 'echo got SIGTERM, shutting down; exit 0' TERM; sleep 300 & wait";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_runs_with_logs_in_the_sink_and_stop_removes_it() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("up");
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("logs/server-0.log");
    let sink = LogSink::create(&log_path).unwrap();
    let commands = ["echo \"$GREETING\"", "echo to-stderr >&2", WAIT_FOR_TERM];
    let instance = provider
        .launch(request(&run, "up", &commands, sink))
        .await
        .unwrap();
    assert!(instance.describe().starts_with("container orchestrate-"));
    assert!(instance.base_url().starts_with("http://127.0.0.1:"));
    assert_eq!(shutdown.live(), 1, "an emergency kill is registered");
    assert_eq!(containers_of(&provider, &run).await.len(), 1);

    let deadline = Instant::now() + Duration::from_secs(10);
    while instance.log().tail(10).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "no logs: {:?}",
            instance.log().tail(10)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let facts = instance.facts();
    assert!(
        facts["image"]["id"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(facts["container"]["network"], "bridge");

    instance.stop().await.unwrap();
    assert_eq!(shutdown.live(), 0);
    assert!(containers_of(&provider, &run).await.is_empty());
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(text.contains("hello from the container\n"), "{text}");
    assert!(text.contains("to-stderr\n"), "{text}");
    assert!(
        text.contains("got SIGTERM, shutting down"),
        "the last line is flushed before removal: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_server_in_a_container_becomes_ready_on_the_published_port() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("mock");
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("logs/server-0.log");
    let mut req = request(&run, "mock", &[], LogSink::create(&log_path).unwrap());
    let port = req.port;
    req.commands = vec![format!(
        "exec orchestrate mock-server --host 0.0.0.0 --port {port} --startup-delay 500ms --model served-in-docker"
    )];
    let instance = provider.launch(req).await.unwrap();
    assert_eq!(instance.base_url(), format!("http://127.0.0.1:{port}"));
    let plan = ReadinessPlan {
        http: Some(HttpProbePlan {
            path: "/health".into(),
            status: 200,
            interval: Duration::from_millis(200),
        }),
        generate: false,
        timeout: Duration::from_secs(30),
    };
    readiness::wait(instance.as_ref(), &plan, None, &CancellationToken::new())
        .await
        .unwrap();
    let (status, body) = readiness::get(&instance.base_url(), "/v1/models", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("served-in-docker"), "{body}");
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("listening on"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_exits_at_start_is_seen_at_once_with_code_and_tail() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("exit");
    let commands = [
        "echo loading model",
        "echo 'fatal: no such model' >&2",
        "exit 3",
    ];
    let instance = provider
        .launch(request(&run, "exit", &commands, LogSink::memory()))
        .await
        .unwrap();
    let started = Instant::now();
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .expect("exited() resolves when the container exits");
    assert_eq!(exit.code, Some(3));
    assert!(started.elapsed() < Duration::from_secs(5));
    // stdout and stderr are separate pipes: their relative order is not kept.
    let mut tail = instance.log().tail(2);
    tail.sort();
    assert_eq!(tail, vec!["fatal: no such model", "loading model"]);
    // Awaiting again gives the same answer.
    assert_eq!(instance.exited().await, exit);
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_at_once_with_the_tail_when_the_container_exits_while_starting() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("ready");
    let commands = [
        "echo loading weights",
        "sleep 1",
        "echo 'CUDA error: out of memory' >&2",
        "exit 1",
    ];
    let instance = provider
        .launch(request(&run, "ready", &commands, LogSink::memory()))
        .await
        .unwrap();
    let plan = ReadinessPlan {
        http: Some(HttpProbePlan {
            path: "/health".into(),
            status: 200,
            interval: Duration::from_millis(200),
        }),
        generate: false,
        timeout: Duration::from_secs(60),
    };
    let started = Instant::now();
    let error = readiness::wait(instance.as_ref(), &plan, None, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10), "{error}");
    match &error {
        ReadinessError::Exited { exit, tail, .. } => {
            assert_eq!(exit.code, Some(1));
            assert!(tail.contains("loading weights"), "{tail}");
            assert!(tail.contains("CUDA error: out of memory"), "{tail}");
        }
        other => panic!("expected an exit during startup, got: {other}"),
    }
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_never_answers_times_out_the_pull() {
    let shutdown = Shutdown::new();
    let options = DockerOptions {
        pull_idle_timeout: Duration::from_secs(2),
        ..DockerOptions::default()
    };
    let Some(provider) = provider_with(&shutdown, options).await else {
        return;
    };
    // A registry that accepts connections and never says a word (the engine treats
    // 127.0.0.0/8 registries as plain HTTP).
    let silent = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let run = run_id("pull");
    let mut req = request(&run, "pull", &["true"], LogSink::memory());
    let image = format!("127.0.0.1:{port}/orchestrate/never:1");
    req.image = Some(image.clone());
    let started = Instant::now();
    let error = match provider.launch(req).await {
        Ok(_) => panic!("nothing can be pulled from a silent registry"),
        Err(e) => e.to_string(),
    };
    held.abort();
    assert!(started.elapsed() < Duration::from_secs(10), "{error}");
    assert!(
        error.contains(&format!(
            "image `{image}` is not present on local and pulling it made no progress for 2s"
        )),
        "{error}"
    );
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_without_registry_fails_fast_and_starts_nothing() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("missing");
    let mut req = request(&run, "missing", &["true"], LogSink::memory());
    req.image = Some("orchestrate-test/does-not-exist:0.0.1".into());
    let started = Instant::now();
    let error = match provider.launch(req).await {
        Ok(_) => panic!("a missing image must not launch"),
        Err(e) => e.to_string(),
    };
    assert!(started.elapsed() < Duration::from_secs(15), "{error}");
    assert!(
        error.contains("image `orchestrate-test/does-not-exist:0.0.1` is not present on local"),
        "{error}"
    );
    assert!(containers_of(&provider, &run).await.is_empty());
    assert_eq!(shutdown.live(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_with_the_same_name_is_named_with_the_way_out() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("twice");
    let first = provider
        .launch(request(&run, "twice", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    let error = match provider
        .launch(request(&run, "twice", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
    {
        Ok(_) => panic!("two containers cannot share a name"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains(&format!("remove it with `orchestrate clean --run {run}`")),
        "{error}"
    );
    assert_eq!(containers_of(&provider, &run).await.len(), 1);
    assert_eq!(shutdown.live(), 1);
    first.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_instance_without_stop_removes_its_container() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("drop");
    let instance = provider
        .launch(request(&run, "drop", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    assert_eq!(containers_of(&provider, &run).await.len(), 1);
    drop(instance);
    assert!(containers_of(&provider, &run).await.is_empty());
    assert_eq!(shutdown.live(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emergency_kill_removes_running_containers() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("kill");
    let instance = provider
        .launch(request(&run, "kill", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    // What a second Ctrl-C does, from the signal task inside the runtime.
    let killer = shutdown.clone();
    tokio::spawn(async move { killer.kill_all() })
        .await
        .unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_ne!(exit.code, Some(0), "{exit}");
    instance.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps_lists_and_clean_removes_what_a_dead_owner_left() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("clean");
    for task in ["alpha", "beta"] {
        let instance = provider
            .launch_container(request(&run, task, &[WAIT_FOR_TERM], LogSink::memory()))
            .await
            .unwrap();
        // The owner dies without any teardown: no stop, no Drop.
        std::mem::forget(instance);
    }

    let ps = Command::new(common::bin())
        .args(["ps", "--run", &run])
        .output()
        .unwrap();
    assert!(
        ps.status.success(),
        "{}",
        String::from_utf8_lossy(&ps.stderr)
    );
    let table = String::from_utf8(ps.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("RUN"), "{table}");
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].starts_with(&run) && lines[1].contains("alpha"),
        "{table}"
    );
    assert!(
        lines[2].contains("beta") && lines[2].contains("running"),
        "{table}"
    );

    let json = Command::new(common::bin())
        .args(["ps", "--json", "--run", &run])
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let tasks: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["alpha", "beta"], "{listed:#}");
    assert_eq!(listed[0]["run"], run.as_str());

    let clean = |args: &[&str]| {
        let out = Command::new(common::bin())
            .arg("clean")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let removed = clean(&["--run", &run, "--task", "alpha"]);
    assert_eq!(removed.lines().count(), 1, "{removed}");
    assert!(removed.contains("-alpha-"), "{removed}");
    let left = containers_of(&provider, &run).await;
    assert_eq!(left.len(), 1);
    assert!(left[0].contains("-beta-"));

    let removed = clean(&["--run", &run]);
    assert!(removed.contains("-beta-"), "{removed}");
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_reports_every_problem_together_and_starts_nothing() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let busy = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let gpu = GpuRequest {
        count: 1,
        names: vec![],
        vendor: GpuVendor::Nvidia,
    };
    let no_nvidia = Command::new("nvidia-smi").output().is_err();
    let mut checks = vec![
        PreflightCheck::Image(IMAGE.into()),
        PreflightCheck::Image("orchestrate-test/does-not-exist:0.0.1".into()),
        PreflightCheck::Port {
            port: busy_port,
            network: Network::Bridge,
        },
        PreflightCheck::Port {
            port: free_port(),
            network: Network::Bridge,
        },
    ];
    if no_nvidia {
        checks.push(PreflightCheck::Gpus(gpu));
    }
    let before = provider.list(&LabelFilter::default()).await.unwrap().len();
    let problems = provider.preflight(&checks).await.unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        matches!(&problems[0], PreflightProblem::ImageUnavailable { image, .. } if image.contains("does-not-exist")),
        "{text:?}"
    );
    assert!(
        matches!(&problems[1], PreflightProblem::PortInUse { port, .. } if *port == busy_port),
        "{text:?}"
    );
    if no_nvidia {
        assert!(text[2].contains("nvidia-smi is not installed"), "{text:?}");
    }
    assert_eq!(problems.len(), if no_nvidia { 3 } else { 2 }, "{text:?}");
    assert_eq!(
        provider.list(&LabelFilter::default()).await.unwrap().len(),
        before
    );

    let fine = [
        PreflightCheck::Image(IMAGE.into()),
        PreflightCheck::Port {
            port: free_port(),
            network: Network::Bridge,
        },
    ];
    provider.preflight(&fine).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_facts_record_the_engine_and_which_gpu_tools_exist() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let facts = provider.host_facts().await;
    let version = facts["docker"]["version"].as_str().unwrap();
    assert!(!version.is_empty());
    for tool in ["nvidia-smi", "rocm-smi", "amd-smi"] {
        let installed = Command::new(tool).arg("--help").output().is_ok();
        assert_eq!(
            facts["gpus"][tool]["present"], installed,
            "{tool}: {facts:#}"
        );
    }
}

/// Set for the owner process of `a_sigkilled_owner_leaves_a_container_that_clean_removes`.
const OWNER_RUN_ENV: &str = "ORCHESTRATE_IT_OWNER_RUN";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the owner process of a_sigkilled_owner_leaves_a_container_that_clean_removes"]
async fn owner_process() {
    let Ok(run) = std::env::var(OWNER_RUN_ENV) else {
        eprintln!("nothing to do: {OWNER_RUN_ENV} is set by the parent test only");
        return;
    };
    let shutdown = Shutdown::new();
    let provider = provider(&shutdown)
        .await
        .expect("the parent checked the engine");
    let instance = provider
        .launch(request(&run, "owner", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    println!("owner ready: {}", instance.describe());
    tokio::time::sleep(Duration::from_secs(120)).await;
    instance.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_owner_leaves_a_container_that_clean_removes() {
    use std::io::BufRead;
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("sigkill");
    let mut owner = Command::new(std::env::current_exe().unwrap())
        .args([
            "docker::owner_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(OWNER_RUN_ENV, &run)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(owner.stdout.take().unwrap());
    let ready = stdout
        .lines()
        .map_while(Result::ok)
        .find(|line| line.starts_with("owner ready"));
    assert!(ready.is_some(), "the owner never started its container");
    owner.kill().unwrap(); // SIGKILL: no teardown can run
    owner.wait().unwrap();
    assert_eq!(containers_of(&provider, &run).await.len(), 1, "left behind");

    let out = Command::new(common::bin())
        .args(["clean", "--run", &run])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("-owner-"));
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_reached_through_a_forwarded_tcp_port_runs_and_cleans_up() {
    let shutdown = Shutdown::new();
    let Some(local) = provider(&shutdown).await else {
        return;
    };
    // What an SSH tunnel does: a local TCP port whose connections reach the engine's socket.
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let forward = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let endpoint = format!("tcp://{}", forward.local_addr().unwrap());
    let tunnel = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = forward.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    let options = DockerOptions {
        host_label: "tunnelled".into(),
        stop_grace: Duration::from_secs(2),
        engine_is_local: false,
        ..DockerOptions::default()
    };
    let remote = DockerProvider::connect_to(&endpoint, shutdown.clone(), options)
        .await
        .unwrap();
    assert_eq!(remote.name(), "docker@tunnelled");
    let run = run_id("tunnel");
    let first = remote
        .launch(request(
            &run,
            "tunnel",
            &["echo through the tunnel", WAIT_FOR_TERM],
            LogSink::memory(),
        ))
        .await
        .unwrap();
    let mut second_request = request(&run, "tunnel", &[WAIT_FOR_TERM], LogSink::memory());
    second_request.index = 1;
    let second = remote.launch(second_request).await.unwrap();
    assert_eq!(containers_of(&local, &run).await.len(), 2);
    first.stop().await.unwrap();
    drop(second); // the Drop fallback reconnects through the same endpoint
    assert!(containers_of(&local, &run).await.is_empty());
    let facts = remote.host_facts().await;
    assert_eq!(facts["docker"]["endpoint"], endpoint.as_str());
    assert!(
        facts["gpus"].is_string(),
        "GPUs are not probed for a remote engine: {facts}"
    );
    tunnel.abort();
}

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
            .map(|run| run.path().join("logs/server-0.log"));
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
    let log = std::fs::read_to_string(archive.join("logs/server-0.log")).unwrap();
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
    let mut child = orchestrate_run(dir.path(), &path).spawn().unwrap();
    wait_until_serving(dir.path(), &task).await;
    child.kill().unwrap(); // SIGKILL: the runner can tear nothing down
    child.wait().unwrap();
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
async fn volumes_are_mounted_read_write_or_read_only() {
    use orchestrate::plan::VolumeMount;
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(cache.path().join("weights.txt"), "cached weights\n").unwrap();
    let run = run_id("volumes");
    let mount = |container: &str, read_only: bool| VolumeMount {
        host: cache.path().display().to_string(),
        container: container.into(),
        read_only,
    };
    let mut rw = request(
        &run,
        "volumes",
        &[
            "read line < /cache/weights.txt",
            "echo \"$line via $GREETING\" > /cache/out.txt",
        ],
        LogSink::memory(),
    );
    rw.volumes = vec![mount("/cache", false)];
    let instance = provider.launch(rw).await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_eq!(exit.code, Some(0), "{:?}", instance.log().tail(5));
    instance.stop().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(cache.path().join("out.txt")).unwrap(),
        "cached weights via hello from the container\n"
    );

    let mut ro = request(
        &run,
        "volumes",
        &["echo no > /cache/denied.txt"],
        LogSink::memory(),
    );
    ro.index = 1;
    ro.volumes = vec![mount("/cache", true)];
    let instance = provider.launch(ro).await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_ne!(exit.code, Some(0));
    assert!(
        instance
            .log()
            .tail(5)
            .join("\n")
            .contains("Read-only file system"),
        "{:?}",
        instance.log().tail(5)
    );
    instance.stop().await.unwrap();
    assert!(!cache.path().join("denied.txt").exists());
    assert!(containers_of(&provider, &run).await.is_empty());
}

/// `Instance::exec` on a container: the command runs inside it (or on this machine for
/// `ExecTarget::Host`), output and exit code come back, and an abandoned command (the
/// future dropped, as on a timeout) is killed with everything it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_in_the_container_or_on_the_host_and_an_abandoned_one_is_killed() {
    use orchestrate::provider::{ExecRequest, ExecTarget};
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("exec");
    let mut req = request(&run, "exec", &[], LogSink::memory());
    req.commands = vec![format!(
        "exec orchestrate mock-server --host 0.0.0.0 --port {}",
        req.port
    )];
    let instance = provider.launch(req).await.unwrap();
    let exec = |command: String, target: ExecTarget| {
        instance.exec(ExecRequest {
            command,
            target,
            env: vec![("EXTRA".into(), "from the task env".into())],
            log: LogSink::memory(),
        })
    };
    let out = exec(
        "[ -f /.dockerenv ] && echo in-container; echo \"$EXTRA\"; echo err >&2; exit 5".into(),
        ExecTarget::Instance,
    )
    .await
    .unwrap();
    assert_eq!(out.exit.code, Some(5));
    assert_eq!(out.stdout, "in-container\nfrom the task env\n");
    assert_eq!(out.stderr, "err\n");

    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("host-was-here");
    let out = exec(format!("echo x > {}", mark.display()), ExecTarget::Host)
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert!(mark.exists(), "`where: host` runs on this machine");

    let abandoned = exec(
        "sh -c 'sleep 300' & sleep 300 & echo started; wait".into(),
        ExecTarget::Instance,
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(2), abandoned)
            .await
            .is_err()
    );
    // Killed processes stay zombies under the mock server (pid 1 reaps nothing): they run
    // nothing, so only live ones count.
    let sleeping = r#"for s in /proc/[0-9]*/stat; do read -r a b c r < "$s" && [ "$b" = "(sleep)" ] && [ "$c" != Z ] && echo "$a"; done; true"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = exec(sleeping.into(), ExecTarget::Instance).await.unwrap();
        if out.stdout.trim().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sleeps left in the container: {}",
            out.stdout
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}
