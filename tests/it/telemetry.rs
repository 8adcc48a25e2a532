//! GPU telemetry (`run --telemetry`, issue #26) end to end with no GPU: the sampler's command
//! replaced by the stand-in that replays a real nvidia-smi recording
//! (tests/fixtures/telemetry/replay-nvidia-smi.sh), beside the mock server. The samples and
//! the figures land in the archive, a host without the tool is a note and not a failure, and
//! no sampler outlives the run, even a SIGKILLed one (`ps`/`clean` see what is left).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, json, latest, mock_task, repo, run_command};

/// The real H200 recording of the sampler's default query.
pub(crate) fn recording() -> PathBuf {
    repo().join("tests/fixtures/telemetry/nvidia-smi-h200-default-query-loop-500ms.csv")
}

/// The stand-in command: the recording replayed as `gpus` GPUs every `interval` seconds,
/// `marker` on its command line. Not `exec`ed: the sampler's shell (which the kernel kills
/// with orchestrate) has it as a child, so only the sampler's guards can end it.
pub(crate) fn stand_in(interval: &str, gpus: u32, marker: &str) -> String {
    format!(
        "sh {} {} {interval} {gpus} {marker}",
        repo()
            .join("tests/fixtures/telemetry/replay-nvidia-smi.sh")
            .display(),
        recording().display()
    )
}

/// Live processes whose command line has `marker`.
pub(crate) fn with_marker(marker: &str) -> Vec<i32> {
    crate::common::pids_with_entry("cmdline", marker)
}

