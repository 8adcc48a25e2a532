//! Fault injection as a test: a seeded loop of short `orchestrate run`s of the built-in mock
//! server, each hit by one fault at a random moment: SIGINT, SIGTERM or SIGKILL to
//! orchestrate, or the server killed (SIGKILL) or stopped (SIGSTOP) mid-point; with Docker,
//! some iterations run the server in a container of the test image and kill or pause the
//! container instead. After each fault: no process or container of the run is left (after
//! `orchestrate clean --run ID` for SIGKILL), `orchestrate report` reads the archive, every
//! JSON file and every JSONL line of it parses, every completed point has its summary, and
//! `orchestrate run --resume` completes every point. Prints the seed and a tally.
//!
//! `ORCHESTRATE_FAULT_SEED=N` replays a loop's draws (the seed is printed first);
//! `ORCHESTRATE_FAULT_ITERATIONS=N` changes its length (default 30). Docker iterations need
//! the engine: with `CI=true` a missing engine fails the test, elsewhere they are left out
//! (and the tally says so). The same kind of loop hits a prefill/decode topology behind a
//! real router (`topology_faults`) and a Slurm sweep (`slurm_faults`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::common::{bin, repo};

const TASK: &str = "faults";
/// Points of the task: output lengths at 5 ms a token, two rounds of two requests each.
const POINTS: [u32; 3] = [10, 30, 60];

/// Where the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Local,
    Docker,
}

/// The fault an iteration injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Sigint,
    Sigterm,
    Sigkill,
    /// SIGKILL to the server (`docker kill` for a container).
    KillServer,
    /// SIGSTOP to the server (`docker pause` for a container).
    StopServer,
}

/// When the fault lands.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// This long after orchestrate was started (any phase: startup, readiness, a point,
    /// teardown, or after the end).
    AfterStart(Duration),
    /// This long after point `k` (0-based) was marked running.
    InPoint(usize, Duration),
}

/// One iteration's plan, drawn from the seeded generator.
#[derive(Debug, Clone, Copy)]
struct Injection {
    place: Place,
    fault: Fault,
    moment: Moment,
}

impl Injection {
    fn draw(rng: &mut StdRng, docker: bool) -> Self {
        let place = if docker && rng.random_ratio(1, 5) {
            Place::Docker
        } else {
            Place::Local
        };
        // A stopped server costs every point after it its request timeouts and the
        // server-metrics scrapes' timeouts (5 s each, before and after the point): it is
        // drawn less often, and only in the last point, to keep the loop within minutes.
        let fault = match rng.random_range(0..11) {
            0 | 1 => Fault::Sigint,
            2 | 3 => Fault::Sigterm,
            4..=6 => Fault::Sigkill,
            7..=9 => Fault::KillServer,
            _ => Fault::StopServer,
        };
        let last = POINTS.len() - 1;
        let moment = if fault == Fault::StopServer {
            Moment::InPoint(last, Duration::from_millis(rng.random_range(0..200)))
        } else if fault == Fault::KillServer || rng.random_bool(0.5) {
            Moment::InPoint(
                rng.random_range(0..=last),
                Duration::from_millis(rng.random_range(0..200)),
            )
        } else {
            Moment::AfterStart(Duration::from_millis(rng.random_range(0..2000)))
        };
        Injection {
            place,
            fault,
            moment,
        }
    }
}

