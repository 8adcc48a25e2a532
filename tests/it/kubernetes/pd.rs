//! 2P2D behind the real router on the test cluster (issue #28): the task of
//! `topology::a_2p2d_task_runs_through_the_sglang_router` with every role a pod of the mock
//! image. The router is sglang-router from the routers venv, run in a mock-image pod with the
//! host's /usr, /lib, /lib64, the venv and the Python it was made with as read-only hostPath
//! volumes (no registry, no image with Python in it). Its command gets the workers' pod IPs.
//!
//! Checks the topology (the router reports 2 + 2 before the load), every request completed
//! through the router, and no pod or Secret left; prints where the time from `run` to a ready
//! deployment went, and the teardown time (docs/performance.md records them).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::{cluster, deployment_ready, hosts_file, orchestrate, spawn, stderr};
use crate::common::{json, latest};
use crate::slurm::finish;
use crate::topology::{Checked, Router, Shape, assert_topology_run, routers_venv, task_file};

/// The keys of the deployment's instances in start order (workers, then the router).
const STARTED: [&str; 5] = ["prefill-0", "prefill-1", "decode-0", "decode-1", "router-0"];

/// Read-only hostPath volumes that let the mock image run the venv's Python: the host's
/// system directories, the venv, and the installation its `python` links to when that is
/// outside /usr (a pyenv build, say).
pub(super) fn python_volumes(venv: &Path) -> Vec<String> {
    let mut dirs: Vec<PathBuf> = ["/usr", "/lib", "/lib64"]
        .iter()
        .map(PathBuf::from)
        .filter(|d| d.exists())
        .collect();
    dirs.push(venv.to_path_buf());
    let python = std::fs::canonicalize(venv.join("bin/python")).unwrap();
    // <prefix>/bin/python3.x -> <prefix>
    let prefix = python
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    if !dirs.iter().any(|d| prefix.starts_with(d)) {
        dirs.push(prefix);
    }
    dirs.iter()
        .map(|d| format!("\"{0}:{0}:ro\"", d.display()))
        .collect()
}

/// The 2P2D task of the local topology tests, on cluster `k8s`: the mock image for every
/// role, `orchestrate` from the image's PATH, the router's Python mounted from the host.
fn pd_task(dir: &Path, venv: &Path, name: &str, marker: &str) -> PathBuf {
    let task = task_file(
        dir,
        venv,
        &Shape {
            name,
            router: Router::Sglang,
            marker,
            hosts: Some(["k8s", "k8s", "k8s"]),
            prefills: None,
            output_lens: &[8],
            num_prompts: 24,
            decode0: "",
            router_timeout: "60s",
            reach: None,
        },
    );
    let text = std::fs::read_to_string(&task).unwrap();
    let text = text
        .replace("{{ orchestrate }}", "orchestrate")
        .replacen(
            "backend: vllm\n",
            &format!("backend: vllm\nimage: {}\n", crate::docker::mock_image()),
            1,
        )
        .replacen(
            "  router:\n",
            &format!(
                "  router:\n    volumes: [{}]\n",
                python_volumes(venv).join(", ")
            ),
            1,
        );
    assert!(text.contains("    volumes: ["), "{text}");
    std::fs::write(&task, text).unwrap();
    task
}

