//! External benchmark commands (`benchmark.external`) end to end through `orchestrate run`
//! with the local provider and the mock server as the deployment: a swept command whose
//! vLLM-throughput output is parsed per point on one deployment; our own `orchestrate
//! bench` as the external tool (cross-check through its result JSON); failures (non-zero
//! exit, missing metric) recorded while the run goes on; the timeout and Ctrl-C killing
//! what the command started; `report` and `check` on such a run; the command inside the
//! mock container (`where: container`, needs the Docker engine); the shipped offline sweep's
//! plan.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, json, latest, repo};

/// The mock server as a local deployment, and a benchmark section given as YAML text.
fn write_task(dir: &Path, name: &str, benchmark: &str) -> PathBuf {
    let text = format!(
        "name: {name}
backend: vllm
model: mock-model
port: auto
commands:
  - \"{{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --preset fixed --itl-ms 5\"
readiness: {{http: /health, timeout: 30s}}
benchmark:
{benchmark}"
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn run(task: &Path, results: &Path) -> std::process::Output {
    Command::new(bin())
        .args(["run", "--no-report", "--results"])
        .arg(results)
        .arg(task)
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("orchestrate runs")
}

fn point<'a>(manifest: &'a Value, id: &str) -> &'a Value {
    manifest["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no point {id} in {manifest}"))
}

/// Whether a (non-zombie) process with this pid is alive.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

fn wait_dead(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} outlived its point"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Prints vLLM's offline throughput line computed from the point's values.
const SWEEP: &str = r#"  external:
    command: >-
      echo "INFO 11-22 loading weights";
      awk -v n={{ batch_size }} -v o={{ output_len }} 'BEGIN { printf "Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", n / 4, n * (o + 50) / 4, n * o / 4 }'
    preset: vllm-throughput
  matrix:
    batch_size: [8, 16]
    output_len: [100]
"#;

#[test]
fn a_swept_external_command_is_parsed_per_point_on_one_deployment() {
    let dir = tempfile::tempdir().unwrap();
    let task = write_task(dir.path(), "ext-sweep", SWEEP);
    let results = dir.path().join("results");
    let out = run(&task, &results);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let run_dir = latest(&results, "ext-sweep");
    let manifest = json(&run_dir.join("manifest.json"));
    assert_eq!(
        manifest["deployments"].as_array().unwrap().len(),
        1,
        "an axis read only by the command must not restart the deployment: {manifest}"
    );
    for (batch, rps, total, output) in [(8, 2.0, 300.0, 200.0), (16, 4.0, 600.0, 400.0)] {
        let id = format!("batch_size={batch},output_len=100");
        let p = point(&manifest, &id);
        assert_eq!(p["status"], "completed", "{p}");
        assert_eq!(p["deployment"], "d1");
        let summary = json(
            &run_dir
                .join("points")
                .join(p["dir"].as_str().unwrap())
                .join("summary.json"),
        );
        assert_eq!(summary["request_throughput"], rps, "{summary}");
        assert_eq!(summary["total_token_throughput"], total, "{summary}");
        assert_eq!(summary["output_throughput"], output, "{summary}");
        assert_eq!(summary["external"]["tool"], "vllm-throughput");
        assert_eq!(summary["external"]["exit_code"], 0);
        assert_eq!(summary["external"]["where"], "host");
        assert!(
            summary["external"]["command"]
                .as_str()
                .unwrap()
                .contains(&format!("-v n={batch} -v o=100")),
            "{summary}"
        );
        assert_eq!(
            summary["external"]["values"]["output_throughput"]["raw"],
            format!("{output:.2}")
        );
        let log = std::fs::read_to_string(
            run_dir
                .join("points")
                .join(p["dir"].as_str().unwrap())
                .join("external.log"),
        )
        .unwrap();
        assert!(log.contains("INFO 11-22 loading weights"), "{log}");
        assert!(
            log.contains(&format!("Throughput: {rps:.2} requests/s")),
            "{log}"
        );
        // Gates that need per-request records are not measured, never failed.
        assert_eq!(p["validity"]["valid"], true, "{p}");
        let gates = p["validity"]["gates"].as_array().unwrap();
        for name in [
            "completed",
            "error_rate",
            "input_len",
            "output_len",
            "concurrency",
        ] {
            let g = gates.iter().find(|g| g["name"] == name).unwrap();
            assert_eq!(g["verdict"], "not_measured", "{g}");
        }
    }
    // One server start for both points.
    let server_log = std::fs::read_to_string(run_dir.join("logs/server-r0-n0.log")).unwrap();
    assert_eq!(
        server_log.matches("started process group").count(),
        1,
        "{server_log}"
    );

    // report and check work on external points unchanged.
    let report = Command::new(bin())
        .arg("report")
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let md = std::fs::read_to_string(run_dir.join("report.md")).unwrap();
    assert!(md.contains("batch_size"), "{md}");
    assert!(
        md.contains("400"),
        "the output throughput is in the report: {md}"
    );
    // The run itself is no baseline: compare with a copy under another run id.
    let baseline = run_dir.with_file_name("baseline-copy");
    let cp = Command::new("cp")
        .arg("-r")
        .arg(&run_dir)
        .arg(&baseline)
        .status()
        .unwrap();
    assert!(cp.success());
    let manifest_path = baseline.join("manifest.json");
    let mut manifest = json(&manifest_path);
    manifest["run_id"] = "baseline-copy".into();
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    let check = Command::new(bin())
        .arg("check")
        .arg(&run_dir)
        .arg("--baseline")
        .arg(&baseline)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(text.contains("output_throughput"), "{text}");
}

