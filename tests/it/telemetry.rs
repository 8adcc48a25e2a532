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

/// [`stand_in`] whose lines are stamped `lag_s` seconds in the past, as if they reached
/// orchestrate that late.
pub(crate) fn lagged_stand_in(interval: &str, gpus: u32, marker: &str, lag_s: &str) -> String {
    format!("STAMP_LAG_S={lag_s} {}", stand_in(interval, gpus, marker))
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

/// Wait (a minute at most) until a process has `marker` on its command line.
pub(crate) fn sampling(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while with_marker(marker).is_empty() {
        assert!(Instant::now() < deadline, "the sampler never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`stand_in`] that ignores SIGPIPE, as a tool may: it outlives the closing of its output
/// (orchestrate gone), so only the sampler's guards (watchdog, `clean`) end it.
pub(crate) fn deaf_stand_in(interval: &str, gpus: u32, marker: &str) -> String {
    format!("trap '' PIPE; {}", stand_in(interval, gpus, marker))
}

fn marker(name: &str) -> String {
    format!("telemetry-{name}-{}", std::process::id())
}

/// The stand-in of a framed tool (`dcgm`, `amd-smi`, `rocm-smi`): the recorded document
/// `fixture` (under tests/fixtures/telemetry/) replayed as one sample every `interval`
/// seconds, `marker` on its command line.
fn framed_stand_in(tool: &str, fixture: &str, interval: &str, marker: &str) -> String {
    let dir = repo().join("tests/fixtures/telemetry");
    format!(
        "sh {} {tool} {} {interval} {marker}",
        dir.join("replay-frames.sh").display(),
        dir.join(fixture).display()
    )
}

/// `orchestrate ARGS` (with `state` as its state directory): its exit code and stdout.
fn verb(args: &[&str], state: Option<&Path>) -> (Option<i32>, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("NO_COLOR", "1");
    if let Some(state) = state {
        cmd.env("ORCHESTRATE_STATE_DIR", state);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

/// A mock-server task run with GPU telemetry: its directory, state and results, and the
/// task file (`mock_task`'s, with `extra` top-level YAML after it).
struct GpuRun {
    dir: tempfile::TempDir,
    state: tempfile::TempDir,
    results: PathBuf,
    task: PathBuf,
    name: String,
}

impl GpuRun {
    /// `name`'s task: the mock at `itl_ms` per token, `output_len` tokens per request,
    /// `prompts` requests `concurrency` at a time.
    fn new(name: &str, itl_ms: u32, output_len: u32, concurrency: u32, prompts: u32) -> Self {
        Self::with(name, itl_ms, output_len, concurrency, prompts, "")
    }

    /// [`Self::new`] with `extra` top-level YAML (`telemetry:`) in the task file.
    fn with(
        name: &str,
        itl_ms: u32,
        output_len: u32,
        concurrency: u32,
        prompts: u32,
        extra: &str,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bench = format!(
            "  dataset: {{kind: random, input_len: 16, output_len: {output_len}}}\n  concurrency: {concurrency}\n  num_prompts: {prompts}\n"
        );
        let task = mock_task(dir.path(), name, itl_ms, &bench);
        if !extra.is_empty() {
            let mut text = std::fs::read_to_string(&task).unwrap();
            text.push_str(extra);
            std::fs::write(&task, text).unwrap();
        }
        Self::at(dir, task, name)
    }

    /// The task file `task` (named `name`) in `dir`.
    fn at(dir: tempfile::TempDir, task: PathBuf, name: &str) -> Self {
        Self {
            results: dir.path().join("results"),
            state: tempfile::tempdir().unwrap(),
            task,
            dir,
            name: name.to_string(),
        }
    }

    /// `orchestrate run` of the task with `flags`, its own state directory.
    fn command(&self, flags: &[&str]) -> Command {
        let mut cmd = run_command(&self.task, &self.results, self.state.path());
        cmd.args(flags);
        cmd
    }

    /// The run with `flags`, which must succeed; its stdout (the run directory).
    fn run_ok(&self, flags: &[&str]) -> String {
        let out = self.command(flags).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The single point directory of the latest run.
    fn point(&self) -> PathBuf {
        let dir = latest(&self.results, &self.name).join("points");
        let mut points: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(points.len(), 1, "{points:?}");
        points.remove(0)
    }

    /// The latest point's summary.json.
    fn summary(&self) -> Value {
        json(&self.point().join("summary.json"))
    }
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
    let gpu = GpuRun::new("gpu", 20, 40, 2, 6);
    let mark = marker("local");
    gpu.run_ok(&[
        "--telemetry-command",
        &stand_in("0.2", 2, &mark),
        "--telemetry-interval",
        "200ms",
        "--price-per-gpu-hour",
        "3.6",
    ]);
    assert!(
        gone(&mark, Duration::from_secs(5)),
        "the sampler outlived the run"
    );
    let point = gpu.point();
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
    let csv = std::fs::read_to_string(latest(&gpu.results, "gpu").join("summary.csv")).unwrap();
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
    let notool = GpuRun::new("notool", 5, 8, 1, 2);
    notool.run_ok(&["--telemetry-command", "exec nvidia-smi-not-installed-here"]);
    let summary = notool.summary();
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
    // A long point: 200 requests of 100 tokens at 20 ms, one at a time.
    let killed = GpuRun::new("killed", 20, 100, 1, 200);
    // `deaf`: the stand-in ignores SIGPIPE (`deaf_stand_in`).
    let start = |mark: &str, state: &Path, deaf: bool| {
        let sampler = if deaf {
            deaf_stand_in("0.2", 1, mark)
        } else {
            stand_in("0.2", 1, mark)
        };
        killed
            .command(&["--telemetry-command", &sampler])
            .env("ORCHESTRATE_STATE_DIR", state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
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
    let (_, listed) = verb(&["ps", "--run", &run], Some(state.path()));
    assert!(listed.contains("telemetry"), "{listed}");
    let (_, cleaned) = verb(&["clean", "--run", &run], Some(state.path()));
    assert!(cleaned.contains("process group"), "{cleaned}");
    assert!(
        gone(&mark, Duration::from_secs(5)),
        "clean left the sampler running"
    );
}

#[test]
fn report_compare_and_check_read_the_gpu_figures() {
    let gpucheck = GpuRun::new("gpucheck", 5, 20, 2, 4);
    let mut runs = Vec::new();
    for _ in 0..2 {
        runs.push(gpucheck.run_ok(&[
            "--telemetry-command",
            &stand_in("0.2", 1, &marker("check")),
            "--telemetry-interval",
            "200ms",
            "--price-per-gpu-hour",
            "2",
        ]));
        // Run ids are to the second.
        std::thread::sleep(Duration::from_millis(1100));
    }
    let verb = |args: &[&str]| verb(args, None);
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
    let out = gpucheck.dir.path().join("compare");
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

/// The DCGM exporter's page (`--telemetry-tool dcgm`, its stand-in replaying the page
/// written from the exporter's docs): the energy is the counter's difference, not the
/// integrated power. The replayed counter does not move, so the window's energy is exactly
/// 0 J although the page says 691 W.
#[test]
fn the_dcgm_exporters_energy_counter_gives_the_energy() {
    let dcgm = GpuRun::new("dcgm", 10, 20, 2, 4);
    let mark = marker("dcgm");
    let sampler = framed_stand_in("dcgm", "dcgm-h200-written.txt", "0.2", &mark);
    dcgm.run_ok(&[
        "--telemetry-tool",
        "dcgm",
        "--telemetry-command",
        &sampler,
        "--telemetry-interval",
        "200ms",
    ]);
    assert!(gone(&mark, Duration::from_secs(5)));
    let point = dcgm.point();
    let samples = lines(&point.join("gpu_samples.jsonl"));
    assert!(samples.len() >= 2, "{samples:?}");
    assert_eq!(samples[0]["power_w"], 691.12);
    assert_eq!(samples[0]["energy_j"], 4203318.842);
    assert_eq!(
        samples[0]["uuid"],
        "GPU-fafb1c12-674e-2915-c04b-32bd59675461"
    );
    assert_eq!(samples[0]["role"], "server");
    let summary = dcgm.summary();
    let tele = &summary["telemetry"];
    assert_eq!(tele["tool"], "the telemetry command", "{tele:#}");
    assert_eq!(tele["energy_source"], "counter", "{tele:#}");
    assert_eq!(tele["per_gpu"][0]["energy_source"], "counter");
    assert_eq!(f(&summary["gpu_energy_j"]), 0.0);
    assert_eq!(f(&summary["gpu_peak_power_w"]), 691.12);
    assert_eq!(tele["notes"], serde_json::json!([]), "{tele:#}");
}

/// `telemetry:` in the task file turns telemetry on with its tool and interval (amd-smi
/// here, its stand-in replaying the document written from amd-smi's source), with no flag;
/// `--no-telemetry` turns it off; `plan` says what will sample.
#[test]
fn the_task_files_telemetry_key_chooses_the_tool_and_no_telemetry_wins() {
    let mark = marker("amd");
    let sampler = framed_stand_in("amd-smi", "amd-smi-mi300x-written-v26.json", "0.2", &mark);
    let extra =
        format!("telemetry:\n  tool: amd-smi\n  interval: 200ms\n  command: \"{sampler}\"\n");
    let amd = GpuRun::with("amd", 10, 20, 2, 4, &extra);
    let (code, planned) = verb(&["plan", amd.task.to_str().unwrap()], None);
    assert_eq!(code, Some(0), "{planned}");
    assert!(
        planned.contains("GPU telemetry: `sh ")
            && planned.contains("(in place of amd-smi) every 200ms"),
        "{planned}"
    );
    amd.run_ok(&[]);
    assert!(gone(&mark, Duration::from_secs(5)));
    let summary = amd.summary();
    let tele = &summary["telemetry"];
    assert_eq!(tele["interval_ms"], 200, "{tele:#}");
    assert_eq!(tele["energy_source"], "counter", "{tele:#}");
    assert_eq!(tele["per_gpu"][0]["index"], 0);
    assert_eq!(f(&summary["gpu_peak_power_w"]), 742.0);
    assert_eq!(f(&summary["gpu_mean_util_pct"]), 100.0);
    let samples = lines(&amd.point().join("gpu_samples.jsonl"));
    assert_eq!(samples[0]["energy_j"], 1843211.472);
    assert_eq!(samples[0]["throttle"], serde_json::json!([]));

    // Run ids are to the second.
    std::thread::sleep(Duration::from_millis(1100));
    amd.run_ok(&["--no-telemetry"]);
    let summary = amd.summary();
    assert!(summary.get("telemetry").is_none(), "{summary:#}");
    assert!(!amd.point().join("gpu_samples.jsonl").exists());
}

/// A host without the tool is found before the first point (the probe of each host): a
/// warning then, and a note in its points, which run; nothing is sampled there.
#[test]
fn a_host_without_the_tool_is_told_before_the_first_point() {
    let have = Command::new("sh")
        .args(["-c", "command -v amd-smi || command -v rocm-smi"])
        .output()
        .unwrap();
    if have.status.success() {
        eprintln!("skipped: this machine has amd-smi or rocm-smi");
        return;
    }
    let none = GpuRun::new("noamd", 5, 8, 1, 2);
    let out = none
        .command(&["--telemetry-tool", "amd-smi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("host local: neither amd-smi nor rocm-smi is on this host"),
        "{stderr}"
    );
    let summary = none.summary();
    assert_eq!(summary["completed"], 2);
    assert!(summary.get("gpu_energy_j").is_none(), "{summary:#}");
    let notes = summary["telemetry"]["notes"].to_string();
    assert!(
        notes.contains(
            "host local: neither amd-smi nor rocm-smi is on this host (found before the first point); not sampled"
        ),
        "{notes}"
    );
    assert!(!none.point().join("telemetry/local.log").exists());
}

/// `telemetry.dcgm_url` without `tool: dcgm` is refused at its line and column.
#[test]
fn a_dcgm_url_without_the_dcgm_tool_is_refused_where_it_is_written() {
    let bad = GpuRun::with(
        "badurl",
        5,
        8,
        1,
        2,
        "telemetry:\n  dcgm_url: http://localhost:9400/metrics\n",
    );
    let out = Command::new(bin())
        .args(["plan", bad.task.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let lines = std::fs::read_to_string(&bad.task).unwrap().lines().count();
    assert!(
        stderr.contains(&format!("badurl.yaml:{lines}:13"))
            && stderr.contains("`telemetry.dcgm_url` is set but `telemetry.tool` is not `dcgm`"),
        "{stderr}"
    );
}

/// An external command's point is sampled too: over the command's whole run, with the
/// output tokens the tool reported. The sampler's lines are stamped a quarter second late,
/// more than its interval: the first line after the command's end is still stamped before
/// it, and the samples bracket the end only because orchestrate waits for a later stamp.
#[test]
fn an_external_commands_point_is_sampled_over_the_commands_run() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("extgpu.yaml");
    std::fs::write(
        &task,
        r#"name: extgpu
backend: vllm
model: mock-model
port: auto
commands:
  - "{{ orchestrate }} mock-server --port {{ port }} --preset fixed --itl-ms 5"
readiness: {http: /health, timeout: 30s}
benchmark:
  external:
    command: >-
      sleep 1;
      echo "Throughput: 2.00 requests/s, 300.00 total tokens/s, 200.00 output tokens/s"
    preset: vllm-throughput
"#,
    )
    .unwrap();
    let ext = GpuRun::at(dir, task, "extgpu");
    let mark = marker("external");
    ext.run_ok(&[
        "--telemetry-command",
        &lagged_stand_in("0.2", 1, &mark, "0.25"),
        "--telemetry-interval",
        "200ms",
    ]);
    assert!(gone(&mark, Duration::from_secs(5)));
    let point = ext.point();
    let summary = json(&point.join("summary.json"));
    let tele = &summary["telemetry"];
    assert_eq!(tele["notes"], serde_json::json!([]), "{summary:#}");
    assert_eq!(tele["window_start_s"], 0.0);
    let elapsed = f(&summary["external"]["elapsed_s"]);
    assert_eq!(f(&tele["window_end_s"]), elapsed);
    assert!(elapsed >= 1.0, "{elapsed}");
    // The recording's power stays within 79..118 W.
    let mean = f(&summary["gpu_energy_j"]) / elapsed;
    assert!((79.0..118.0).contains(&mean), "{summary:#}");
    assert_eq!(summary["output_throughput"], 200.0);
    assert!(lines(&point.join("gpu_samples.jsonl")).len() >= 5);
}
