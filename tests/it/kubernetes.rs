//! The Kubernetes provider against a real control plane and kubelet (issue #28):
//! `scripts/k8s-cluster.sh` builds (once, cached) Kubernetes 1.20 from Debian's source package
//! and starts etcd, kube-apiserver, controller-manager, scheduler and a kubelet on the local
//! Docker engine, once per test binary, in a temp dir of its own on free ports. Pods run the
//! mock image (scripts/build-mock-image.sh) with `imagePullPolicy: Never` and host networking.
//! In CI (`CI=true`) a cluster that cannot start fails the tests; elsewhere they skip with the
//! reason. The tests take turns (one lock): one node.
//!
//! Covered: one server benchmarked and deleted; a 2-rank gang whose rank 1 reaches its leader
//! pod's IP; a pod that cannot be scheduled; a pod deleted mid-point; SIGINT; SIGKILL then
//! `ps` and `clean`; pre-flight (a missing namespace, GPUs no node has, an identity without
//! the rights a run needs); 2P2D behind the real sglang-router, every role a pod (`pd`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::common::{bin, in_ci, json, latest, repo, run_command};
use crate::slurm::{finish, wait_manifest};

mod forward;
mod moai;
mod pd;

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
        let server = self.server();
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

    /// DELETE `path` on the API server as admin (someone else deleting an object).
    fn delete(&self, path: &str) {
        let pki = self.dir.join("pki");
        let out = Command::new("curl")
            .args(["-sf", "-X", "DELETE", "--cacert"])
            .arg(pki.join("ca.crt"))
            .arg("--cert")
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key"))
            .arg(format!("{}{path}", self.server()))
            .output()
            .unwrap();
        assert!(out.status.success(), "DELETE {path} failed");
    }

    fn server(&self) -> String {
        std::fs::read_to_string(self.kubeconfig())
            .unwrap()
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
            .unwrap()
    }

    /// A kubeconfig in `dir` for user `stranger`: a client certificate of the cluster's CA
    /// (so the API server knows who it is) bound to no role (so RBAC grants it nothing).
    fn stranger_kubeconfig(&self, dir: &Path) -> PathBuf {
        let pki = self.dir.join("pki");
        let (key, csr, crt) = (
            dir.join("stranger.key"),
            dir.join("stranger.csr"),
            dir.join("stranger.crt"),
        );
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("openssl")
            .args([
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=stranger",
                "-keyout",
            ])
            .arg(&key)
            .arg("-out")
            .arg(&csr)
            .stderr(Stdio::null()));
        ok(Command::new("openssl")
            .args(["x509", "-req", "-days", "1", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(pki.join("ca.crt"))
            .arg("-CAkey")
            .arg(pki.join("ca.key"))
            .arg("-CAcreateserial")
            .arg("-out")
            .arg(&crt)
            .stderr(Stdio::null()));
        let text = std::fs::read_to_string(self.kubeconfig())
            .unwrap()
            .replace(
                &pki.join("admin.crt").display().to_string(),
                &crt.display().to_string(),
            )
            .replace(
                &pki.join("admin.key").display().to_string(),
                &key.display().to_string(),
            );
        let path = dir.join("stranger.kubeconfig");
        std::fs::write(&path, text).unwrap();
        path
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

    /// Nothing of task `task` is left within 30 s; else fail with `why` and what is left.
    fn assert_clean(&self, task: &str, why: &str) {
        assert_eq!(self.wait_clean(task), Vec::<String>::new(), "{why}");
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

/// A work dir with `hosts.yaml` (cluster `k8s` on the test cluster; `cluster_extra` lines
/// under its `kubernetes:`) and task `name`: one mock-server pod; `extra` lines go at the
/// task's top level.
fn work(c: &Cluster, name: &str, extra: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    work_with(c, name, extra, "", SHORT_LOAD)
}

fn work_with(
    c: &Cluster,
    name: &str,
    extra: &str,
    cluster_extra: &str,
    load: &str,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let image = crate::docker::mock_image();
    let work = tempfile::tempdir().unwrap();
    let hosts = hosts_file(c, work.path(), cluster_extra);
    let task = work.path().join(format!("{name}.yaml"));
    std::fs::write(
        &task,
        format!(
            "name: {name}\nbackend: vllm\nmodel: m\nimage: {image}\nport: auto\nhosts: [k8s]\n{extra}commands:\n  - echo \"in pod ip=$POD_IP secret=$TOKEN\"\n  - exec orchestrate mock-server --host 0.0.0.0 --port {{{{ port }}}} --model m --speed 50\nenv:\n  TOKEN: not-in-the-pod-spec\nreadiness: {{http: /health, timeout: 60s}}\nbenchmark:\n  tokenizer: {}\n  ignore_eos: true\n{load}",
            repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    (work, task, hosts)
}

/// `dir/hosts.yaml`: cluster `k8s` on the test cluster (host networking, local images only),
/// `cluster_extra` lines under its `kubernetes:`.
fn hosts_file(c: &Cluster, dir: &Path, cluster_extra: &str) -> PathBuf {
    let hosts = dir.join("hosts.yaml");
    std::fs::write(
        &hosts,
        format!(
            "hosts: {{}}\nclusters:\n  k8s:\n    kubernetes:\n      kubeconfig: {}\n      namespace: default\n      host_network: true\n      image_pull_policy: Never\n{cluster_extra}",
            c.kubeconfig().display()
        ),
    )
    .unwrap();
    hosts
}

fn run(task: &Path, hosts: &Path, results: &Path, state: &Path) -> std::process::Output {
    finish(spawn(task, hosts, results, state), Duration::from_secs(300))
}

fn spawn(task: &Path, hosts: &Path, results: &Path, state: &Path) -> std::process::Child {
    run_command(task, results, state)
        .arg("--hosts")
        .arg(hosts)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A run of `task` in `dir` that must fail; what it printed.
fn failed_run(dir: &tempfile::TempDir, task: &Path, hosts: &Path) -> String {
    let out = run(
        task,
        hosts,
        &dir.path().join("results"),
        &dir.path().join("state"),
    );
    let text = stderr(&out);
    assert!(!out.status.success(), "{text}");
    text
}

/// `orchestrate ARGS --hosts HOSTS` with the state dir `state`.
fn orchestrate(hosts: &Path, state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .arg("--hosts")
        .arg(hosts)
        .env("ORCHESTRATE_STATE_DIR", state)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn deployment_ready(m: &serde_json::Value) -> bool {
    m["deployments"][0]["status"] == "ready"
}

/// A run of task `name` under [`LONG_LOAD`], once its deployment is ready.
struct Deployed {
    _work: tempfile::TempDir,
    hosts: PathBuf,
    results: PathBuf,
    state: PathBuf,
    child: std::process::Child,
    manifest: serde_json::Value,
}

fn deployed(c: &Cluster, name: &str) -> Deployed {
    let (work, task, hosts) = work_with(c, name, "", "", LONG_LOAD);
    let results = work.path().join("results");
    let state = work.path().join("state");
    let mut child = spawn(&task, &hosts, &results, &state);
    let manifest = wait_manifest(&results, name, &mut child, deployment_ready);
    Deployed {
        _work: work,
        hosts,
        results,
        state,
        child,
        manifest,
    }
}

/// Two short points.
const SHORT_LOAD: &str = "  dataset: {kind: random, input_len: 16, output_len: 8}\n  num_prompts: 4\n  matrix:\n    concurrency: [1, 2]\n";

/// The load of the tests that interrupt or kill a run: far longer than any of them waits
/// (the mock at `--speed 50` streams 2,000 tokens in about a second; 400 of them one by one).
const LONG_LOAD: &str = "  dataset: {kind: random, input_len: 16, output_len: 2000}\n  num_prompts: 400\n  matrix:\n    concurrency: [1, 2]\n";

fn stderr(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
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
    // The secret's value never reaches the run's logs in clear.
    assert!(!log.contains("not-in-the-pod-spec"), "{log}");
    // The container's own lines, when the kubelet gave them: under load the 1.20 kubelet
    // here has answered a pod's log (followed, and fetched again at teardown) with nothing
    // (docs/kubernetes.md); the readiness probe and the completed points show it served.
    if log.contains("in pod ip=") {
        // The value reached the pod through its Secret; the run's logs redact it.
        assert!(log.contains("secret=***"), "{log}");
        assert!(log.contains("listening on"), "{log}");
    }
    let points = std::fs::read_dir(run_dir.join("points")).unwrap().count();
    assert_eq!(points, 2, "both concurrency points ran");
    c.assert_clean(name, "teardown left objects");
}

#[test]
fn kubernetes_pod_that_cannot_be_scheduled_fails_at_once_with_the_reason() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-unsched";
    // No node carries the label: the pre-flight asks no GPUs, so only the scheduler can say.
    let (work, task, hosts) = work_with(
        c,
        name,
        "",
        "      node_selector: {orchestrate-test/pool: none}\n",
        SHORT_LOAD,
    );
    let started = Instant::now();
    let text = failed_run(&work, &task, &hosts);
    assert!(text.contains("cannot be scheduled"), "{text}");
    // 1.20's scheduler words a node selector as node affinity; newer ones name the selector.
    assert!(text.contains("0/1 nodes are available"), "{text}");
    assert!(
        text.contains("didn't match Pod's node affinity")
            || text.contains("didn't match node selector"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the failure came only after {:?}",
        started.elapsed()
    );
    c.assert_clean(name, "the failed pod was left");
}

#[test]
fn kubernetes_gang_rank_reaches_its_leader_pod_by_ip() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-gang";
    let gang_port = free_base();
    let (work, task, hosts) = work(c, name, "nodes: 2\n");
    // Rank 1 dials the leader's gang port at `master_addr`; the leader serves only once its
    // rank joined, so the run passing readiness proves the address was the leader pod's IP.
    let text = std::fs::read_to_string(&task).unwrap().replace(
        "--model m --speed 50",
        &format!(
            "--model m --speed 50 --nnodes {{{{ nnodes }}}} --node-rank {{{{ node_rank }}}} --master-addr {{{{ master_addr }}}} --master-port {gang_port}{{% if node_rank > 0 %}} --headless{{% endif %}}"
        ),
    );
    std::fs::write(&task, text).unwrap();
    let results = work.path().join("results");
    let out = run(&task, &hosts, &results, &work.path().join("state"));
    assert!(out.status.success(), "{}", stderr(&out));
    let run_dir = latest(&results, name);
    // The leader's /health answers 503 until every rank joined its gang port, so the run
    // passing readiness proves rank 1 dialled the leader pod's IP (a token left in its
    // command would not resolve). Its own log says so too, when the kubelet gave it: under
    // the whole suite's load a pod's log has come back without the container's lines, only
    // orchestrate's own notes (docs/kubernetes.md).
    let rank = std::fs::read_to_string(run_dir.join("logs/server-r0-n1.log")).unwrap();
    if rank.lines().any(|l| !l.starts_with("orchestrate:")) {
        assert!(rank.contains("rank 1 of 2 joined rank 0 at"), "{rank}");
    }
    assert!(!rank.contains("<k8s:"), "a token was left: {rank}");
    let leader = std::fs::read_to_string(run_dir.join("logs/server-r0-n0.log")).unwrap();
    assert!(!leader.contains("<k8s:"), "a token was left: {leader}");
    let manifest = json(&run_dir.join("manifest.json"));
    assert_eq!(manifest["status"], "completed", "{manifest:#}");
    c.assert_clean(name, "teardown left objects");
}

#[test]
fn kubernetes_pod_deleted_mid_point_fails_the_run_with_the_reason() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-killed";
    // Bound whole: its work dir lives until the test ends.
    let d = deployed(c, name);
    let (results, child) = (&d.results, d.child);
    std::thread::sleep(Duration::from_millis(1500));
    let pods = c.leftovers(name);
    let pod = pods
        .iter()
        .find_map(|p| p.strip_prefix("pods/"))
        .unwrap_or_else(|| panic!("no pod of {name}: {pods:?}"))
        .trim_matches('"')
        .to_string();
    c.delete(&format!("/api/v1/namespaces/default/pods/{pod}"));
    let out = finish(child, Duration::from_secs(120));
    let text = stderr(&out);
    assert!(!out.status.success(), "{text}");
    let manifest = json(&latest(results, name).join("manifest.json"));
    assert_eq!(manifest["status"], "failed", "{manifest:#}");
    let told = format!("{text}{manifest}");
    assert!(
        told.contains(&pod),
        "the failure does not name the pod: {told}"
    );
    c.assert_clean(name, "teardown left objects");
}

#[test]
fn kubernetes_sigint_deletes_the_pods() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-int";
    let d = deployed(c, name);
    let child = d.child;
    assert!(
        !c.leftovers(name).is_empty(),
        "no pod while the run is deployed"
    );
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = finish(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    // Teardown waited for the pod to be gone.
    assert_eq!(
        c.leftovers(name),
        Vec::<String>::new(),
        "Ctrl-C left objects"
    );
}

#[test]
fn kubernetes_clean_deletes_the_pods_of_a_killed_orchestrate() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-kill";
    let d = deployed(c, name);
    let (hosts, state, manifest, mut child) = (&d.hosts, &d.state, &d.manifest, d.child);
    let run_id = manifest["run_id"].as_str().unwrap().to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    let left = c.leftovers(name);
    assert_eq!(
        left.len(),
        2,
        "pod and Secret outlive a SIGKILLed orchestrate: {left:?}"
    );

    let ps = orchestrate(hosts, state, &["ps", "--run", &run_id]);
    let listed = String::from_utf8_lossy(&ps.stdout);
    assert!(listed.contains("pod default/orch-"), "{}", stderr(&ps));
    assert!(listed.contains("kubernetes k8s"), "{listed}");

    let clean = orchestrate(hosts, state, &["clean", "--run", &run_id]);
    assert!(clean.status.success(), "{}", stderr(&clean));
    c.assert_clean(name, "clean left objects");
}

#[test]
fn kubernetes_preflight_names_the_hosts_file_line_and_creates_nothing() {
    let Some((c, _turn)) = cluster() else { return };
    // A namespace that does not exist.
    let name = "k8s-prefl-ns";
    let (dir, task, hosts) = work(c, name, "");
    let text = std::fs::read_to_string(&hosts)
        .unwrap()
        .replace("namespace: default", "namespace: no-such-ns");
    std::fs::write(&hosts, text).unwrap();
    let told = failed_run(&dir, &task, &hosts);
    assert!(
        told.contains(&format!(
            "{}:6:18: `clusters.k8s.kubernetes.namespace`",
            hosts.display()
        )),
        "{told}"
    );
    assert!(
        told.contains("namespace `no-such-ns` does not exist"),
        "{told}"
    );

    // GPUs that no node has (the test node has none): said before any pod exists.
    let name = "k8s-prefl-gpu";
    let (dir, task, hosts) = work(c, name, "resources: {gpu: 2}\n");
    let told = failed_run(&dir, &task, &hosts);
    assert!(told.contains("a pod asks for 2 `nvidia.com/gpu`"), "{told}");
    assert!(told.contains("has allocatable is 0"), "{told}");
    assert_eq!(
        c.leftovers(name),
        Vec::<String>::new(),
        "pre-flight created objects"
    );

    // An identity the cluster knows but grants nothing (a client certificate of our CA).
    let name = "k8s-prefl-rbac";
    let (dir, task, hosts) = work(c, name, "");
    let kubeconfig = c.stranger_kubeconfig(dir.path());
    let text = std::fs::read_to_string(&hosts).unwrap().replace(
        &c.kubeconfig().display().to_string(),
        &kubeconfig.display().to_string(),
    );
    std::fs::write(&hosts, text).unwrap();
    let told = failed_run(&dir, &task, &hosts);
    assert!(
        told.contains("may not create pods, get pods, list pods, delete pods, get pods/log, create secrets, delete secrets, list events in namespace `default`"),
        "{told}"
    );
    assert_eq!(
        c.leftovers(name),
        Vec::<String>::new(),
        "pre-flight created objects"
    );
}