#[test]
fn our_own_bench_as_the_external_tool_cross_checks_through_its_result_json() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = repo().join("data/tokenizer/tokenizer.json");
    let results_dir = dir.path().join("bench-results");
    std::fs::create_dir_all(&results_dir).unwrap();
    let benchmark = format!(
        "  external:
    command: >-
      {{{{ orchestrate }}}} bench --backend vllm --port {{{{ port }}}} --model mock-model
      --tokenizer {tokenizer} --random-input-len 16 --random-output-len {{{{ output_len }}}}
      --ignore-eos --num-prompts 6 --max-concurrency 2
      --save-result --result-dir {results} --result-filename out-{{{{ output_len }}}}.json
    result_file: {results}/out-{{{{ output_len }}}}.json
    preset: vllm-bench-serve
    timeout: 2m
  matrix:
    output_len: [8, 16]
",
        tokenizer = tokenizer.display(),
        results = results_dir.display()
    );
    let task = write_task(dir.path(), "ext-bench", &benchmark);
    let results = dir.path().join("results");
    let out = run(&task, &results);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = latest(&results, "ext-bench");
    let manifest = json(&run_dir.join("manifest.json"));
    assert_eq!(manifest["deployments"].as_array().unwrap().len(), 1);
    for len in [8u64, 16] {
        let p = point(&manifest, &format!("output_len={len}"));
        assert_eq!(p["status"], "completed", "{p}");
        let summary = json(
            &run_dir
                .join("points")
                .join(p["dir"].as_str().unwrap())
                .join("summary.json"),
        );
        let file = json(&results_dir.join(format!("out-{len}.json")));
        for field in [
            "completed",
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "mean_ttft_ms",
            "p99_itl_ms",
        ] {
            assert_eq!(
                summary[field].as_f64(),
                file[field].as_f64(),
                "{field}: {summary}"
            );
        }
        assert_eq!(summary["completed"], 6);
        assert_eq!(summary["total_output_tokens"], 6 * len);
        assert!(summary["output_throughput"].as_f64().unwrap() > 0.0);
        assert!(
            summary["external"]["values"]["output_throughput"]["source"]
                .as_str()
                .unwrap()
                .starts_with("json"),
            "{summary}"
        );
        // The tool's full result is kept.
        assert_eq!(summary["external"]["result"]["completed"], 6);
        // completed is the tool's own count now: the gate measures it.
        let gate = p["validity"]["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "completed")
            .unwrap()
            .clone();
        assert_eq!(gate["verdict"], "pass", "{gate}");
    }
}

#[test]
fn a_failing_command_and_a_missing_metric_fail_their_points_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let benchmark = r#"  external:
    command: >-
      case {{ case }} in
      crash) echo "loading model"; echo "CUDA error: out of memory" >&2; exit 3;;
      quiet) echo "done, but no figures";;
      fine) echo "Throughput: 1.50 requests/s, 30.00 total tokens/s, 20.00 output tokens/s";;
      esac
    preset: vllm-throughput
  matrix:
    case: [crash, quiet, fine]
