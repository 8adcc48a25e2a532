//! The Slurm provider against a real Slurm (issue #17): `scripts/slurm-cluster.sh` starts
//! munged, slurmctld and two slurmd (nodes n1 and n2, two fake GPUs each) once per test
//! binary, in a temp dir of its own on free ports; every test drives the built `orchestrate`
//! with `SLURM_CONF` pointing at it. In CI (`CI=true`) a missing Slurm fails the tests;
//! elsewhere they skip with the reason. The tests take turns (one lock): the cluster has two
//! nodes with room for two jobs each, and each test checks the queue for its own job only.
//! The `slurm_login_host_*` tests drive the same cluster through a login host: a real sshd on
//! loopback (`tests/it/ssh/sshd.rs`; in CI a missing sshd fails them too), orchestrate
//! itself without `SLURM_CONF` so only commands run over SSH can reach the cluster.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::common::{bin, in_ci, json, latest, repo, run_command};
use crate::ssh::sshd::{Keys, Sshd, whoami};

/// The test cluster: its directory (slurm.conf inside), kept for the whole test binary.
pub(crate) struct Cluster {
    dir: PathBuf,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static TURN: Mutex<()> = Mutex::new(());
static STARTED_DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn stop_cluster() {
    if let Some(dir) = STARTED_DIR.get() {
        let _ = Command::new(repo().join("scripts/slurm-cluster.sh"))
            .arg("stop")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Four consecutive free TCP ports (slurmctld, slurmd default, n1, n2), from a range below
/// the ephemeral one and outside `port: auto`'s.
fn free_base() -> u16 {
    let seed = std::process::id() as u16;
    for i in 0..400u16 {
        let base = 12000 + (seed.wrapping_add(i * 37) % 7000);
        if (0..4).all(|k| std::net::TcpListener::bind(("0.0.0.0", base + k)).is_ok()) {
            return base;
        }
    }
    panic!("no four consecutive free ports in 12000-19000");
}

fn start() -> Result<Cluster, String> {
    let missing: Vec<&str> = [
        "salloc",
        "srun",
        "squeue",
        "scancel",
        "slurmctld",
        "slurmd",
        "munged",
    ]
    .into_iter()
    .filter(|tool| {
        !Command::new("sh")
            .args([
                "-c",
                &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
            ])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
    .collect();
    if !missing.is_empty() {
        return Err(format!(
            "Slurm is not installed (missing {}): apt-get install slurm-wlm munge",
            missing.join(", ")
        ));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("the test cluster's slurmd must run as root".into());
    }
    let dir = tempfile::Builder::new()
        .prefix("orchestrate-slurm-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    let base = free_base();
    let out = Command::new(repo().join("scripts/slurm-cluster.sh"))
        .arg("start")
        .arg(&dir)
        .env("SLURM_TEST_PORT", base.to_string())
        .output()
        .map_err(|e| e.to_string())?;
    let _ = STARTED_DIR.set(dir.clone());
    // SAFETY: registering a plain extern "C" function to run at exit.
    unsafe { libc::atexit(stop_cluster) };
    if !out.status.success() {
        return Err(format!(
            "scripts/slurm-cluster.sh start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(Cluster { dir })
}

/// The cluster and this test's turn, or `None` (skip) outside CI when Slurm is missing.
pub(crate) fn cluster() -> Option<(&'static Cluster, MutexGuard<'static, ()>)> {
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    match CLUSTER.get_or_init(start) {
        Ok(c) => Some((c, turn)),
        Err(why) if in_ci() => panic!("CI=true but the Slurm test cluster is unavailable: {why}"),
        Err(why) => {
            eprintln!("skipping: {why}");
            None
        }
    }
}

impl Cluster {
    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// A Slurm command against the test cluster; its stdout.
    pub(crate) fn slurm(&self, args: &[&str]) -> String {
        let out = Command::new(args[0])
            .args(&args[1..])
            .env("SLURM_CONF", self.conf())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `squeue` lists `job` (any state).
    fn queued(&self, job: &str) -> bool {
        self.slurm(&["squeue", "-h", "-o", "%i"])
            .lines()
            .any(|l| l.trim() == job)
    }

    /// Wait (up to 20 s) until `job` has left the queue.
    pub(crate) fn wait_gone(&self, job: &str) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if !self.queued(job) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// `orchestrate VERB ...` with the test cluster and `state`.
    fn orchestrate(&self, state: &Path, args: &[&str]) -> std::process::Output {
        Command::new(bin())
            .args(args)
            .env("SLURM_CONF", self.conf())
            .env("ORCHESTRATE_STATE_DIR", state)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

/// A work dir with `hosts.yaml` (Slurm cluster `gpu` on `partition`) and a task `name` of two
/// mock-server replicas on it, each echoing where it runs into its log first; `itl_ms` per
/// token and `benchmark` lines under `benchmark:`.
pub(crate) fn work(
    name: &str,
    partition: &str,
    itl_ms: u32,
    benchmark: &str,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let hosts = work.path().join("hosts.yaml");
    std::fs::write(
        &hosts,
        format!(
            "hosts: {{}}\nclusters:\n  gpu:\n    slurm:\n      partition: {partition}\n      time_limit: \"10:00\"\n      gpus_per_node: 1\n"
        ),
    )
    .unwrap();
    let task = work.path().join(format!("{name}.yaml"));
    std::fs::write(
        &task,
        format!(
            "name: {name}\nbackend: vllm\nmodel: mock-model\nport: auto\nhosts: [gpu]\nreplicas: 2\ncommands:\n  - echo \"at node=$SLURMD_NODENAME nodeid=$SLURM_NODEID cuda=$CUDA_VISIBLE_DEVICES host={{{{ host }}}} master={{{{ master_addr }}}}\"\n  - exec {{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --preset fixed --itl-ms {itl_ms}\nreadiness: {{http: /health, timeout: 30s}}\nbenchmark:\n  tokenizer: {}\n  ignore_eos: true\n{benchmark}",
            repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    (work, task, hosts)
}

/// `orchestrate run` of `task` on the test cluster, output piped.
pub(crate) fn run(
    c: &Cluster,
    task: &Path,
    hosts: &Path,
    results: &Path,
    state: &Path,
) -> std::process::Child {
    run_command(task, results, state)
        .arg("--hosts")
        .arg(hosts)
        .env("SLURM_CONF", c.conf())
        .spawn()
        .unwrap()
}

/// Wait (bounded) for the child to end; its output.
pub(crate) fn finish(mut child: std::process::Child, within: Duration) -> std::process::Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > within {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "orchestrate did not end within {within:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Poll the run's manifest (up to 60 s) until `ready` says so; the manifest.
pub(crate) fn wait_manifest(
    results: &Path,
    task: &str,
    child: &mut std::process::Child,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "orchestrate ended before the state awaited"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the awaited state did not come within 60 s"
        );
        if results.join(task).join("latest").exists() {
            let path = latest(results, task).join("manifest.json");
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(m) = serde_json::from_str::<serde_json::Value>(&text)
                && ready(&m)
            {
                return m;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The job id the manifest recorded for deployment d1 on cluster `gpu`.
pub(crate) fn job_id(manifest: &serde_json::Value) -> String {
    manifest["hosts"]["slurm:gpu:d1"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no slurm job in the manifest: {manifest:#}"))
        .to_string()
}

fn deployment_ready(m: &serde_json::Value) -> bool {
    m["deployments"][0]["status"] == "ready"
}

/// The load of the tests that interrupt or kill a run: far longer than any of them waits.
const LONG_LOAD: &str = "  dataset: {kind: random, input_len: 16, output_len: 200}\n  concurrency: 2\n  num_prompts: 400\n";

/// Once run `name` is deployed, send it `sigints` Ctrl-C (one after checking its job is
/// queued and letting a point start; two in a row for the forced exit); it must exit 130.
/// The job id.
fn interrupt(
    c: &Cluster,
    mut child: std::process::Child,
    results: &Path,
    name: &str,
    sigints: u32,
) -> String {
    let manifest = wait_manifest(results, name, &mut child, deployment_ready);
    let job = job_id(&manifest);
    if sigints == 1 {
        assert!(c.queued(&job));
        std::thread::sleep(Duration::from_millis(500));
    }
    for _ in 0..sigints {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        std::thread::sleep(Duration::from_millis(30));
    }
    let out = finish(child, Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    job
}

#[test]
fn slurm_two_replicas_run_under_srun_on_both_nodes() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work(
        "slurm-e2e",
        "gpu",
        1,
        "  dataset: {kind: random, input_len: 16, output_len: 8}\n  num_prompts: 4\n  matrix:\n    concurrency: [1, 2]\n",
    );
    let results = work.path().join("results");
    let state = work.path().join("state");

    // `plan` shows the salloc and srun lines on node tokens.
    let plan = c.orchestrate(
        &state,
        &[
            "plan",
            task.to_str().unwrap(),
            "--hosts",
            hosts.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    assert!(
        text.contains("salloc --no-shell --nodes=2 --partition=gpu --time=10:00 --job-name=orchestrate-slurm-e2e"),
        "{text}"
    );
    assert!(
        text.contains("srun '--jobid=<job>' '--nodelist=<gpu:node1>' --nodes=1 --ntasks=1 --overlap --gpus-per-node=1"),
        "{text}"
    );

    let started = Instant::now();
    let out = finish(
        run(c, &task, &hosts, &results, &state),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    eprintln!("two-replica Slurm run: {:?}", started.elapsed());

    let dir = latest(&results, "slurm-e2e");
    let manifest = json(&dir.join("manifest.json"));
    let job = job_id(&manifest);
    let points = manifest["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert!(
        points.iter().all(|p| p["status"] == "completed"),
        "{manifest:#}"
    );
    let nodes = &manifest["hosts"]["slurm:gpu:d1"]["nodes"];
    assert_eq!(nodes[0]["name"], "n1", "{manifest:#}");
    assert_eq!(nodes[1]["name"], "n2", "{manifest:#}");
    // Each replica ran as a step of the job on its own node, and its templates saw the node.
    for (replica, node) in [(0, "n1"), (1, "n2")] {
        let log =
            std::fs::read_to_string(dir.join(format!("logs/server-r{replica}-n0.log"))).unwrap();
        assert!(
            log.contains(&format!(
                "at node={node} nodeid=0 cuda=0 host={node} master=127.0.0.1"
            )),
            "{log}"
        );
        assert!(
            log.contains(&format!("srun --jobid={job} --nodelist={node}")),
            "{log}"
        );
        let facts = &manifest["deployments"][0]["instances"][format!("server-{replica}")];
        assert_eq!(facts["slurm"]["node"], node, "{facts:#}");
        assert_eq!(facts["slurm"]["job_id"], job.as_str(), "{facts:#}");
    }
    assert!(c.wait_gone(&job), "job {job} still queued after the run");
}

#[test]
fn slurm_sigint_mid_point_leaves_no_job() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work("slurm-int", "gpu", 20, LONG_LOAD);
    let results = work.path().join("results");
    let state = work.path().join("state");
    let child = run(c, &task, &hosts, &results, &state);
    let job = interrupt(c, child, &results, "slurm-int", 1);
    // Teardown waited for the job to leave the queue.
    assert!(!c.queued(&job), "job {job} still queued after Ctrl-C");
}

#[test]
fn slurm_second_sigint_cancels_the_job_before_exiting() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work("slurm-int2", "gpu", 20, LONG_LOAD);
    let results = work.path().join("results");
    let state = work.path().join("state");
    let child = run(c, &task, &hosts, &results, &state);
    // Two Ctrl-C in a row: the forced exit runs the emergency scancel.
    let job = interrupt(c, child, &results, "slurm-int2", 2);
    assert!(c.wait_gone(&job), "job {job} still queued after two Ctrl-C");
}

#[test]
fn slurm_clean_cancels_the_job_of_a_killed_orchestrate() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work("slurm-kill", "gpu", 20, LONG_LOAD);
    let results = work.path().join("results");
    let state = work.path().join("state");
    let mut child = run(c, &task, &hosts, &results, &state);
    let manifest = wait_manifest(&results, "slurm-kill", &mut child, deployment_ready);
    let job = job_id(&manifest);
    let run_id = manifest["run_id"].as_str().unwrap().to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        c.queued(&job),
        "the job outlives a SIGKILLed orchestrate until clean"
    );

    let ps = c.orchestrate(&state, &["ps", "--run", &run_id]);
    let listed = String::from_utf8_lossy(&ps.stdout);
    assert!(
        listed.contains(&format!("slurm job {job}")),
        "{listed}{}",
        String::from_utf8_lossy(&ps.stderr)
    );
    assert!(listed.contains("slurm-kill"), "{listed}");

    let clean = c.orchestrate(&state, &["clean", "--run", &run_id]);
    let cleaned = String::from_utf8_lossy(&clean.stdout);
    assert!(
        cleaned.contains(&format!("slurm job {job} ({run_id}/slurm-kill/d1)")),
        "{cleaned}{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(c.wait_gone(&job), "job {job} still queued after clean");
}

#[test]
fn slurm_job_cancelled_outside_fails_the_run_with_the_reason_and_keeps_finished_points() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work(
        "slurm-ext",
        "gpu",
        20,
        "  dataset: {kind: random, input_len: 16, output_len: 50}\n  num_prompts: 6\n  matrix:\n    concurrency: [2, 1, 3]\n",
    );
    let results = work.path().join("results");
    let state = work.path().join("state");
    let mut child = run(c, &task, &hosts, &results, &state);
    let manifest = wait_manifest(&results, "slurm-ext", &mut child, |m| {
        m["points"][0]["status"] == "completed"
    });
    let job = job_id(&manifest);
    c.slurm(&["scancel", &job]);
    let out = finish(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let manifest = json(&latest(&results, "slurm-ext").join("manifest.json"));
    assert_eq!(manifest["points"][0]["status"], "completed", "{manifest:#}");
    assert_ne!(manifest["points"][1]["status"], "completed", "{manifest:#}");
    // The job's end fails the deployment before the next point: it is not run against a
    // dead server (srun itself lingers up to Slurm's KillWait).
    assert_eq!(manifest["points"][2]["status"], "skipped", "{manifest:#}");
    assert!(
        manifest["points"][2]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("not run:")),
        "{manifest:#}"
    );
    let error = manifest["deployments"][0]["error"]
        .as_str()
        .unwrap_or_default();
    let logs = latest(&results, "slurm-ext").join("logs");
    let log = |r: usize| {
        std::fs::read_to_string(logs.join(format!("server-r{r}-n0.log"))).unwrap_or_default()
    };
    assert!(
        error.contains(&format!("slurm job {job} ended: JobState=CANCELLED")),
        "{error}\n--- r0:\n{}\n--- r1:\n{}",
        log(0),
        log(1)
    );
    assert!(c.wait_gone(&job));
}

/// Issue 29: the job cancelled from outside while point 2 of 3 runs. That point fails with
/// Slurm's state (however many of its requests finished before the servers died), point 3
/// is not run (never started against dead servers), and the failure is told once, as a
/// running deployment's, naming Slurm's reason and what was kept.
#[test]
fn slurm_job_cancelled_mid_point_fails_that_point_with_slurms_state() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work(
        "slurm-mid",
        "gpu",
        20,
        "  dataset: {kind: random, input_len: 16, output_len: 50}\n  num_prompts: 40\n  matrix:\n    concurrency: [8, 4, 2]\n",
    );
    let results = work.path().join("results");
    let state = work.path().join("state");
    let mut child = run(c, &task, &hosts, &results, &state);
    let manifest = wait_manifest(&results, "slurm-mid", &mut child, |m| {
        m["points"][1]["status"] == "running"
    });
    let job = job_id(&manifest);
    // Some of point 2's requests finish first.
    let requests = latest(&results, "slurm-mid").join("points/concurrency=4/requests.jsonl");
    let started = Instant::now();
    while std::fs::read_to_string(&requests).map_or(0, |t| t.lines().count()) < 8 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "point 2 made no progress"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    c.slurm(&["scancel", &job]);
    let out = finish(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let manifest = json(&latest(&results, "slurm-mid").join("manifest.json"));
    let points = manifest["points"].as_array().unwrap();
    let status = |i: usize| points[i]["status"].as_str().unwrap_or_default().to_string();
    let error = |i: usize| points[i]["error"].as_str().unwrap_or_default().to_string();
    let cancelled = format!("slurm job {job} ended: JobState=CANCELLED");
    assert_eq!(status(0), "completed", "{manifest:#}");
    assert_eq!(status(1), "failed", "{manifest:#}");
    assert!(error(1).contains(&cancelled), "{}", error(1));
    assert_eq!(status(2), "skipped", "{manifest:#}");
    assert!(
        error(2).starts_with("not run:") && error(2).contains(&cancelled),
        "{}",
        error(2)
    );
    assert!(
        points[2]["started_at"].is_null(),
        "point 3 was started against dead servers: {}",
        points[2]
    );
    let deployment = manifest["deployments"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        deployment.starts_with(&cancelled) && deployment.contains("during point concurrency=4"),
        "{deployment}"
    );
    // One message, headed as a running deployment's failure, with Slurm's reason first.
    assert_eq!(stderr.matches("[d1] failed").count(), 1, "{stderr}");
    assert!(!stderr.contains("failed to start"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "[d1] failed (1 completed point(s) kept, 1 not run): {cancelled}"
        )),
        "{stderr}"
    );
    assert!(c.wait_gone(&job));
}

#[test]
fn slurm_unknown_partition_is_a_preflight_error_naming_the_key() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work(
        "slurm-part",
        "nope",
        1,
        "  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 2\n",
    );
    let results = work.path().join("results");
    let state = work.path().join("state");
    let before = c.slurm(&["squeue", "-h", "-o", "%i"]);
    let out = finish(
        run(c, &task, &hosts, &results, &state),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:5:18: `clusters.gpu.slurm.partition`: partition `nope` does not exist",
            hosts.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        c.slurm(&["squeue", "-h", "-o", "%i"]),
        before,
        "nothing was submitted"
    );
}

#[test]
fn slurm_preflight_checks_gpus_gres_and_time_limit_against_the_nodes() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work(
        "slurm-gpus",
        "gpu",
        1,
        "  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 2\n",
    );
    // The nodes have 2 GPUs each (gres gpu:2); ask for 8, a gres they lack, and a time limit
    // that is not a Slurm time (refused when the hosts file is read).
    let bad = |gpus: &str, extra: &str| {
        format!(
            "hosts: {{}}\nclusters:\n  gpu:\n    slurm:\n      partition: gpu\n      time_limit: \"10:00\"\n      gpus_per_node: {gpus}\n{extra}"
        )
    };
    let before = c.slurm(&["squeue", "-h", "-o", "%i"]);
    let results = work.path().join("results");
    let state = work.path().join("state");
    std::fs::write(&hosts, bad("8", "      gres: \"gpu:a100:1\"\n")).unwrap();
    let out = finish(
        run(c, &task, &hosts, &results, &state),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let at = hosts.display();
    assert!(
        stderr.contains(&format!(
            "{at}:7:22: `clusters.gpu.slurm.gpus_per_node`: asks for 8 GPU(s) per node on 2 node(s), but only 0 usable node(s) of partition `gpu` have that many (the most is 2, gres gpu:2)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{at}:8:13: `clusters.gpu.slurm.gres`: asks for gres `gpu:a100:1` on 2 node(s)"
        )),
        "{stderr}"
    );
    std::fs::write(&hosts, bad("1", "").replace("\"10:00\"", "\"ten minutes\"")).unwrap();
    let out = finish(
        run(c, &task, &hosts, &results, &state),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{at}:6:19: `clusters.gpu.slurm.time_limit` is `ten minutes`, which is not a Slurm time"
        )),
        "{stderr}"
    );
    assert_eq!(
        c.slurm(&["squeue", "-h", "-o", "%i"]),
        before,
        "nothing was submitted"
    );
}

/// A Slurm cluster as `plan` sees it (no Slurm needed).
pub(crate) fn gpu_cluster() -> orchestrate::hosts::SlurmCluster {
    orchestrate::hosts::SlurmCluster {
        name: "gpu".into(),
        partition: "batch".into(),
        account: None,
        qos: None,
        time_limit: "10".into(),
        gpus_per_node: 4,
        gres: None,
        container: orchestrate::hosts::SlurmContainer::None,
        login: None,
        partition_at: "hosts.yaml:5:18".into(),
        time_limit_at: "hosts.yaml:6:19".into(),
        gpus_per_node_at: "hosts.yaml:7:22".into(),
        gres_at: None,
    }
}

/// A key only a Docker container honors (`privileged`, `user`, `entrypoint`, `shell`) on a
/// role placed on a Slurm cluster, whose pyxis containers take none of them, is a plan-time
/// error at the key naming the cluster.
#[test]
fn container_only_keys_on_slurm_are_a_plan_error_naming_the_key_and_the_cluster() {
    use orchestrate::plan::{self, PlanContext};
    let mut cluster = gpu_cluster();
    cluster.container = orchestrate::hosts::SlurmContainer::Pyxis;
    let ctx = PlanContext::new().with_slurm([("gpu".to_string(), cluster)].into());
    for (key, line) in [
        ("privileged", "privileged: true"),
        ("user", "user: \"1000\""),
        ("shell", "container: {shell: bash}"),
    ] {
        let yaml = format!(
            "name: s\nmodel: m\nimage: img\nhosts: [gpu]\nport: 8000\ncommands: [serve]\n{line}\nbenchmark:\n  dataset: {{kind: random, input_len: 8, output_len: 8}}\n  num_prompts: 1\n"
        );
        let task = orchestrate::spec::load_str(Path::new("inline.yaml"), yaml).unwrap();
        let err = plan::build(&task, &ctx).unwrap_err().to_string();
        assert!(
            err.contains("inline.yaml:7:")
                && err.contains(&format!("`{key}`"))
                && err.contains("Slurm cluster `gpu`"),
            "{key}: {err}"
        );
    }
}

#[test]
fn slurm_plan_gives_every_instance_of_a_deployment_its_own_node_token() {
    use orchestrate::plan::{self, HostPlan, PlanContext};
    let ctx = PlanContext::new().with_slurm([("gpu".to_string(), gpu_cluster())].into());
    let yaml = r#"
name: s
backend: vllm
model: m
roles:
  router:
    port: 8000
    depends_on: [prefill]
    commands: ["lb {% for u in roles.prefill.urls %}--p {{ u }} {% endfor %}"]
  prefill:
    hosts: [gpu]
    nodes: 2
    replicas: 2
    port: 30000
    commands: ["serve --rank {{ node_rank }} --master {{ master_addr }} on {{ host }} tp {{ gpus }}"]
  decode:
    hosts: [gpu]
    port: 30001
    commands: ["serve --decode on {{ host_address }}"]
benchmark:
  dataset: {kind: random, input_len: 8, output_len: 8}
  num_prompts: 1
"#;
    let task = orchestrate::spec::load_str(Path::new("inline.yaml"), yaml.to_string()).unwrap();
    let built = plan::build(&task, &ctx).unwrap();
    let d = &built.deployments[0];
    let role = |name: &str| d.roles.iter().find(|r| r.name == name).unwrap();
    let slots: Vec<usize> = ["prefill", "decode"]
        .iter()
        .flat_map(|r| &role(r).instances)
        .map(|i| match &i.host {
            HostPlan::Slurm(p) => p.slot,
            other => panic!("not on slurm: {other:?}"),
        })
        .collect();
    assert_eq!(
        slots,
        [0, 1, 2, 3, 4],
        "one node per instance across the deployment"
    );
    // dstack's GPU variables follow the cluster's gpus_per_node (the task names no GPUs).
    let env = |i: &plan::InstancePlan, name: &str| {
        i.env
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.value.expose().to_string())
    };
    let leader = &role("prefill").instances[0];
    assert_eq!(env(leader, "DSTACK_GPUS_PER_NODE").as_deref(), Some("4"));
    assert_eq!(env(leader, "DSTACK_GPUS_NUM").as_deref(), Some("8"));
    let prefill = role("prefill");
    assert_eq!(
        prefill.instances[3].commands[0],
        "serve --rank 1 --master <gpu:node2.addr> on <gpu:node3> tp 4"
    );
    assert_eq!(
        role("decode").instances[0].commands[0],
        "serve --decode on <gpu:node4.addr>"
    );
    assert_eq!(
        role("router").instances[0].commands[0].trim(),
        "lb --p http://<gpu:node0.addr>:30000 --p http://<gpu:node1.addr>:30000 --p http://<gpu:node2.addr>:30000 --p http://<gpu:node3.addr>:30000"
    );
    assert!(matches!(role("router").instances[0].host, HostPlan::Local));

    // A login host: the plan is the same, on the cluster driven through it.
    let mut login = gpu_cluster();
    login.login = Some("login1".into());
    let ctx = PlanContext::new().with_slurm([("gpu".to_string(), login)].into());
    let built = plan::build(&task, &ctx).unwrap();
    let prefill = built.deployments[0]
        .roles
        .iter()
        .find(|r| r.name == "prefill")
        .unwrap();
    match &prefill.instances[0].host {
        HostPlan::Slurm(p) => assert_eq!(p.cluster.login.as_deref(), Some("login1")),
        other => panic!("not on slurm: {other:?}"),
    }
}

/// An sshd on 127.0.0.1 standing for the cluster's login host, and `hosts` rewritten to name
/// it `login1` and drive Slurm cluster `gpu` through it; `None` (skip) when sshd is missing
/// outside CI (in CI it fails).
fn login_host(hosts: &Path) -> Option<(Keys, Sshd)> {
    let keys = Keys::new()?;
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    std::fs::write(
        hosts,
        format!(
            "known_hosts: {}\nhosts:\n  login1: {{address: {}, port: {}, user: {}, identity_file: {}}}\nclusters:\n  gpu:\n    slurm:\n      partition: gpu\n      time_limit: \"10:00\"\n      gpus_per_node: 1\n      login: login1\n",
            keys.known_hosts.display(),
            sshd.address,
            sshd.port,
            whoami(),
            keys.user_key.display()
        ),
    )
    .unwrap();
    Some((keys, sshd))
}

/// `orchestrate ARGS` for a cluster driven through the login host: this process has no
/// `SLURM_CONF` (so a Slurm command run here fails: there is no /etc/slurm/slurm.conf), the
/// login host's commands get it through `ORCHESTRATE_SLURM_LOGIN_ENV`.
fn via_login(c: &Cluster, state: &Path, args: &[&OsStr]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("SLURM_CONF")
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("ORCHESTRATE_HOSTS")
        .env(
            "ORCHESTRATE_SLURM_LOGIN_ENV",
            format!("SLURM_CONF={}", c.conf().display()),
        )
        .env("ORCHESTRATE_STATE_DIR", state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `orchestrate run --hosts HOSTS TASK` through the login host, output piped.
fn run_login(
    c: &Cluster,
    task: &Path,
    hosts: &Path,
    results: &Path,
    state: &Path,
) -> std::process::Child {
    via_login(
        c,
        state,
        &[
            "run".as_ref(),
            "--no-report".as_ref(),
            "--hosts".as_ref(),
            hosts.as_os_str(),
            "--results".as_ref(),
            results.as_os_str(),
            task.as_os_str(),
        ],
    )
    .spawn()
    .unwrap()
}

#[test]
fn slurm_login_host_runs_every_slurm_command_and_step_over_ssh() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work(
        "slurm-login",
        "gpu",
        1,
        "  dataset: {kind: random, input_len: 16, output_len: 8}\n  num_prompts: 4\n  matrix:\n    concurrency: [1, 2]\nclient: {reach: tunnel}\n",
    );
    let Some((_keys, _sshd)) = login_host(&hosts) else {
        return;
    };
    let results = work.path().join("results");
    let state = work.path().join("state");

    // `plan` shows the commands run on the login host.
    let plan = via_login(
        c,
        &state,
        &[
            "plan".as_ref(),
            task.as_os_str(),
            "--hosts".as_ref(),
            hosts.as_os_str(),
        ],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    assert!(
        text.contains("slurm cluster gpu on login host login1: $ salloc --no-shell --nodes=2"),
        "{text}"
    );
    assert!(
        text.contains("via login host login1: $ srun '--jobid=<job>'"),
        "{text}"
    );

    let started = Instant::now();
    let out = finish(
        run_login(c, &task, &hosts, &results, &state),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    eprintln!(
        "two-replica Slurm run through a login host: {:?}",
        started.elapsed()
    );

    let dir = latest(&results, "slurm-login");
    let manifest = json(&dir.join("manifest.json"));
    let job = job_id(&manifest);
    assert_eq!(manifest["hosts"]["slurm:gpu:d1"]["login"], "login1");
    let points = manifest["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert!(
        points.iter().all(|p| p["status"] == "completed"),
        "{manifest:#}"
    );
    let nodes = &manifest["hosts"]["slurm:gpu:d1"]["nodes"];
    assert_eq!(nodes[0]["name"], "n1", "{manifest:#}");
    assert_eq!(nodes[1]["name"], "n2", "{manifest:#}");
    for (replica, node) in [(0, "n1"), (1, "n2")] {
        let log =
            std::fs::read_to_string(dir.join(format!("logs/server-r{replica}-n0.log"))).unwrap();
        assert!(
            log.contains(&format!("at node={node} nodeid=0 cuda=0 host={node}")),
            "{log}"
        );
        assert!(
            log.contains(&format!("srun --jobid={job} --nodelist={node}")),
            "{log}"
        );
        // The step ran as a remote process group on the login host, and the server was
        // reached through a tunnel from it.
        let facts = &manifest["deployments"][0]["instances"][format!("server-{replica}")];
        assert_eq!(facts["slurm"]["node"], node, "{facts:#}");
        assert_eq!(facts["slurm"]["job_id"], job.as_str(), "{facts:#}");
        assert_eq!(facts["slurm"]["login"], "login1", "{facts:#}");
        assert!(
            facts["state_dir"]
                .as_str()
                .is_some_and(|d| d.starts_with("/tmp/orchestrate/")),
            "{facts:#}"
        );
        assert_eq!(facts["reach"], "tunnel", "{facts:#}");
    }
    assert!(c.wait_gone(&job), "job {job} still queued after the run");
}

#[test]
fn slurm_login_host_sigint_mid_point_leaves_no_job() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work("slurm-login-int", "gpu", 20, LONG_LOAD);
    let Some((_keys, _sshd)) = login_host(&hosts) else {
        return;
    };
    let results = work.path().join("results");
    let state = work.path().join("state");
    let child = run_login(c, &task, &hosts, &results, &state);
    let job = interrupt(c, child, &results, "slurm-login-int", 1);
    assert!(!c.queued(&job), "job {job} still queued after Ctrl-C");
    // The steps' remote wrappers on the login host (their state dirs carry the task name)
    // are gone too.
    let started = Instant::now();
    while crate::ssh::sshd::running("/slurm-login-int.server-") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a step's remote process group outlived the run"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn slurm_login_host_ps_and_clean_find_the_job_over_ssh() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work("slurm-login-kill", "gpu", 20, LONG_LOAD);
    let Some((_keys, _sshd)) = login_host(&hosts) else {
        return;
    };
    let results = work.path().join("results");
    let state = work.path().join("state");
    let mut child = run_login(c, &task, &hosts, &results, &state);
    let manifest = wait_manifest(&results, "slurm-login-kill", &mut child, deployment_ready);
    let job = job_id(&manifest);
    let run_id = manifest["run_id"].as_str().unwrap().to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(c.queued(&job), "the job outlives a SIGKILLed orchestrate");

    let args = |verb: &str| -> Vec<std::ffi::OsString> {
        vec![
            verb.into(),
            "--run".into(),
            run_id.clone().into(),
            "--hosts".into(),
            hosts.clone().into(),
        ]
    };
    let run = |verb: &str| {
        let args = args(verb);
        let refs: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        via_login(c, &state, &refs).output().unwrap()
    };
    let ps = run("ps");
    let listed = String::from_utf8_lossy(&ps.stdout);
    assert!(
        listed.contains(&format!("slurm job {job} via login1")),
        "{listed}{}",
        String::from_utf8_lossy(&ps.stderr)
    );
    let clean = run("clean");
    let cleaned = String::from_utf8_lossy(&clean.stdout);
    assert!(
        cleaned.contains(&format!(
            "slurm job {job} via login1 ({run_id}/slurm-login-kill/d1)"
        )),
        "{cleaned}{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(c.wait_gone(&job), "job {job} still queued after clean");
}

#[test]
fn slurm_login_host_second_sigint_cancels_the_job_over_ssh_before_exiting() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work("slurm-login-int2", "gpu", 20, LONG_LOAD);
    let Some((_keys, _sshd)) = login_host(&hosts) else {
        return;
    };
    let results = work.path().join("results");
    let state = work.path().join("state");
    let child = run_login(c, &task, &hosts, &results, &state);
    // Two Ctrl-C in a row: the forced exit runs the emergency scancel on the login host.
    let job = interrupt(c, child, &results, "slurm-login-int2", 2);
    assert!(c.wait_gone(&job), "job {job} still queued after two Ctrl-C");
}

/// orchestrate SIGKILLed while sampler steps run: `ps` lists the job, `clean` cancels it,
/// and no sampler is left on the nodes.
#[test]
fn slurm_sampler_steps_of_a_killed_orchestrate_end_with_clean() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work("slurm-gpu-kill", "gpu", 20, LONG_LOAD);
    let results = work.path().join("results");
    let state = work.path().join("state");
    let mark = format!("telemetry-slurm-kill-{}", std::process::id());
    let mut child = run_command(&task, &results, &state)
        .arg("--hosts")
        .arg(&hosts)
        .args([
            "--telemetry-command",
            &crate::telemetry::deaf_stand_in("0.2", 1, &mark),
        ])
        .env("SLURM_CONF", c.conf())
        .spawn()
        .unwrap();
    crate::telemetry::sampling(&mark);
    let manifest = json(&latest(&results, "slurm-gpu-kill").join("manifest.json"));
    let job = job_id(&manifest);
    let run_id = manifest["run_id"].as_str().unwrap().to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    let ps = c.orchestrate(&state, &["ps", "--run", &run_id]);
    let listed = String::from_utf8_lossy(&ps.stdout);
    assert!(listed.contains(&format!("slurm job {job}")), "{listed}");
    let clean = c.orchestrate(&state, &["clean", "--run", &run_id]);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(c.wait_gone(&job), "job {job} still queued after clean");
    assert!(
        crate::telemetry::gone(&mark, Duration::from_secs(10)),
        "a sampler step outlived clean"
    );
}

#[test]
fn slurm_nodes_are_sampled_by_an_overlapping_step_and_nothing_is_left() {
    let Some((c, _turn)) = cluster() else { return };
    let (work, task, hosts) = work(
        "slurm-gpu",
        "gpu",
        5,
        "  dataset: {kind: random, input_len: 16, output_len: 20}\n  concurrency: 2\n  num_prompts: 4\n",
    );
    let results = work.path().join("results");
    let state = work.path().join("state");
    let mark = format!("telemetry-slurm-{}", std::process::id());
    let child = run_command(&task, &results, &state)
        .arg("--hosts")
        .arg(&hosts)
        .args([
            "--telemetry-command",
            &crate::telemetry::stand_in("0.2", 1, &mark),
        ])
        .env("SLURM_CONF", c.conf())
        .spawn()
        .unwrap();
    let out = finish(child, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = latest(&results, "slurm-gpu");
    let job = job_id(&json(&dir.join("manifest.json")));
    let point = std::fs::read_dir(dir.join("points"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    for node in ["n1", "n2"] {
        let log = std::fs::read_to_string(point.join(format!("telemetry/{node}.log"))).unwrap();
        assert!(
            log.contains(&format!("srun --jobid={job} --nodelist={node}")),
            "{log}"
        );
    }
    let summary = json(&point.join("summary.json"));
    let hosts: Vec<&str> = summary["telemetry"]["per_gpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["n1", "n2"], "{summary:#}");
    assert_eq!(summary["gpu_count"], 2);
    assert!(c.wait_gone(&job), "job {job} still queued after the run");
    assert!(
        crate::telemetry::gone(&mark, Duration::from_secs(5)),
        "a sampler step outlived the run"
    );
}
