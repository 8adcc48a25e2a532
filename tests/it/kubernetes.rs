//! The Kubernetes provider against a real control plane and kubelet (issue #28):
//! `scripts/k8s-cluster.sh` builds (once, cached) Kubernetes 1.20 from Debian's source package
//! and starts etcd, kube-apiserver, controller-manager, scheduler and a kubelet on the local
//! Docker engine, once per test binary, in a temp dir of its own on free ports. Pods run the
//! mock image (scripts/build-mock-image.sh) with `imagePullPolicy: Never` and host networking.
//! In CI (`CI=true`) a cluster that cannot start fails the tests; elsewhere they skip with the
//! reason. The tests take turns (one lock): one node.
//!
//! NOT YET WIRED: `tests/it/main.rs` does not name this module, and `.ci/run` does not build
//! the cluster, because these tests have never been seen passing (the first cluster start hit
//! a reflect2/Go 1.19 crash; the rebuilt binaries were not ready before the session ended).
//! Wire both (the `.ci/run` step is in commit history, branch `wk8s`) once they pass here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::common::{bin, in_ci, latest, repo, run_command};
use crate::slurm::finish;

/// The test cluster: its directory (kubeconfig and certificates inside).
pub(crate) struct Cluster {
    dir: PathBuf,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static TURN: Mutex<()> = Mutex::new(());
static STARTED_DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn stop_cluster() {
    if let Some(dir) = STARTED_DIR.get() {
        let _ = Command::new(repo().join("scripts/k8s-cluster.sh"))
            .arg("stop")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Four consecutive free TCP ports (apiserver, etcd client and peer, kubelet), below the
/// ephemeral range and apart from the Slurm tests' range.
fn free_base() -> u16 {
    let seed = std::process::id() as u16;
    for i in 0..400u16 {
        let base = 20000 + (seed.wrapping_add(i * 41) % 8000);
        if (0..4).all(|k| std::net::TcpListener::bind(("0.0.0.0", base + k)).is_ok()) {
            return base;
        }
    }
    panic!("no four consecutive free ports in 20000-28000");
}

fn start() -> Result<Cluster, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("the test cluster's kubelet must run as root".into());
    }
    let missing: Vec<&str> = ["docker", "etcd", "go", "openssl", "socat"]
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing {} (apt-get install golang-go etcd-server socat dpkg-dev rsync; .ci/run does)",
            missing.join(", ")
        ));
    }
    let dir = tempfile::Builder::new()
        .prefix("orchestrate-k8s-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    let out = Command::new(repo().join("scripts/k8s-cluster.sh"))
        .arg("start")
        .arg(&dir)
        .env("K8S_TEST_PORT", free_base().to_string())
        .output()
        .map_err(|e| e.to_string())?;
    let _ = STARTED_DIR.set(dir.clone());
    // SAFETY: registering a plain extern "C" function to run at exit.
    unsafe { libc::atexit(stop_cluster) };
    if !out.status.success() {
        return Err(format!(
            "scripts/k8s-cluster.sh start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(Cluster { dir })
}

/// The cluster and this test's turn, or `None` (skip) outside CI when it cannot start.
fn cluster() -> Option<(&'static Cluster, MutexGuard<'static, ()>)> {
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    match CLUSTER.get_or_init(start) {
        Ok(c) => Some((c, turn)),
        Err(why) if in_ci() => {
            panic!("CI=true but the Kubernetes test cluster is unavailable: {why}")
        }
        Err(why) => {
            eprintln!("skipping: {why}");
            None
        }
    }
}

impl Cluster {
    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// GET `path` from the API server as admin; the JSON answer.
    fn get(&self, path: &str) -> serde_json::Value {
        let pki = self.dir.join("pki");
        let server = std::fs::read_to_string(self.kubeconfig())
            .unwrap()
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
            .unwrap();
        let out = Command::new("curl")
            .arg("-sf")
            .arg("--cacert")
            .arg(pki.join("ca.crt"))
            .arg("--cert")
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key"))
            .arg(format!("{server}{path}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "GET {path} failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Names of our pods and Secrets of task `task` still in the cluster.
    fn leftovers(&self, task: &str) -> Vec<String> {
        let mut out = Vec::new();
        for kind in ["pods", "secrets"] {
            let list = self.get(&format!(
                "/api/v1/namespaces/default/{kind}?labelSelector=orchestrate%2Ftask%3D{task}"
            ));
            for item in list["items"].as_array().unwrap() {
                out.push(format!("{kind}/{}", item["metadata"]["name"]));
            }
        }
        out
    }

    /// Wait (up to 30 s) until nothing of task `task` is left.
    fn wait_clean(&self, task: &str) -> Vec<String> {
        let started = Instant::now();
        loop {
            let left = self.leftovers(task);
            if left.is_empty() || started.elapsed() > Duration::from_secs(30) {
                return left;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A work dir with `hosts.yaml` (cluster `k8s` on the test cluster) and task `name`: one
/// mock-server pod; `extra` lines go at the task's top level.
fn work(c: &Cluster, name: &str, extra: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let image = crate::docker::mock_image();
    let work = tempfile::tempdir().unwrap();
    let hosts = work.path().join("hosts.yaml");
    std::fs::write(
        &hosts,
        format!(
            "hosts: {{}}\nclusters:\n  k8s:\n    kubernetes:\n      kubeconfig: {}\n      namespace: default\n      host_network: true\n      image_pull_policy: Never\n",
            c.kubeconfig().display()
        ),
    )
    .unwrap();
    let task = work.path().join(format!("{name}.yaml"));
    std::fs::write(
        &task,
        format!(
            "name: {name}\nbackend: vllm\nmodel: m\nimage: {image}\nport: auto\nhosts: [k8s]\n{extra}commands:\n  - echo \"in pod ip=$POD_IP secret=$TOKEN\"\n  - exec orchestrate mock-server --host 0.0.0.0 --port {{{{ port }}}} --model m --speed 50\nenv:\n  TOKEN: not-in-the-pod-spec\nreadiness: {{http: /health, timeout: 60s}}\nbenchmark:\n  dataset: {{kind: random, input_len: 16, output_len: 8}}\n  tokenizer: {}\n  ignore_eos: true\n  num_prompts: 4\n  matrix:\n    concurrency: [1, 2]\n",
            repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    (work, task, hosts)
}

fn run(task: &Path, hosts: &Path, results: &Path, state: &Path) -> std::process::Output {
    let child = run_command(task, results, state)
        .arg("--hosts")
        .arg(hosts)
        .spawn()
        .unwrap();
    finish(child, Duration::from_secs(300))
}

#[test]
fn kubernetes_mock_server_pod_is_benchmarked_end_to_end_and_deleted() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-e2e";
    let (work, task, hosts) = work(c, name, "");
    let results = work.path().join("results");
    let state = work.path().join("state");

    // `plan` prints the pod spec as YAML, its environment in a Secret, not in the spec.
    let plan = Command::new(bin())
        .arg("plan")
        .arg(&task)
        .arg("--hosts")
        .arg(&hosts)
        .env("ORCHESTRATE_STATE_DIR", &state)
        .output()
        .unwrap();
    let plan_out = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    for want in [
        "kind: Pod",
        "imagePullPolicy: Never",
        "hostNetwork: true",
        "secretRef:",
        "orchestrate/task: k8s-e2e",
    ] {
        assert!(plan_out.contains(want), "plan lacks `{want}`:\n{plan_out}");
    }
    assert!(!plan_out.contains("not-in-the-pod-spec"), "{plan_out}");

    let out = run(&task, &hosts, &results, &state);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = latest(&results, name);
    let log = std::fs::read_to_string(run_dir.join("logs/server-r0-n0.log")).unwrap();
    assert!(log.contains("in pod ip="), "{log}");
    assert!(log.contains("secret=not-in-the-pod-spec"), "{log}");
    assert!(log.contains("listening on"), "{log}");
    let points = std::fs::read_dir(run_dir.join("points")).unwrap().count();
    assert_eq!(points, 2, "both concurrency points ran");
    assert_eq!(
        c.wait_clean(name),
        Vec::<String>::new(),
        "teardown left objects"
    );
}

#[test]
fn kubernetes_pod_that_cannot_be_scheduled_fails_at_once_with_the_reason() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-nogpu";
    let (work, task, hosts) = work(c, name, "resources: {gpu: 1}\n");
    let started = Instant::now();
    let out = run(
        &task,
        &hosts,
        &work.path().join("results"),
        &work.path().join("state"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("cannot be scheduled"), "{stderr}");
    assert!(stderr.contains("Insufficient nvidia.com/gpu"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the failure came only after {:?}",
        started.elapsed()
    );
    assert_eq!(
        c.wait_clean(name),
        Vec::<String>::new(),
        "the failed pod was left"
    );
}
