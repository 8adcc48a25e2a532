//! `orchestrate run` end to end on one machine: the built binary, the local provider, the
//! built-in mock server as the inference server, the archive on disk. Covers the demo's
//! archive, measured latencies against the mock's configured ones, Ctrl-C mid-run, and
//! servers that die or never become ready.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, json, latest, repo};

fn run_task(task: &str, results: &Path) -> std::process::Output {
    Command::new(bin())
        .args(["run", task, "--results"])
        .arg(results)
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("orchestrate runs")
}

pub(crate) fn group_alive(pgid: i32) -> bool {
    // A killed process whose parent is gone waits for init to reap it: a zombie runs nothing,
    // so only live (non-zombie) members count. /proc/<pid>/stat: "pid (comm) state ppid pgrp".
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

/// Process groups of every instance the manifest recorded.
fn recorded_groups(manifest: &Value) -> Vec<i32> {
    let mut groups = Vec::new();
    for d in manifest["deployments"].as_array().unwrap() {
        for (_, facts) in d["instances"].as_object().unwrap() {
            if let Some(pgid) = facts["pgid"].as_i64() {
                groups.push(pgid as i32);
            }
        }
    }
    groups
}

#[test]
fn the_demo_task_runs_to_a_complete_archive() {
    let results = tempfile::tempdir().unwrap();
    let out = run_task("tasks/demo.yaml", results.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {stderr}");
    let dir = latest(results.path(), "demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ISL:OSL=256:32") && stdout.contains(&dir.display().to_string()),
        "{stdout}"
    );

    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(manifest["status"], "completed");
    assert_eq!(manifest["format_version"], 1);
    assert!(manifest["ended_at"].is_string());
    assert_eq!(manifest["deployments"][0]["status"], "stopped");
    assert!(
        manifest["deployments"][0]["time_to_ready_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // `resolved` holds the task as a reproduction runs it: `{{ port }}` rendered per instance.
    let server = &manifest["resolved"]["deployments"]["d1"]["roles"][0]["instances"][0];
    let port = server["port"].as_u64().expect("the instance's port");
    let command = server["commands"][0].as_str().unwrap();
    assert!(
        command.ends_with(&format!(" mock-server --port {port} --model demo-model")),
        "{command}"
    );
    assert_eq!(
        manifest["resolved"]["deployments"]["d1"]["model"],
        "demo-model"
    );
    let points = manifest["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    for p in points {
        assert_eq!(p["status"], "completed", "{p}");
        assert_eq!(p["validity"]["valid"], true, "{p}");
        let c = p["axes"]["concurrency"].as_u64().unwrap();
        let pdir = dir.join("points").join(p["dir"].as_str().unwrap());
        let summary = json(&pdir.join("summary.json"));
        assert_eq!(
            summary["completed"].as_u64().unwrap(),
            c * 4,
            "num_prompts = concurrency * 4"
        );
        assert_eq!(summary["total_output_tokens"].as_u64().unwrap(), c * 4 * 32);
        assert_eq!(summary["max_concurrency_reached"].as_u64().unwrap(), c);
        let lines = std::fs::read_to_string(pdir.join("requests.jsonl"))
            .unwrap()
            .lines()
            .count() as u64;
        assert_eq!(lines, c * 4, "one record per request");
    }
    // The mock behaves like a batching engine: more streams, slower tokens.
    let tpot = |i: usize| {
        json(
            &dir.join("points")
                .join(points[i]["dir"].as_str().unwrap())
                .join("summary.json"),
        )["mean_tpot_ms"]
            .as_f64()
            .unwrap()
    };
    assert!(
        tpot(3) > tpot(0) * 1.5,
        "TPOT at 64 streams ({}) should exceed TPOT at 1 ({})",
        tpot(3),
        tpot(0)
    );

    let log = std::fs::read_to_string(dir.join("logs/server-r0-n0.log")).unwrap();
    assert!(log.contains("listening on"), "{log}");
    let csv = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    for file in ["summary.json", "report.md", "report.html"] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    for pgid in recorded_groups(&manifest) {
        assert!(
            !group_alive(pgid),
            "server process group {pgid} outlived the run"
        );
    }
}

/// Tolerance: the client's median ITL within 15% of the mock's 20 ms step, and its median
/// TTFT between one and three steps (a request waits for the next step, then is served).
#[test]
fn measured_latencies_match_the_mock_configuration() {
    let results = tempfile::tempdir().unwrap();
    let out = run_task("tests/fixtures/run/accuracy.yaml", results.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = latest(results.path(), "accuracy");
    for point in ["concurrency=1", "concurrency=8"] {
        let s = json(&dir.join("points").join(point).join("summary.json"));
        let itl = s["median_itl_ms"].as_f64().unwrap();
        let tpot = s["median_tpot_ms"].as_f64().unwrap();
        let ttft = s["median_ttft_ms"].as_f64().unwrap();
        assert!(
            (17.0..=23.0).contains(&itl),
            "{point}: median ITL {itl} ms, configured 20 ms"
        );
        assert!(
            (17.0..=23.0).contains(&tpot),
            "{point}: median TPOT {tpot} ms, configured 20 ms"
        );
        assert!(
            (15.0..=65.0).contains(&ttft),
            "{point}: median TTFT {ttft} ms, expected 20-60 ms"
        );
    }
}

/// Start `task`, SIGINT it once point `point` (0-based) is running; the exit status and the
/// run's manifest path.
fn interrupt_during_point(
    task: &str,
    results: &Path,
    point: usize,
) -> (std::process::ExitStatus, String, PathBuf) {
    signal_during_point(task, results, point, 1)
}

/// As `interrupt_during_point`, with `signals` SIGINTs 50 ms apart.
fn signal_during_point(
    task: &str,
    results: &Path,
    point: usize,
    signals: usize,
) -> (std::process::ExitStatus, String, PathBuf) {
    let name = Path::new(task)
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let mut child = Command::new(bin())
        .args(["run", task, "--no-report", "--results"])
        .arg(results)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let manifest_path = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "point {point} never started"
        );
        if let Ok(link) = std::fs::read_link(results.join(&name).join("latest")) {
            let path = results.join(&name).join(link).join("manifest.json");
            if let Ok(text) = std::fs::read_to_string(&path) {
                let m: Value = serde_json::from_str(&text).unwrap();
                if m["points"][point]["status"] == "running" {
                    break path;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..signals {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        std::thread::sleep(Duration::from_millis(50));
    }
    let waited = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "orchestrate did not stop after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    (
        status,
        String::from_utf8_lossy(&out.stderr).to_string(),
        manifest_path,
    )
}

#[test]
fn sigint_mid_run_keeps_finished_points_and_leaves_no_process() {
    let results = tempfile::tempdir().unwrap();
    let (status, stderr, manifest_path) =
        interrupt_during_point("tests/fixtures/run/interrupt.yaml", results.path(), 1);
    assert_eq!(status.code(), Some(130), "{stderr}");
    let manifest = json(&manifest_path);
    assert_eq!(manifest["status"], "interrupted");
    assert_eq!(manifest["points"][0]["status"], "completed");
    // The point in flight was interrupted, not failed (issue 29), and its partial
    // measurement is not judged by the validity gates.
    assert_eq!(
        manifest["points"][1]["status"], "interrupted",
        "{}",
        manifest["points"][1]
    );
    assert!(!stderr.contains("validity gates"), "{stderr}");
    assert!(!stderr.contains("failed to start"), "{stderr}");
    let dir = manifest_path.parent().unwrap();
    assert!(
        dir.join("points/output_len=10/summary.json").is_file(),
        "the finished point is kept"
    );
    let groups = recorded_groups(&manifest);
    assert!(!groups.is_empty());
    for pgid in groups {
        assert!(
            !group_alive(pgid),
            "server process group {pgid} survived SIGINT"
        );
    }
}

#[test]
fn resume_runs_only_the_points_an_interrupted_run_did_not_finish() {
    let results = tempfile::tempdir().unwrap();
    let (status, stderr, manifest_path) =
        interrupt_during_point("tests/fixtures/run/resume.yaml", results.path(), 2);
    assert_eq!(status.code(), Some(130), "{stderr}");
    let before = json(&manifest_path);
    assert_eq!(before["points"][1]["status"], "completed");
    let dir = manifest_path.parent().unwrap().to_path_buf();
    let out = Command::new(bin())
        .args(["run", "--no-report", "--resume"])
        .arg(&dir)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = json(&manifest_path);
    assert_eq!(after["status"], "completed");
    for i in 0..2 {
        assert_eq!(
            after["points"][i]["started_at"], before["points"][i]["started_at"],
            "point {i} was run again"
        );
    }
    assert_eq!(after["points"][2]["status"], "completed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 point(s)"),
        "only the unfinished point runs: {stderr}"
    );
    assert!(dir.join("points/output_len=150/summary.json").is_file());
    assert_eq!(
        std::fs::read_dir(results.path().join("resume"))
            .unwrap()
            .count(),
        2,
        "no new run directory (run + latest)"
    );
}

#[test]
fn resume_refuses_a_changed_task_file() {
    let work = tempfile::tempdir().unwrap();
    let task = work.path().join("t.yaml");
    let text =
        std::fs::read_to_string(repo().join("tests/fixtures/run/exits-at-start.yaml")).unwrap();
    std::fs::write(&task, &text).unwrap();
    let results = work.path().join("results");
    let out = Command::new(bin())
        .args(["run", "--no-report", "--results"])
        .arg(&results)
        .arg(&task)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    std::fs::write(&task, text.replace("exit 3", "exit 4")).unwrap();
    let dir = latest(&results, "exits-at-start");
    let out = Command::new(bin())
        .args(["run", "--resume"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("changed since run") && stderr.contains("start a new run"),
        "{stderr}"
    );
}

#[test]
fn a_server_that_exits_at_start_fails_readiness_at_once_with_its_log_tail() {
    let results = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = run_task("tests/fixtures/run/exits-at-start.yaml", results.path());
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}; readiness must not wait for its 60 s deadline"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exit code 3") && stderr.contains("no CUDA GPUs are available"),
        "{stderr}"
    );
    // Named by its role and instance, not only by its process group; told once.
    assert!(
        stderr.contains("[d1] failed to start: server-0 (local process group "),
        "{stderr}"
    );
    assert!(
        stderr.contains("exited during startup (exit code 3)"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("failed to start").count(), 1, "{stderr}");
    let manifest = json(&latest(results.path(), "exits-at-start").join("manifest.json"));
    assert_eq!(manifest["status"], "failed");
    assert_eq!(manifest["deployments"][0]["status"], "failed");
    assert!(
        manifest["deployments"][0]["error"]
            .as_str()
            .unwrap()
            .contains("no CUDA GPUs")
    );
    assert_eq!(manifest["points"][0]["status"], "skipped");
}

#[test]
fn a_server_that_never_becomes_healthy_fails_at_the_deadline() {
    let results = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = run_task("tests/fixtures/run/never-ready.yaml", results.path());
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "took {took:?} for a 2 s deadline"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not ready after 2s") && stderr.contains("still compiling CUDA graphs"),
        "{stderr}"
    );
    let manifest = json(&latest(results.path(), "never-ready").join("manifest.json"));
    for pgid in recorded_groups(&manifest) {
        assert!(!group_alive(pgid), "process group {pgid} left behind");
    }
}

#[test]
fn every_verb_is_documented_in_docs_cli() {
    let help = Command::new(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let doc = std::fs::read_to_string(repo().join("docs/cli.md")).unwrap();
    let verbs: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            l.strip_prefix("  ")
                .filter(|rest| !rest.starts_with(' '))
                .and_then(|l| l.split_whitespace().next())
        })
        .filter(|v| *v != "help")
        .collect();
    assert!(verbs.len() >= 10, "{help}");
    for verb in verbs {
        assert!(
            doc.contains(&format!("| `{verb}")),
            "docs/cli.md does not document `{verb}`"
        );
    }
}

#[test]
fn a_second_ctrl_c_forces_the_exit_and_still_kills_the_servers() {
    let results = tempfile::tempdir().unwrap();
    let (status, stderr, manifest_path) =
        signal_during_point("tests/fixtures/run/interrupt.yaml", results.path(), 1, 2);
    assert_eq!(status.code(), Some(130), "{stderr}");
    let manifest = json(&manifest_path);
    let groups = recorded_groups(&manifest);
    assert!(!groups.is_empty());
    std::thread::sleep(Duration::from_millis(200));
    for pgid in groups {
        assert!(
            !group_alive(pgid),
            "server process group {pgid} survived a forced exit"
        );
    }
}

#[test]
fn a_task_without_a_model_sends_the_one_the_server_names() {
    let results = tempfile::tempdir().unwrap();
    let out = run_task("tests/fixtures/run/served-model.yaml", results.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = latest(results.path(), "served-model");
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(manifest["model"], "org/served-by-the-server");
    assert_eq!(
        manifest["deployments"][0]["served_model"],
        "org/served-by-the-server"
    );
    // The mock answers 404 to a model it does not serve: every request went through.
    let point = &manifest["points"][0];
    assert_eq!(point["status"], "completed", "{point}");
    let summary = json(
        &dir.join("points")
            .join(point["dir"].as_str().unwrap())
            .join("summary.json"),
    );
    assert_eq!(summary["completed"], 6, "{summary}");
}

#[test]
fn a_launch_command_that_uses_model_when_the_task_names_none_says_to_add_it() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("t.yaml");
    std::fs::write(
        &task,
        "name: t\ncommands: [\"vllm serve {{ model }}\"]\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 4\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["plan"])
        .arg(&task)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("t.yaml:2"), "{stderr}");
    assert!(
        stderr.contains("undefined template variable `model`"),
        "{stderr}"
    );
    assert!(stderr.contains("add `model:"), "{stderr}");
    // Without the template the same task plans, and says where the model will come from.
    std::fs::write(
        &task,
        "name: t\ncommands: [\"vllm serve\"]\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 4\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["plan"])
        .arg(&task)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("read from the server's /v1/models"),
        "{stdout}"
    );
}
