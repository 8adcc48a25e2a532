//! Prefill/decode topologies end to end through `orchestrate run`: two prefill and two decode
//! `mock-server` workers behind a real router (sglang-router 0.3.2 and vllm-router 0.1.17 from
//! the routers venv), the router as entry role. Worker-count readiness gates the load (a
//! router given too few workers fails the deployment naming what it reports and expects),
//! every request sent is completed, a decode worker killed mid-point fails the deployment with
//! its log tail and leaves no process behind, and the same 2P2D task runs on three SSH hosts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, json, latest, repo};
use crate::ssh::fixture::hosts_file;
use crate::ssh::marker;
use crate::ssh::run::gone_within;
use crate::ssh::sshd::{Keys, Sshd};

/// The venv holding the pinned routers (tests/it/routers/venv.rs: missing is a failure under
/// CI=true, else the test says why and returns).
pub(crate) fn routers_venv() -> Option<PathBuf> {
    crate::routers::venv::routers().map(|_| crate::routers::venv::dir())
}

#[derive(Clone, Copy)]
pub(crate) enum Router {
    Sglang,
    Vllm,
}

/// A port nothing listens on now (for the routers' Prometheus listener, which has no `0`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The router's command: every prefill (`prefills` of them, else all) and decode URL.
fn router_command(venv: &Path, router: Router, marker: &str, prefills: Option<usize>) -> String {
    let prefill_urls = match prefills {
        Some(n) => format!("roles.prefill.urls[:{n}]"),
        None => "roles.prefill.urls".to_string(),
    };
    let (program, pd, bootstrap) = match router {
        Router::Sglang => (
            format!(
                "{} -m sglang_router.launch_router",
                venv.join("bin/python").display()
            ),
            "--pd-disaggregation",
            " 8998",
        ),
        Router::Vllm => (
            venv.join("bin/vllm-router").display().to_string(),
            "--vllm-pd-disaggregation",
            "",
        ),
    };
    format!(
        "exec {program} {pd}{{% for u in {prefill_urls} %}} --prefill {{{{ u }}}}{bootstrap}{{% endfor %}}{{% for u in roles.decode.urls %}} --decode {{{{ u }}}}{{% endfor %}} --host {{{{ host_address }}}} --port {{{{ port }}}} --prometheus-port {prom} --request-id-headers x-request-id x-{marker}",
        prom = free_port(),
    )
}

/// Options of one 2P2D task.
pub(crate) struct Shape<'a> {
    pub(crate) name: &'a str,
    pub(crate) router: Router,
    pub(crate) marker: &'a str,
    /// Hosts of prefill, decode and router (`None`: this machine).
    pub(crate) hosts: Option<[&'a str; 3]>,
    /// Give the router only this many prefill workers.
    pub(crate) prefills: Option<usize>,
    /// Points: output lengths (one point each) and requests per point.
    pub(crate) output_lens: &'a [u32],
    pub(crate) num_prompts: u32,
    /// Extra mock-server flags of decode-0 (`--seed 7` marks it for the kill test).
    pub(crate) decode0: &'a str,
    pub(crate) router_timeout: &'a str,
    /// `client.reach` (`None`: the default, `auto`).
    pub(crate) reach: Option<&'a str>,
}

pub(crate) fn task_file(dir: &Path, venv: &Path, s: &Shape<'_>) -> PathBuf {
    let mock = format!(
        "exec {{{{ orchestrate }}}} mock-server --host {{{{ host_address }}}} --port {{{{ port }}}} --model {m} --preset fixed --itl-ms 10",
        m = s.marker
    );
    let hosts = |i: usize| match s.hosts {
        Some(h) => format!("\n    hosts: [{}]", h[i]),
        None => String::new(),
    };
    let text = format!(
        r#"name: {name}
backend: vllm
model: {marker}
roles:
  prefill:
    replicas: 2
    port: auto{hp}
    readiness: {{timeout: 20s}}
    commands: ["{mock}"]
  decode:
    replicas: 2
    port: auto{hd}
    readiness: {{timeout: 20s}}
    commands: ["{mock}{{% if role_index == 0 %}} {decode0}{{% endif %}}"]
  router:
    port: auto{hr}
    depends_on: [prefill, decode]
    readiness: {{timeout: {timeout}}}
    commands: ['{router}']
entry_role: router{reach}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 8}}
  tokenizer: {tokenizer}
  ignore_eos: true
  concurrency: 4
  num_prompts: {n}
  matrix:
    output_len: [{lens}]