/// The task file: the mock server (locally, or in the test image), three short points, a
/// short request timeout so a stopped server costs seconds, not forever.
fn task_text(place: Place, task: &str) -> String {
    let tokenizer = repo().join("data/tokenizer/tokenizer.json");
    let (image, command) = match place {
        Place::Local => (
            String::new(),
            "{{ orchestrate }} mock-server --port {{ port }} --preset fixed --itl-ms 5",
        ),
        Place::Docker => (
            format!("image: {}\n", crate::docker::IMAGE),
            "exec orchestrate mock-server --host 0.0.0.0 --port {{ port }} --preset fixed --itl-ms 5",
        ),
    };
    let lens: Vec<String> = POINTS.iter().map(u32::to_string).collect();
    format!(
        "name: {task}
backend: vllm
model: mock-model
{image}port: auto
commands:
  - \"{command}\"
readiness: {{http: /health, timeout: 30s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 10}}
  tokenizer: {tokenizer}
  ignore_eos: true
  concurrency: 2
  num_prompts: 4
  request_timeout: 1500ms
  matrix:
    output_len: [{lens}]
",
        tokenizer = tokenizer.display(),
        lens = lens.join(", ")
    )
}

/// An orchestrate process of this test; killed on every exit path.
struct Owned(Child);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One iteration's directories: the task file, the results root, the state dir.
struct Workspace {
    dir: tempfile::TempDir,
    task: String,
}

impl Workspace {
    fn new(place: Place, iteration: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // A task name no other test process uses: containers are found by it.
        let task = format!("{TASK}-{}-{iteration}", std::process::id());
        std::fs::write(dir.path().join("task.yaml"), task_text(place, &task)).unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        Workspace { dir, task }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn results(&self) -> PathBuf {
        self.dir.path().join("results")
    }

    /// `orchestrate ARGS` with this workspace's state dir, in its directory.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .env("ORCHESTRATE_STATE_DIR", self.state())
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn start(&self) -> Owned {
        let mut c = self.command(&["run", "task.yaml", "--no-report", "--results", "results"]);
        // Output goes to files: a full pipe must never stall the run.
        c.stdout(std::fs::File::create(self.dir.path().join("run.out")).unwrap())
            .stderr(std::fs::File::create(self.dir.path().join("run.err")).unwrap());
        Owned(c.spawn().unwrap())
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("run.err")).unwrap_or_default()
    }

    /// The run directory, once `latest` exists.
    fn run_dir(&self) -> Option<PathBuf> {
        let link = self.results().join(&self.task).join("latest");
        let target = std::fs::read_link(&link).ok()?;
        Some(self.results().join(&self.task).join(target))
    }