"#;
    let task = write_task(dir.path(), "ext-fail", benchmark);
    let results = dir.path().join("results");
    let out = run(&task, &results);
    assert!(!out.status.success(), "a run with failed points fails");
    let run_dir = latest(&results, "ext-fail");
    let manifest = json(&run_dir.join("manifest.json"));
    let crash = point(&manifest, "case=crash");
    assert_eq!(crash["status"], "failed");
    let error = crash["error"].as_str().unwrap();
    assert!(error.contains("exit code 3"), "{error}");
    assert!(error.contains("CUDA error: out of memory"), "{error}");
    let quiet = point(&manifest, "case=quiet");
    assert_eq!(quiet["status"], "failed");
    let error = quiet["error"].as_str().unwrap();
    assert!(error.contains("`request_throughput`"), "{error}");
    assert!(error.contains("`output_throughput`"), "{error}");
    assert!(error.contains("done, but no figures"), "{error}");
    assert!(
        !run_dir
            .join("points")
            .join(quiet["dir"].as_str().unwrap())
            .join("summary.json")
            .exists(),
        "a failed point has no summary"
    );
    let fine = point(&manifest, "case=fine");
    assert_eq!(fine["status"], "completed", "{fine}");
}

#[test]
fn the_timeout_kills_the_command_and_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleep.pid");
    let benchmark = format!(
        "  external:
    command: 'sleep 300 & echo $! > {pid}; wait'
    preset: vllm-throughput
    timeout: 1s
",
        pid = pidfile.display()
    );
    let task = write_task(dir.path(), "ext-timeout", &benchmark);
    let results = dir.path().join("results");
    let started = Instant::now();
    let out = run(&task, &results);
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(!out.status.success());
    let manifest = json(&latest(&results, "ext-timeout").join("manifest.json"));
    let p = point(&manifest, "default");
    assert_eq!(p["status"], "failed");
    let error = p["error"].as_str().unwrap();
    assert!(error.contains("timed out after 1s"), "{error}");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_dead(pid);
}

#[test]
fn ctrl_c_kills_the_running_command() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleep.pid");
    let benchmark = format!(
        "  external:
    command: 'sleep 300 & echo $! > {pid}; wait'
    preset: vllm-throughput
",
        pid = pidfile.display()
    );
    let task = write_task(dir.path(), "ext-sigint", &benchmark);
    let results = dir.path().join("results");
    let mut child = Command::new(bin())
        .args(["run", "--no-report", "--results"])
        .arg(&results)
        .arg(&task)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(alive(pid));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert!(!status.success());
    wait_dead(pid);
    let manifest = json(&latest(&results, "ext-sigint").join("manifest.json"));
    assert_eq!(manifest["status"], "interrupted", "{manifest}");
    assert_eq!(point(&manifest, "default")["status"], "interrupted");
}