"#,
        name = s.name,
        marker = s.marker,
        hp = hosts(0),
        hd = hosts(1),
        hr = hosts(2),
        decode0 = s.decode0,
        timeout = s.router_timeout,
        reach = s
            .reach
            .map_or_else(String::new, |r| format!("\nclient: {{reach: {r}}}")),
        router = router_command(venv, s.router, s.marker, s.prefills),
        tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
        n = s.num_prompts,
        lens = s
            .output_lens
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    );
    let path = dir.join(format!("{}.yaml", s.name));
    std::fs::write(&path, text).unwrap();
    path
}

/// `orchestrate run` of `task` with its own state dir and host locks (and `hosts` file).
pub(crate) fn command(dir: &Path, task: &Path, hosts: Option<&Path>) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--no-report", "--results"])
        .arg(dir.join("results"));
    if let Some(hosts) = hosts {
        cmd.arg("--hosts").arg(hosts);
    }
    cmd.arg(task)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("ORCHESTRATE_STATE_DIR", dir.join("state"))
        .env(
            "ORCHESTRATE_HOST_LOCK",
            dir.join("lock-{host}").display().to_string(),
        )
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("ORCHESTRATE_HOSTS")
        .env_remove("ORCHESTRATE_RESULTS")
        .stdin(Stdio::null());
    cmd
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// No process carries `marker` within 10 s.
pub(crate) fn gone(marker: &str) -> bool {
    gone_within(marker, 10)
}

/// Each point's summary, in point order.
pub(crate) fn summaries(dir: &Path, task: &str) -> Vec<Value> {
    let run = latest(&dir.join("results"), task);
    let manifest = json(&run.join("manifest.json"));
    manifest["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "completed")
        .map(|p| {
            json(
                &run.join("points")
                    .join(p["id"].as_str().unwrap())
                    .join("summary.json"),
            )
        })
        .collect()
}

/// A completed 2P2D run: the router reported 2 + 2 before the load, every request completed.
fn assert_pd_run(dir: &Path, task: &str, out: &Output, num_prompts: u64) {
    let router = Checked {
        role: "router",
        via: "router",
        prefill: 2,
        decode: 2,
    };
    assert_topology_run(dir, task, out, num_prompts, &router);
}

/// The router role a topology run checked, and the workers it had to report.
pub(crate) struct Checked<'a> {
    pub role: &'a str,
    /// `readiness.workers.via` as the manifest records it.
    pub via: &'a str,
    /// Replicas of the `prefill` and `decode` roles (each expected and reported).
    pub prefill: u64,
    pub decode: u64,
}

/// A completed topology run: the router (`role`-0) reported the expected prefill and decode
/// workers before the load, every worker was ready before it, every request completed.
pub(crate) fn assert_topology_run(
    dir: &Path,
    task: &str,
    out: &Output,
    num_prompts: u64,
    router: &Checked<'_>,
) {
    let d = assert_checked_run(dir, task, out, num_prompts, router);
    let entry = format!("{}-0", router.role);
    // Each instance's ready time is recorded; the router's comes after every worker's.
    let ready = |k: &str| d["instances"][k]["ready_after_s"].as_f64().unwrap();
    for (kind, n) in [("prefill", router.prefill), ("decode", router.decode)] {
        for i in 0..n {
            let k = format!("{kind}-{i}");
            assert!(ready(&k) <= ready(&entry), "{k}: {:#}", d["instances"]);
        }
    }
}

/// A completed topology run, whatever the order its roles started in: the router (`role`-0)
/// reported the expected prefill and decode workers before the load, every request
/// completed. Returns the manifest's deployment.
pub(crate) fn assert_checked_run(
    dir: &Path,
    task: &str,
    out: &Output,
    num_prompts: u64,
    router: &Checked<'_>,
) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    let run = latest(&dir.join("results"), task);
    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "completed", "{m:#}");
    let d = &m["deployments"][0];
    let entry = format!("{}-0", router.role);
    let topology = &d["instances"][&entry]["topology"][0];
    assert_eq!(topology["role"], router.role, "{:#}", d["instances"]);
    assert_eq!(topology["via"], router.via);
    for (kind, n) in [("prefill", router.prefill), ("decode", router.decode)] {
        assert_eq!(topology["expected"][kind], n, "{topology}");
        assert_eq!(topology["reported"][kind], n, "{topology}");
    }
    let points = summaries(dir, task);
    assert!(!points.is_empty());
    for s in points {
        assert_eq!(s["completed"], num_prompts, "{s:#}");
        assert_eq!(s["failed"], 0, "{s:#}");
    }
    d.clone()
}

