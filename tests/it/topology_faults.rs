//! Faults injected into a prefill/decode topology behind a real router (issue 29, item 5): a
//! seeded loop of three-point sweeps of the 2P2D task of `tests/it/topology.rs` (mock-server
//! workers, sglang-router or vllm-router from the routers venv), each hit once, at a random
//! moment of a random point, by SIGKILL to a prefill worker, a decode worker or the router.
//! After each: the points before it completed, the point in flight failed (never
//! `completed` after a server died), the points after it were not run (never started), the
//! failure is told once as a running deployment's, naming the killed process by role and
//! instance with its signal and what was kept, and no process of the run is left.
//!
//! `ORCHESTRATE_FAULT_SEED=N` replays the draws (the seed is printed first);
//! `ORCHESTRATE_TOPOLOGY_FAULT_ITERATIONS=N` changes the loop's length (default 4).

use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::ssh::marker;
use crate::topology::{
    Router, Shape, command, gone, latest_manifest, routers_venv, stderr, task_file,
};

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// The process group (leader) the run recorded for instance `key` (`decode-1`).
fn pgid(manifest: &Value, key: &str) -> Option<i32> {
    manifest["deployments"][0]["instances"][key]["pgid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
}

#[test]
fn pd_seeded_faults_fail_the_point_in_flight_with_the_first_cause() {
    let Some(venv) = routers_venv() else { return };
    let seed = env_number("ORCHESTRATE_FAULT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    });
    let iterations = env_number("ORCHESTRATE_TOPOLOGY_FAULT_ITERATIONS").unwrap_or(4);
    eprintln!("topology faults: ORCHESTRATE_FAULT_SEED={seed}, {iterations} iterations");
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..iterations {
        let (role, index) = match rng.random_range(0..3) {
            0 => ("prefill", rng.random_range(0..2u64)),
            1 => ("decode", rng.random_range(0..2u64)),
            _ => ("router", 0),
        };
        let router = if rng.random_bool(0.5) {
            Router::Sglang
        } else {
            Router::Vllm
        };
        let point = rng.random_range(0..3usize);
        let delay = Duration::from_millis(rng.random_range(200..1500));
        let label = format!(
            "seed {seed} iteration {i}: SIGKILL {role}-{index} {delay:?} into point {point}"
        );
        eprintln!("{label}");
        let dir = tempfile::tempdir().unwrap();
        let mark = marker("pdfault");
        // Points of 6 to 10 s: 80 requests of 30 to 50 tokens at 10 ms, four at a time.
        let task = task_file(
            dir.path(),
            &venv,
            &Shape {
                name: "pd-fault",
                router,
                marker: &mark,
                hosts: None,
                prefills: None,
                output_lens: &[30, 40, 50],
                num_prompts: 80,
                decode0: "",
                router_timeout: "60s",
                reach: None,
            },
        );
        let child = command(dir.path(), &task, None)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(90);
        let manifest = loop {
            assert!(
                Instant::now() < deadline,
                "{label}: the point never started"
            );
            if let Some(m) = latest_manifest(dir.path(), "pd-fault")
                && m["points"][point]["status"] == "running"
            {
                break m;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(delay);
        let key = format!("{role}-{index}");
        let pid = pgid(&manifest, &key)
            .unwrap_or_else(|| panic!("{label}: no process group of {key}: {manifest:#}"));
        // SAFETY: a plain signal to a process this test's run started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{label}: {err}");
        let m = latest_manifest(dir.path(), "pd-fault").unwrap();
        let points = m["points"].as_array().unwrap();
        for (k, p) in points.iter().enumerate() {
            let want = match k.cmp(&point) {
                std::cmp::Ordering::Less => "completed",
                std::cmp::Ordering::Equal => "failed",
                std::cmp::Ordering::Greater => "skipped",
            };
            assert_eq!(p["status"], want, "{label}: point {k}: {p}");
            if k > point {
                assert!(
                    p["started_at"].is_null(),
                    "{label}: point {k} was started: {p}"
                );
            }
        }
        let cause = format!("{role}-{index} exited (signal 9) during point ");
        let error = m["deployments"][0]["error"].as_str().unwrap_or_default();
        assert!(error.starts_with(&cause), "{label}: {error}");
        assert_eq!(err.matches("[d1] failed").count(), 1, "{label}: {err}");
        assert!(!err.contains("failed to start"), "{label}: {err}");
        assert!(
            err.contains(&format!(
                "[d1] failed ({point} completed point(s) kept, {} not run): {cause}",
                2 - point
            )),
            "{label}: {err}"
        );
        assert!(
            gone(&mark),
            "{label}: a worker or the router outlived the run"
        );
    }
}