    fn manifest(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.run_dir()?.join("manifest.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Waits for the fault's moment; false when orchestrate ended first.
fn wait_for(moment: Moment, ws: &Workspace, child: &mut Owned, started: Instant) -> bool {
    let deadline = started + Duration::from_secs(60);
    let delay = match moment {
        Moment::AfterStart(after) => {
            while started.elapsed() < after {
                if child.0.try_wait().unwrap().is_some() {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            return child.0.try_wait().unwrap().is_none();
        }
        Moment::InPoint(k, delay) => loop {
            assert!(Instant::now() < deadline, "point {k} never started");
            if child.0.try_wait().unwrap().is_some() {
                return false;
            }
            let status = ws.manifest().map(|m| m["points"][k]["status"].clone());
            if status.as_ref().is_some_and(|s| s != "pending") {
                break delay;
            }
            std::thread::sleep(Duration::from_millis(20));
        },
    };
    std::thread::sleep(delay);
    child.0.try_wait().unwrap().is_none()
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pids are this test's processes.
    unsafe { libc::kill(pid, sig) };
}

/// A live process: its pid, its command line, its environment.
struct Proc {
    pid: i32,
    cmdline: String,
    environ: Vec<String>,
}

/// Live (not zombie) processes whose environment holds `ORCHESTRATE_STATE_DIR=<state>`:
/// everything a run of this workspace started, servers and watchdogs alike.
fn processes_of(state: &Path) -> Vec<Proc> {
    let needle = format!("ORCHESTRATE_STATE_DIR={}", state.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let environ: Vec<String> = environ
                .split(|&b| b == 0)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            if !environ.contains(&needle) {
                return None;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = stat.rsplit_once(") ")?.1.split_whitespace().next()?;
            if state == "Z" || state == "X" {
                return None;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some(Proc {
                pid,
                cmdline,
                environ,
            })
        })
        .collect()
}

/// The docker CLI's answer (empty when it fails).
fn docker(args: &[&str]) -> String {
    Command::new("docker")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Containers (any state) labelled with this workspace's task.
fn containers_of(task: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=orchestrate.task={task}"),
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

/// Hit the server: the mock-server processes of the run, or its container.
fn hit_server(place: Place, fault: Fault, ws: &Workspace) -> bool {
    match place {
        Place::Local => {
            let servers: Vec<i32> = processes_of(&ws.state())
                .into_iter()
                .filter(|p| {
                    p.cmdline.contains("mock-server")
                        && p.environ
                            .iter()
                            .any(|v| v.starts_with("ORCHESTRATE_INSTANCE="))
                })
                .map(|p| p.pid)
                .collect();
            let sig = if fault == Fault::KillServer {
                libc::SIGKILL
            } else {
                libc::SIGSTOP
            };
            for &pid in &servers {
                signal(pid, sig);
            }
            !servers.is_empty()
        }
        Place::Docker => {
            let verb = if fault == Fault::KillServer {
                "kill"
            } else {
                "pause"
            };
            let ids = containers_of(&ws.task);
            for id in &ids {
                docker(&[verb, id]);
            }
            !ids.is_empty()
        }
    }
}

/// Waits for orchestrate to end, at most `within`.
fn wait_end(child: &mut Owned, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// What is left of the run after `within`: processes and containers. Whatever is found is
/// then killed, so one failed iteration does not leak into the machine.
fn leftovers(ws: &Workspace, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let procs = processes_of(&ws.state());
        let containers = containers_of(&ws.task);
        if procs.is_empty() && containers.is_empty() {
            return Vec::new();
        }
        if Instant::now() >= deadline {
            let mut left: Vec<String> = procs
                .iter()
                .map(|p| format!("pid {} `{}`", p.pid, p.cmdline.trim()))
                .collect();
            for p in &procs {
                signal(p.pid, libc::SIGKILL);
            }
            for id in containers {
                docker(&["rm", "-f", &id]);
                left.push(format!("container {id}"));
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every JSON file and every JSONL line under `dir` parses, and every completed point of
/// the manifest has its summary; the problems found.
fn archive_problems(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let name = path.display().to_string();
            if name.ends_with(".json") {
                let text = std::fs::read_to_string(&path).unwrap();
                if let Err(e) = serde_json::from_str::<Value>(&text) {
                    problems.push(format!("{name}: {e}"));
                }
            } else if name.ends_with(".jsonl") {
                let text = std::fs::read_to_string(&path).unwrap();
                if !text.is_empty() && !text.ends_with('\n') {
                    problems.push(format!("{name}: the last line is not ended"));
                }
                for (i, line) in text.lines().enumerate() {
                    if let Err(e) = serde_json::from_str::<Value>(line) {
                        problems.push(format!("{name}:{}: {e}", i + 1));
                    }
                }
            }
        }
    }
    let Ok(text) = std::fs::read_to_string(dir.join("manifest.json")) else {
        problems.push("no manifest.json".into());
        return problems;
    };
    let Ok(manifest) = serde_json::from_str::<Value>(&text) else {
        return problems;
    };
    for p in manifest["points"].as_array().into_iter().flatten() {
        if p["status"] == "completed" {
            let summary = dir.join("points").join(p["dir"].as_str().unwrap_or("?"));
            if !summary.join("summary.json").is_file() {
                problems.push(format!("completed point {} has no summary.json", p["id"]));
            }
        }
    }
    problems
}

/// The outcome of one iteration, for the tally; failures are collected, not thrown, so one
/// loop reports every problem it meets.
struct Outcome {
    label: String,
    failures: Vec<String>,
}

/// `orchestrate ARGS` in the workspace to its end (at most `within`): code and stderr.
fn finish(
    ws: &Workspace,
    args: &[&str],
    within: Duration,
) -> Result<(Option<i32>, String), String> {
    let mut child = Owned(
        ws.command(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(ws.dir.path().join("verb.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let status = wait_end(&mut child, within).ok_or_else(|| {
        format!(
            "`orchestrate {}` did not end within {within:?}",
            args.join(" ")
        )
    })?;
    let stderr = std::fs::read_to_string(ws.dir.path().join("verb.err")).unwrap_or_default();
    Ok((status.code(), stderr))
}

fn iteration(i: usize, injection: Injection) -> Outcome {
    let ws = Workspace::new(injection.place, i);
    let mut failures = Vec::new();
    let started = Instant::now();
    let mut child = ws.start();
    let pid = child.0.id() as i32;
    let landed = wait_for(injection.moment, &ws, &mut child, started)
        && match injection.fault {
            Fault::Sigint => {
                signal(pid, libc::SIGINT);
                true
            }
            Fault::Sigterm => {
                signal(pid, libc::SIGTERM);
                true
            }
            Fault::Sigkill => {
                signal(pid, libc::SIGKILL);
                true
            }
            Fault::KillServer | Fault::StopServer => {
                hit_server(injection.place, injection.fault, &ws)
            }
        };
    let bound = Duration::from_secs(if injection.fault == Fault::StopServer {
        90
    } else {
        45
    });
    let Some(status) = wait_end(&mut child, bound) else {
        failures.push(format!(
            "orchestrate did not end within {bound:?}: {}",
            ws.stderr()
        ));
        drop(child);
        failures.extend(leftovers(&ws, Duration::from_secs(8)));
        return Outcome {
            label: "hang".into(),
            failures,
        };
    };
    let code = status.code();
    let expected: &[Option<i32>] = match (landed, injection.fault) {
        (false, _) => &[Some(0)],
        (true, Fault::Sigint | Fault::Sigterm) => &[Some(130), Some(0)],
        // The signal may hit a process that had just ended.
        (true, Fault::Sigkill) => &[None, Some(0)],
        (true, _) => &[Some(0), Some(1)],
    };
    if !expected.contains(&code) {
        failures.push(format!(
            "exit {code:?} ({status}), expected one of {expected:?}: {}",
            ws.stderr()
        ));
    }
    let manifest = ws.manifest();
    let run = manifest
        .as_ref()
        .and_then(|m| m["run_id"].as_str().map(str::to_string));
    if injection.fault == Fault::Sigkill
        && let Some(run) = &run
    {
        match finish(&ws, &["clean", "--run", run], Duration::from_secs(30)) {
            Ok((Some(0), _)) => {}
            Ok((code, err)) => failures.push(format!("clean --run {run}: exit {code:?}: {err}")),
            Err(e) => failures.push(e),
        }
    }
    for left in leftovers(&ws, Duration::from_secs(8)) {
        failures.push(format!("left behind after the fault: {left}"));
    }
    let Some(dir) = ws.run_dir().filter(|d| d.join("manifest.json").is_file()) else {
        // Ended before the archive was created: nothing to read or resume.
        return Outcome {
            label: format!("exit {code:?}, no archive"),
            failures,
        };
    };
    failures.extend(
        archive_problems(&dir)
            .into_iter()
            .map(|p| format!("after the fault: {p}")),
    );
    let manifest = manifest.unwrap_or(Value::Null);
    let before = point_statuses(&manifest);
    let status_before = manifest["status"].as_str().unwrap_or("?").to_string();
    if code.is_some() && status_before == "running" {
        failures.push(format!(
            "orchestrate exited {code:?} leaving the manifest `running`"
        ));
    }
    let dir_arg = dir.display().to_string();
    match finish(&ws, &["report", &dir_arg], Duration::from_secs(60)) {
        Ok((Some(0), _)) => {}
        Ok((code, err)) => {
            failures.push(format!("report of the faulted run: exit {code:?}: {err}"));
        }
        Err(e) => failures.push(e),
    }
    let resumed = resume(&ws, &dir_arg, &mut failures);
    Outcome {
        label: format!("exit {code:?}, {status_before} [{before}] -> resumed {resumed}"),
        failures,
    }
}

/// `run --resume`, then every point completed, the archive whole and nothing left behind;
/// the manifest's status after it.
fn resume(ws: &Workspace, dir: &str, failures: &mut Vec<String>) -> String {
    match finish(
        ws,
        &["run", "--no-report", "--resume", dir],
        Duration::from_secs(90),
    ) {
        Ok((Some(0), _)) => {}
        Ok((code, err)) => failures.push(format!("run --resume: exit {code:?}: {err}")),
        Err(e) => failures.push(e),
    }
    for left in leftovers(ws, Duration::from_secs(8)) {
        failures.push(format!("left behind after the resume: {left}"));
    }
    let dir = Path::new(dir);
    failures.extend(
        archive_problems(dir)
            .into_iter()
            .map(|p| format!("after the resume: {p}")),
    );
    let manifest = ws.manifest().unwrap_or(Value::Null);
    let statuses = point_statuses(&manifest);
    if manifest["status"] != "completed" || statuses.chars().any(|c| c != 'c') {
        failures.push(format!(
            "after the resume the run is {} with points [{statuses}] (c = completed)",
            manifest["status"]
        ));
    }
    manifest["status"].as_str().unwrap_or("?").to_string()
}

/// One letter per point: c(ompleted), f(ailed), s(kipped), r(unning), p(ending),
/// i(nterrupted).
fn point_statuses(manifest: &Value) -> String {
    manifest["points"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            p["status"]
                .as_str()
                .and_then(|s| s.chars().next())
                .unwrap_or('?')
        })
        .collect()
}

/// Whether Docker iterations run: the engine answers (and the test image is built). With
/// `CI=true` a missing engine fails (inside `crate::docker::provider`).
fn docker_available() -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let shutdown = orchestrate::shutdown::Shutdown::new();
    runtime
        .block_on(crate::docker::provider(&shutdown))
        .is_some()
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

#[test]
fn seeded_faults_leave_nothing_behind_and_resume_completes_every_point() {
    let seed = env_number("ORCHESTRATE_FAULT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    });
    let iterations = env_number("ORCHESTRATE_FAULT_ITERATIONS").unwrap_or(30) as usize;
    eprintln!("fault injection: ORCHESTRATE_FAULT_SEED={seed}, {iterations} iterations");
    let docker = docker_available();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed = Vec::new();
    let started = Instant::now();
    for i in 0..iterations {
        let injection = Injection::draw(&mut rng, docker);
        let t = Instant::now();
        let outcome = iteration(i, injection);
        eprintln!(
            "#{i:02} {:?} {:?} at {:?}: {} ({:.1}s){}",
            injection.place,
            injection.fault,
            injection.moment,
            outcome.label,
            t.elapsed().as_secs_f64(),
            if outcome.failures.is_empty() {
                ""
            } else {
                " FAILED"
            }
        );
        *faults
            .entry(format!("{:?} {:?}", injection.place, injection.fault))
            .or_default() += 1;
        *outcomes
            .entry(
                if outcome.failures.is_empty() {
                    "ok"
                } else {
                    "failed"
                }
                .into(),
            )
            .or_default() += 1;
        for f in outcome.failures {
            failed.push(format!("#{i} ({injection:?}): {f}"));
        }
    }
    eprintln!(
        "tally after {:.0}s (seed {seed}){}:",
        started.elapsed().as_secs_f64(),
        if docker {
            ""
        } else {
            ", local processes only: no docker engine"
        }
    );
    for (fault, n) in &faults {
        eprintln!("  {fault}: {n}");
    }
    for (outcome, n) in &outcomes {
        eprintln!("  {outcome}: {n}");
    }
    assert!(
        failed.is_empty(),
        "{} problem(s) with ORCHESTRATE_FAULT_SEED={seed}:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