/// A run whose topology never became ready: it failed naming what the router `reports` and
/// what was `expected`, the deployment failed, no point ran, no process carrying `mark` is left.
pub(crate) fn assert_unready(
    dir: &Path,
    task: &str,
    out: &Output,
    reports: &str,
    expected: &str,
    mark: &str,
) {
    let err = stderr(out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(reports) && err.contains(expected), "{err}");
    let m = json(&latest(&dir.join("results"), task).join("manifest.json"));
    assert_eq!(m["deployments"][0]["status"], "failed");
    for p in m["points"].as_array().unwrap() {
        assert_eq!(
            p["status"], "skipped",
            "no load on an unready topology: {p}"
        );
    }
    assert!(gone(mark), "a worker or the router outlived the run");
}

fn pd_through(router: Router, name: &str) {
    let Some(venv) = routers_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(name);
    let task = task_file(
        dir.path(),
        &venv,
        &Shape {
            name,
            router,
            marker: &mark,
            hosts: None,
            prefills: None,
            output_lens: &[8],
            num_prompts: 24,
            decode0: "",
            router_timeout: "60s",
            reach: None,
        },
    );
    let out = command(dir.path(), &task, None).output().unwrap();
    assert_pd_run(dir.path(), name, &out, 24);
    assert!(gone(&mark), "a worker or the router outlived the run");
}

#[test]
fn a_2p2d_task_runs_through_the_sglang_router() {
    pd_through(Router::Sglang, "pd-sglang");
}

#[test]
fn a_2p2d_task_runs_through_the_vllm_router() {
    pd_through(Router::Vllm, "pd-vllm");
}

#[test]
fn a_router_missing_a_worker_fails_the_deployment_before_any_load() {
    let Some(venv) = routers_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mark = marker("short");
    let task = task_file(
        dir.path(),
        &venv,
        &Shape {
            name: "pd-short",
            router: Router::Sglang,
            marker: &mark,
            hosts: None,
            prefills: Some(1),
            output_lens: &[8],
            num_prompts: 4,
            decode0: "",
            router_timeout: "4s",
            reach: None,
        },
    );
    let out = command(dir.path(), &task, None).output().unwrap();
    assert_unready(
        dir.path(),
        "pd-short",
        &out,
        "reports 1 prefill and 2 decode workers (GET /workers)",
        "expected at least 2 prefill and 2 decode workers",
        &mark,
    );
}

/// The pid of the live process whose command line holds every one of `parts`.
fn find_pid(parts: &[&str]) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        parts.iter().all(|p| cmd.contains(p)).then_some(pid)
    })
}