/// True once no process has `marker` on its command line (within `within`).
pub(crate) fn gone(marker: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while !with_marker(marker).is_empty() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn marker(name: &str) -> String {
    format!("telemetry-{name}-{}", std::process::id())
}

/// The single point directory of the latest run of `task`.
fn point_dir(results: &Path, task: &str) -> PathBuf {
    let dir = latest(results, task).join("points");
    let mut points: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(points.len(), 1, "{points:?}");
    points.remove(0)
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_local_point_archives_each_gpus_samples_and_its_energy_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let task = mock_task(
        dir.path(),
        "gpu",
        20,
        "  dataset: {kind: random, input_len: 16, output_len: 40}\n  concurrency: 2\n  num_prompts: 6\n",
    );
    let mark = marker("local");
    let out = run_command(&task, &results, state.path())
        .args(["--telemetry-command", &stand_in("0.2", 2, &mark)])
        .args([
            "--telemetry-interval",
            "200ms",
            "--price-per-gpu-hour",
            "3.6",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        gone(&mark, Duration::from_secs(5)),
        "the sampler outlived the run"
    );
    let point = point_dir(&results, "gpu");
    let raw = std::fs::read_to_string(point.join("telemetry/local.log")).unwrap();
    assert!(raw.contains(", 1, GPU-80d98ec6"), "{raw}");

    // Every sample kept, by GPU, with the role and instance it served.
    let samples = lines(&point.join("gpu_samples.jsonl"));
    assert!(samples.len() >= 4, "{samples:?}");
    for s in &samples {
        assert_eq!(s["host"], "local");
        assert_eq!(s["role"], "server");
        assert_eq!(s["instances"], serde_json::json!(["server-0"]));
    }
    let gpus: std::collections::BTreeSet<u64> = samples
        .iter()
        .map(|s| s["index"].as_u64().unwrap())
        .collect();
    assert_eq!(gpus.into_iter().collect::<Vec<_>>(), vec![0, 1]);

    // The figures, each from the others as the docs define them.
    let summary = json(&point.join("summary.json"));
    let tele = &summary["telemetry"];
    assert_eq!(tele["energy_source"], "integrated_power", "{tele:#}");
    assert_eq!(tele["notes"], serde_json::json!([]), "{tele:#}");
    assert_eq!(summary["gpu_count"], 2);
    let energy = f(&summary["gpu_energy_j"]);
    let tokens = f(&summary["total_output_tokens"]);
    let window = f(&tele["window_end_s"]) - f(&tele["window_start_s"]);
    assert_eq!(f(&tele["window_end_s"]), f(&summary["duration"]));
    assert!((f(&summary["joules_per_token"]) - energy / tokens).abs() < 1e-9);
    assert!((f(&summary["joules_per_request"]) - energy / f(&summary["completed"])).abs() < 1e-9);
    let per_gpu = f(&summary["gpu_mean_power_w"]);
    assert!((per_gpu - energy / window / 2.0).abs() < 1e-9);
    // The recording's power stays within 79..118 W.
    assert!((79.0..118.0).contains(&per_gpu), "{per_gpu}");
    assert!(f(&summary["gpu_peak_power_w"]) >= per_gpu);
    assert_eq!(f(&summary["gpu_mean_util_pct"]), 0.0);
    assert_eq!(f(&summary["gpu_mean_mem_used_mib"]), 0.0);
    assert_eq!(tele["per_role"]["server"]["gpus"], 2);
    // 2 GPUs at $3.6/GPU-hour = $0.002 a second.
    let dollars = 2.0 * 3.6 * window / 3600.0;
    assert!((f(&tele["cost_usd"]) - dollars).abs() < 1e-12);
    let per_million = f(&summary["cost_per_million_output_tokens"]);
    assert!((per_million - dollars / tokens * 1e6).abs() < 1e-9);
    assert!((f(&summary["output_tokens_per_dollar"]) - tokens / dollars).abs() < 1e-6);

    // summary.csv has the columns.
    let csv = std::fs::read_to_string(latest(&results, "gpu").join("summary.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let at = header
        .iter()
        .position(|h| *h == "joules_per_token")
        .unwrap();
    assert_eq!(
        row[at].parse::<f64>().unwrap(),
        f(&summary["joules_per_token"])
    );
}

#[test]
fn a_host_without_the_tool_is_a_note_and_the_point_completes() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let task = mock_task(
        dir.path(),
        "notool",
        5,
        "  dataset: {kind: random, input_len: 16, output_len: 8}\n  concurrency: 1\n  num_prompts: 2\n",
    );
    let out = run_command(&task, &results, state.path())
        .args(["--telemetry-command", "exec nvidia-smi-not-installed-here"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let point = point_dir(&results, "notool");
    let summary = json(&point.join("summary.json"));
    assert_eq!(summary["completed"], 2);
    assert!(summary.get("gpu_energy_j").is_none(), "{summary:#}");
    let notes = summary["telemetry"]["notes"].to_string();
    assert!(
        notes.contains("host local: the telemetry command ended early (exit code 127)")
            && notes.contains("no GPU samples"),
        "{notes}"
    );
}

#[test]
fn ctrl_c_and_sigkill_leave_no_sampler_and_ps_clean_see_a_leftover() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    // A long point: 200 requests of 100 tokens at 20 ms, one at a time.
    let task = mock_task(
        dir.path(),
        "killed",
        20,
        "  dataset: {kind: random, input_len: 16, output_len: 100}\n  concurrency: 1\n  num_prompts: 200\n",
    );
    // `deaf`: the stand-in ignores SIGPIPE, as a tool may: it outlives the closing of its
    // output (orchestrate gone), so only the sampler's guards end it.
    let start = |mark: &str, state: &Path, deaf: bool| {
        let trap = if deaf { "trap '' PIPE; " } else { "" };
        Command::new(bin())
            .args(["run", "--no-report", "--results"])
            .arg(&results)
            .arg(&task)
            .args([
                "--telemetry-command",
                &format!("{trap}{}", stand_in("0.2", 1, mark)),
            ])
            .env("ORCHESTRATE_STATE_DIR", state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let sampling = |mark: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while with_marker(mark).is_empty() {
            assert!(Instant::now() < deadline, "the sampler never started");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let sigkill = |child: &mut std::process::Child| {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
    };

    // Ctrl-C: the run stops and stops its sampler.
    let state = tempfile::tempdir().unwrap();
    let mark = marker("sigint");
    let mut child = start(&mark, state.path(), false);
    sampling(&mark);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert!(!child.wait().unwrap().success());
    assert!(
        gone(&mark, Duration::from_secs(5)),
        "the sampler outlived an interrupted run"
    );

    // The watchdog ends the sampler of a SIGKILLed orchestrate.
    let state = tempfile::tempdir().unwrap();
    let mark = marker("sigkill");
    let mut child = start(&mark, state.path(), true);
    sampling(&mark);
    sigkill(&mut child);
    assert!(
        gone(&mark, Duration::from_secs(8)),
        "the sampler outlived a SIGKILLed orchestrate"
    );

    // With its watchdog killed too, `ps` lists the sampler and `clean` ends it.
    let state = tempfile::tempdir().unwrap();
    let mark = marker("leftover");
    let mut child = start(&mark, state.path(), true);
    sampling(&mark);
    let records: Vec<Value> = std::fs::read_dir(state.path().join("instances"))
        .unwrap()
        .map(|e| json(&e.unwrap().path()))
        .filter(|r| r["role"] == "telemetry")
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let run = records[0]["run"].as_str().unwrap().to_string();
    let watchdog = records[0]["watchdog"].as_i64().unwrap() as i32;
    // SAFETY: a process this test's run started.
    unsafe { libc::kill(watchdog, libc::SIGKILL) };
    sigkill(&mut child);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!with_marker(&mark).is_empty(), "no leftover to find");
    let verb = |args: &[&str]| {
        let out = Command::new(bin())
            .args(args)
            .env("ORCHESTRATE_STATE_DIR", state.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let listed = verb(&["ps", "--run", &run]);
    assert!(listed.contains("telemetry"), "{listed}");
    let cleaned = verb(&["clean", "--run", &run]);
    assert!(cleaned.contains("process group"), "{cleaned}");
    assert!(
        gone(&mark, Duration::from_secs(5)),
        "clean left the sampler running"
    );
}

#[test]
fn report_compare_and_check_read_the_gpu_figures() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let task = mock_task(
        dir.path(),
        "gpucheck",
        5,
        "  dataset: {kind: random, input_len: 16, output_len: 20}\n  concurrency: 2\n  num_prompts: 4\n",
    );
    let mut runs = Vec::new();
    for _ in 0..2 {
        let out = run_command(&task, &results, state.path())
            .args(["--telemetry-command", &stand_in("0.2", 1, &marker("check"))])
            .args(["--telemetry-interval", "200ms", "--price-per-gpu-hour", "2"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        runs.push(String::from_utf8(out.stdout).unwrap().trim().to_string());
        // Run ids are to the second.
        std::thread::sleep(Duration::from_millis(1100));
    }
    let verb = |args: &[&str]| {
        let out = Command::new(bin())
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, checked) = verb(&[
        "check",
        &runs[1],
        "--baseline",
        &runs[0],
        "--threshold",
        "joules_per_token=+1000%",
        "--threshold",
        "output_tokens_per_dollar=-90%",
    ]);
    assert_eq!(code, Some(0), "{checked}");
    for metric in ["| joules_per_token |", "| output_tokens_per_dollar |"] {
        let row = checked.lines().find(|l| l.contains(metric)).unwrap_or("");
        assert!(row.ends_with("| ok |"), "{metric}: {checked}");
    }
    let out = dir.path().join("compare");
    let (code, _) = verb(&[
        "compare",
        &runs[0],
        &runs[1],
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    let compared = std::fs::read_to_string(out.join("compare.md")).unwrap();
    assert!(
        compared.contains("GPU energy per output token (J)")
            && compared.contains("Output tokens per dollar"),
        "{compared}"
    );
    let (code, _) = verb(&["report", &runs[1]]);
    assert_eq!(code, Some(0));
    let report = std::fs::read_to_string(Path::new(&runs[1]).join("report.md")).unwrap();
    assert!(
        report.contains("GPU Energy (J/output token)")
            && report.contains("Cost ($/1M output tokens)"),
        "{report}"
    );
    // The power-over-time chart of the point.
    assert!(report.contains("GPU power over time"), "{report}");
    let plots: Vec<String> = std::fs::read_dir(Path::new(&runs[1]).join("plots"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|f| f.starts_with("gpu-power_"))
        .collect();
    assert_eq!(plots.len(), 1, "{plots:?}");
}