/// `where: container` (the default with an image): `orchestrate bench` runs inside the mock
/// container against the server on localhost there, its result file read from the
/// container. Needs the Docker engine (CI=true: required).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_external_command_runs_inside_the_container() {
    let shutdown = orchestrate::shutdown::Shutdown::new();
    if crate::docker::provider(&shutdown).await.is_none() {
        return;
    }
    let image = crate::docker::mock_image();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("ext-docker-{}", std::process::id());
    let text = format!(
        "name: {name}
backend: vllm
model: m
image: {image}
port: auto
volumes:
  - {tokenizer_dir}:/tok:ro
commands:
  - exec orchestrate mock-server --host 0.0.0.0 --port {{{{ port }}}} --model m --speed 20
readiness: {{http: /health, timeout: 30s}}
benchmark:
  external:
    command: >-
      if [ -f /tok/tokenizer.json ]; then echo inside-the-container; fi;
      orchestrate bench --backend vllm --host 127.0.0.1 --port {{{{ port }}}} --model m
      --tokenizer /tok/tokenizer.json --random-input-len 16 --random-output-len 8
      --ignore-eos --num-prompts {{{{ prompts }}}} --save-result --result-dir /tmp
      --result-filename r-{{{{ prompts }}}}.json
    result_file: /tmp/r-{{{{ prompts }}}}.json
    preset: vllm-bench-serve
    timeout: 2m
  matrix:
    prompts: [3, 5]
",
        tokenizer_dir = repo().join("data/tokenizer").display()
    );
    let task = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&task, text).unwrap();
    let results = dir.path().join("results");
    let out = tokio::task::spawn_blocking(move || run(&task, &results))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = latest(&dir.path().join("results"), &name);
    let manifest = json(&run_dir.join("manifest.json"));
    assert_eq!(manifest["deployments"].as_array().unwrap().len(), 1);
    for prompts in [3u64, 5] {
        let p = point(&manifest, &format!("prompts={prompts}"));
        assert_eq!(p["status"], "completed", "{p}");
        let pdir = run_dir.join("points").join(p["dir"].as_str().unwrap());
        let summary = json(&pdir.join("summary.json"));
        assert_eq!(summary["completed"], prompts, "{summary}");
        assert_eq!(summary["total_output_tokens"], prompts * 8, "{summary}");
        assert!(summary["output_throughput"].as_f64().unwrap() > 0.0);
        assert_eq!(summary["external"]["where"], "container");
        let log = std::fs::read_to_string(pdir.join("external.log")).unwrap();
        assert!(log.contains("inside-the-container"), "{log}");
        // The result file lives in the container, not here.
        assert!(!Path::new(&format!("/tmp/r-{prompts}.json")).exists());
    }
}

/// The shipped dstack offline sweep: one deployment for all nine points (the axes are read
/// only by the command), each point's command and result file rendered with its values, in
/// the container by default, and `orchestrate plan` shows the commands.
#[test]
fn the_dstack_offline_sweep_plans_one_deployment_with_rendered_commands() {
    use orchestrate::external::{Place, Preset};
    let task = orchestrate::spec::load(&repo().join("tasks/vllm-h200-offline.yaml")).unwrap();
    let plan = orchestrate::plan::build(&task, &orchestrate::plan::PlanContext::new()).unwrap();
    assert_eq!(plan.deployments.len(), 1);
    let points = &plan.deployments[0].points;
    assert_eq!(points.len(), 9);
    let last = points.last().unwrap();
    assert_eq!(last.id, "num_prompts=1024,output_len=6400");
    let ext = last.external.as_ref().unwrap();
    assert!(
        ext.command.contains("--output-len=6400") && ext.command.contains("--num-prompts=1024"),
        "{}",
        ext.command
    );
    assert!(
        ext.command.contains("--tensor-parallel-size=8"),
        "{}",
        ext.command
    );
    assert_eq!(
        ext.result_file.as_deref(),
        Some("/tmp/throughput-1024-6400.json")
    );
    assert_eq!(ext.place, Place::Container);
    assert_eq!(ext.preset, Some(Preset::VllmThroughput));
    assert_eq!(ext.timeout, Duration::from_secs(7200));
    let out = Command::new(bin())
        .current_dir(repo())
        .args(["plan", "tasks/vllm-h200-offline.yaml"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("external (vllm-throughput, in the container of server): cd /workspace/benchmarks/Deepseek-R1 && python benchmark_throughput.py"),
        "{text}"
    );
}

/// `where: host` next to a remote Docker engine cannot run: `plan` rejects it at `where`
/// (exit 2), instead of a run failing after deploy and readiness.
#[test]
fn where_host_next_to_a_remote_docker_engine_is_a_plan_error() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts.yaml");
    std::fs::write(&hosts, "hosts:\n  gpu-a: {address: 10.0.0.5}\n").unwrap();
    let task = dir.path().join("remote-docker-ext.yaml");
    std::fs::write(
        &task,
        "name: remote-docker-ext
image: vllm/vllm-openai:latest
model: m
hosts: [gpu-a]
commands: [\"vllm serve m --port {{ port }}\"]
benchmark:
  external:
    command: echo done
    where: host
    preset: vllm-throughput
",
    )
    .unwrap();
    let out = Command::new(bin())
        .current_dir(dir.path())
        .args(["plan", "--hosts"])
        .arg(&hosts)
        .arg(&task)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:9:12: `where: host` but role `server` runs in Docker on remote host `gpu-a`",
            task.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("write `where: container`"), "{stderr}");
}