/// `orchestrate run` of task `name` (file `task`) to its end: its output, when the test first
/// saw its deployment ready in the manifest (polled every 50 ms from the spawn; `None` when
/// the run ended first) and when it exited.
pub(super) fn timed_run(
    task: &Path,
    hosts: &Path,
    results: &Path,
    state: &Path,
    name: &str,
) -> (std::process::Output, Option<Duration>, SystemTime) {
    let spawned = Instant::now();
    let mut child = spawn(task, hosts, results, state);
    let mut observed_ready = None;
    while observed_ready.is_none() && child.try_wait().unwrap().is_none() {
        let m = std::fs::read_to_string(latest_manifest(results, name)).unwrap_or_default();
        if serde_json::from_str(&m).is_ok_and(|m| deployment_ready(&m)) {
            observed_ready = Some(spawned.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = finish(child, Duration::from_secs(400));
    (out, observed_ready, SystemTime::now())
}

/// The manifest of the latest run of `task` under `results` (not there yet: a path that is
/// not).
fn latest_manifest(results: &Path, task: &str) -> PathBuf {
    let link = results.join(task).join("latest");
    std::fs::read_link(&link).map_or(link.clone(), |run| {
        results.join(task).join(run).join("manifest.json")
    })
}

fn seconds(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("no {what} in the manifest"))
}

fn utc(v: &Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str().unwrap().parse().unwrap()
}

/// Where the time to a ready deployment went, per pod and along the critical path, and the
/// teardown time, as the manifest tells it (`observed_ready`: from spawning `run` until the
/// test saw the deployment ready in the manifest). Roles start one after the other; within a
/// role each pod is created once the one before it has an IP, then the role's pods are
/// probed together.
pub(super) fn print_timings(
    m: &Value,
    keys: &[String],
    observed_ready: Duration,
    exited: SystemTime,
) {
    let d = &m["deployments"][0];
    let at = |key: &str, field: &str| seconds(&d["instances"][key][field], field);
    // Per role (keys are `<role>-<index>`, in start order): the pods' waits for an IP, and
    // from the last IP until every pod of the role answered its probe.
    let (mut cluster, mut serving) = (0.0, 0.0);
    let mut role_span: Option<(String, f64, f64)> = None;
    eprintln!("pod        started_after_s  pod_ip_after_s  ready_after_s");
    for key in keys {
        let (start, ip, ready) = (
            at(key, "started_after_s"),
            at(key, "scheduled_in_s"),
            at(key, "ready_after_s"),
        );
        eprintln!("{key:<10} {start:>15.3} {:>15.3} {ready:>14.3}", start + ip);
        cluster += ip;
        let role = key
            .rsplit_once('-')
            .map_or(key.as_str(), |(r, _)| r)
            .to_string();
        role_span = match role_span {
            Some((r, last_ip, last_ready)) if r == role => {
                Some((r, last_ip.max(start + ip), last_ready.max(ready)))
            }
            other => {
                if let Some((_, last_ip, last_ready)) = other {
                    serving += last_ready - last_ip;
                }
                Some((role, start + ip, ready))
            }
        };
    }
    if let Some((_, last_ip, last_ready)) = role_span {
        serving += last_ready - last_ip;
    }
    let launched = cluster + serving;
    let ttr = seconds(&d["time_to_ready_s"], "time_to_ready_s");
    let checked = seconds(
        &d["instances"]["router-0"]["topology"][0]["checked_s"],
        "checked_s",
    );
    let last_point = m["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| utc(&p["ended_at"]))
        .max()
        .unwrap();
    let ended = utc(&m["ended_at"]);
    let teardown = (ended - last_point).as_seconds_f64();
    let exited: chrono::DateTime<chrono::Utc> = exited.into();
    eprintln!(
        "run -> deployment ready (seen by the test): {:.3} s\n\
         time_to_ready_s: {ttr:.3} s = pods created until they have an IP, one after the other {cluster:.3} s \
         + each role's last pod IP until all its servers answer their probes {serving:.3} s \
         + router reports its workers and one completion through it {checked:.3} s \
         + orchestrate between pods and around them {:.3} s\n\
         before the deployment's clock (process start, plan, connect, pre-flight, archive): {:.3} s\n\
         teardown (last point's end -> run's end): {teardown:.3} s; the process exited {:.3} s after the run's end",
        observed_ready.as_secs_f64(),
        ttr - launched - checked,
        observed_ready.as_secs_f64() - ttr,
        (exited - ended).as_seconds_f64(),
    );
}

#[test]
fn kubernetes_2p2d_runs_through_the_sglang_router_pod() {
    let Some(venv) = routers_venv() else { return };
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-pd";
    let work = tempfile::tempdir().unwrap();
    let mark = crate::ssh::marker(name);
    let task = pd_task(work.path(), &venv, name, &mark);
    let hosts = hosts_file(c, work.path(), "");
    let results = work.path().join("results");

    // The router's own `volumes` are its pod's alone: hostPath volumes, read-only.
    let plan = orchestrate(
        &hosts,
        &work.path().join("state"),
        &["plan", task.to_str().unwrap()],
    );
    let yaml = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.status.success(), "{}", stderr(&plan));
    assert_eq!(yaml.matches("kind: Pod").count(), 5, "{yaml}");
    assert_eq!(yaml.matches("mountPath: /usr\n").count(), 1, "{yaml}");
    assert!(
        yaml.contains(&format!("path: {}", venv.display())),
        "{yaml}"
    );

    let (out, observed_ready, exited) =
        timed_run(&task, &hosts, &results, &work.path().join("state"), name);

    // Readiness: the router pod reported both prefill and both decode pods, then every
    // request of the point went through it.
    let router = Checked {
        role: "router",
        via: "router",
        prefill: 2,
        decode: 2,
    };
    assert_topology_run(work.path(), name, &out, 24, &router);
    let run_dir = latest(&results, name);
    let m = json(&run_dir.join("manifest.json"));
    // The router's command named the workers by their pod IPs, never by a plan token.
    let log = std::fs::read_to_string(run_dir.join("logs/router-r0-n0.log")).unwrap();
    assert!(!log.contains("<k8s:"), "{log}");
    let ips: Vec<&str> = STARTED[..4]
        .iter()
        .map(|k| {
            m["deployments"][0]["instances"][k]["pod"]["ip"]
                .as_str()
                .unwrap()
        })
        .collect();
    let command = m["deployments"][0]["instances"]["router-0"]["argv"].to_string();
    for (key, ip) in STARTED.iter().zip(&ips) {
        assert!(
            command.contains(&format!("http://{ip}:")),
            "{key}: {command}"
        );
    }
    c.assert_clean(name, "teardown left objects");
    let observed_ready = observed_ready.expect("the test saw the deployment ready");
    let keys: Vec<String> = STARTED.iter().map(ToString::to_string).collect();
    print_timings(&m, &keys, observed_ready, exited);
    assert!(!stderr(&out).contains("<k8s:"), "{}", stderr(&out));
}