#[test]
fn a_decode_worker_killed_mid_point_fails_the_deployment_cleanly() {
    let Some(venv) = routers_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mark = marker("kill");
    // Point 1: 8 requests of 8 tokens; point 2: 400 requests of 40 tokens (about 40 s), the
    // one decode-0 dies in.
    let task = task_file(
        dir.path(),
        &venv,
        &Shape {
            name: "pd-kill",
            router: Router::Vllm,
            marker: &mark,
            hosts: None,
            prefills: None,
            output_lens: &[8, 40],
            num_prompts: 8,
            decode0: "--seed 7",
            router_timeout: "60s",
            reach: None,
        },
    );
    let text = std::fs::read_to_string(&task).unwrap().replace(
        "num_prompts: 8",
        "num_prompts: \"{{ 8 if output_len == 8 else 400 }}\"",
    );
    std::fs::write(&task, text).unwrap();
    let child = command(dir.path(), &task, None)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the second point runs, SIGKILL decode-0.
    let deadline = Instant::now() + Duration::from_secs(60);
    let killed = loop {
        assert!(Instant::now() < deadline, "the second point never started");
        let second_running = latest_manifest(dir.path(), "pd-kill")
            .is_some_and(|m| m["points"][1]["status"] == "running");
        if second_running {
            std::thread::sleep(Duration::from_millis(500));
            let pid = find_pid(&[&mark, "--seed 7"]).expect("decode-0 runs");
            // SAFETY: a plain signal to a process this test's run started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            break pid;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("decode-0 exited (signal 9") || err.contains("decode-0 exited (killed"),
        "{err}"
    );
    assert!(
        err.contains("listening on"),
        "decode-0's log tail shown: {err}"
    );
    let m = latest_manifest(dir.path(), "pd-kill").unwrap();
    assert_eq!(m["deployments"][0]["status"], "failed", "{m:#}");
    assert!(
        m["deployments"][0]["error"]
            .as_str()
            .unwrap()
            .contains("decode-0"),
        "{m:#}"
    );
    // The finished point is kept; the one decode-0 died in is not completed.
    assert_eq!(m["points"][0]["status"], "completed", "{m:#}");
    assert_ne!(m["points"][1]["status"], "completed", "{m:#}");
    assert_eq!(summaries(dir.path(), "pd-kill")[0]["completed"], 8);
    assert!(
        gone(&mark),
        "a worker or the router outlived the run (killed {killed})"
    );
}

pub(crate) fn latest_manifest(dir: &Path, task: &str) -> Option<Value> {
    let results = dir.join("results");
    let link = std::fs::read_link(results.join(task).join("latest")).ok()?;
    let text = std::fs::read_to_string(results.join(task).join(link).join("manifest.json")).ok()?;
    serde_json::from_str(&text).ok()
}

#[test]
fn a_2p2d_task_runs_on_three_ssh_hosts() {
    let Some(venv) = routers_venv() else { return };
    let Some(keys) = Keys::new() else { return };
    let servers: Vec<Sshd> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|a| Sshd::start(&keys, a))
        .collect();
    for s in &servers {
        s.trust(&keys);
    }
    let dir = tempfile::tempdir().unwrap();
    let refs: Vec<&Sshd> = servers.iter().collect();
    let hosts = hosts_file(dir.path(), &keys, &refs, &keys.user_key);
    let mark = marker("ssh");
    // Prefill on h1, decode on h2, the router on h3; each server listens on its host's address
    // only (127.0.0.x) and everything from here (probes, the topology check, the load) goes
    // through SSH tunnels, which must lead where the server listens.
    let task = task_file(
        dir.path(),
        &venv,
        &Shape {
            name: "pd-ssh",
            router: Router::Sglang,
            marker: &mark,
            hosts: Some(["h1", "h2", "h3"]),
            prefills: None,
            output_lens: &[8],
            num_prompts: 12,
            decode0: "",
            router_timeout: "60s",
            reach: Some("tunnel"),
        },
    );
    let out = command(dir.path(), &task, Some(&hosts)).output().unwrap();
    assert_pd_run(dir.path(), "pd-ssh", &out, 12);
    let m = json(&latest(&dir.path().join("results"), "pd-ssh").join("manifest.json"));
    for (key, facts) in m["deployments"][0]["instances"].as_object().unwrap() {
        assert_eq!(facts["reach"], "tunnel", "{key}: {facts}");
    }
    // A tunnel to a server still starting is reported once, never per probe.
    let err = stderr(&out);
    let warnings = err.matches("could not reach").count();
    assert!(warnings <= 5, "{warnings} tunnel warnings: {err}");
    assert!(gone(&mark), "a remote worker or router outlived the run");
}

#[test]
fn a_worker_exiting_while_the_router_starts_fails_the_deployment_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mark = marker("early");
    // prefill-0 is ready, then its shell exits with 3 while the router (which never answers)
    // is still starting: the start fails at once, not at the router's 60 s deadline.
    let text = format!(
        r#"name: pd-early
model: {mark}
roles:
  prefill:
    port: auto
    commands:
      - "{{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --model {mark} &"
      - "sleep 2; echo prefill gives up >&2; exit 3"
  decode:
    port: auto
    commands: ["exec {{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --model {mark}"]
  router:
    port: auto
    depends_on: [prefill, decode]
    readiness: {{timeout: 60s}}
    commands: ["exec sleep 120 # {mark}"]
entry_role: router
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 8}}
  tokenizer: {tokenizer}
  num_prompts: 2
"#,
        tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
    );
    let task = dir.path().join("pd-early.yaml");
    std::fs::write(&task, text).unwrap();
    let started = Instant::now();
    let out = command(dir.path(), &task, None).output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        err.contains("prefill-0 exited (exit code 3) while the deployment was starting")
            && err.contains("prefill gives up"),
        "{err}"
    );
    let m = json(&latest(&dir.path().join("results"), "pd-early").join("manifest.json"));
    assert_eq!(m["deployments"][0]["status"], "failed", "{m:#}");
    assert!(gone(&mark), "a process outlived the run");
}
