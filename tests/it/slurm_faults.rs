//! Faults injected into Slurm sweeps (issue 29, item 5), on the test cluster of
//! `tests/it/slurm.rs`: a seeded loop of three-point sweeps of two mock-server replicas, each
//! hit once, at a random moment of a random point, by `scancel` of the allocation from
//! outside or by SIGKILL to one replica's server (a worker of the deployment). After each:
//! the points before it completed, the point in flight failed (never `completed` after its
//! servers died), the points after it were not run (never started), and the failure is told
//! once, naming its first cause (Slurm's `JobState=CANCELLED`, or the killed replica and its
//! signal) as a running deployment's, with what was kept.
//!
//! `ORCHESTRATE_FAULT_SEED=N` replays the draws (the seed is printed first);
//! `ORCHESTRATE_SLURM_FAULT_ITERATIONS=N` changes the loop's length (default 4).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{json, latest};
use crate::slurm::{cluster, finish, job_id, run, wait_manifest, work};

/// The fault of one iteration.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `scancel` of the deployment's job, as an operator or a preemption would.
    Scancel,
    /// SIGKILL to the server of replica `r`.
    KillWorker(usize),
}

/// The server process of the instance on `port` (its command line starts with the server's,
/// which names the port; `srun` and the step's shell only carry it as an argument).
fn server_pid(port: u64) -> Option<i32> {
    let out = std::process::Command::new("pgrep")
        .args([
            "-f",
            &format!("^[^ ]*orchestrate mock-server --port {port} "),
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next()
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn slurm_seeded_faults_fail_the_point_in_flight_with_the_first_cause() {
    let Some((c, _turn)) = cluster() else { return };
    let seed = env_number("ORCHESTRATE_FAULT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    });
    let iterations = env_number("ORCHESTRATE_SLURM_FAULT_ITERATIONS").unwrap_or(4);
    eprintln!("slurm faults: ORCHESTRATE_FAULT_SEED={seed}, {iterations} iterations");
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..iterations {
        let fault = if rng.random_bool(0.5) {
            Fault::Scancel
        } else {
            Fault::KillWorker(rng.random_range(0..2))
        };
        let point = rng.random_range(0..3usize);
        let delay = Duration::from_millis(rng.random_range(300..2500));
        eprintln!("iteration {i}: {fault:?} {delay:?} into point {point}");
        // Points of about 8 s (16 requests of 1 s, two at a time): the fault lands in one.
        let (work, task, hosts) = work(
            "slurm-fault",
            "gpu",
            20,
            "  dataset: {kind: random, input_len: 16, output_len: 50}\n  num_prompts: 16\n  concurrency: 2\n  matrix:\n    request_rate: [inf, 100, 50]\n",
        );
        let results = work.path().join("results");
        let state = work.path().join("state");
        let mut child = run(c, &task, &hosts, &results, &state);
        let manifest = wait_manifest(&results, "slurm-fault", &mut child, |m| {
            m["points"][point]["status"] == "running"
        });
        std::thread::sleep(delay);
        let job = job_id(&manifest);
        match fault {
            Fault::Scancel => {
                c.slurm(&["scancel", &job]);
            }
            Fault::KillWorker(r) => {
                let port =
                    manifest["resolved"]["deployments"]["d1"]["roles"][0]["instances"][r]["port"]
                        .as_u64()
                        .unwrap_or_else(|| panic!("no port of replica {r}: {manifest:#}"));
                let pid = server_pid(port).unwrap_or_else(|| panic!("no server on port {port}"));
                // SAFETY: a plain signal to a server this test's run started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let out = finish(child, Duration::from_secs(90));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let label = format!("seed {seed} iteration {i} ({fault:?} in point {point})");
        assert_eq!(out.status.code(), Some(1), "{label}: {stderr}");
        let manifest = json(&latest(&results, "slurm-fault").join("manifest.json"));
        let points = manifest["points"].as_array().unwrap();
        for (k, p) in points.iter().enumerate() {
            let status = p["status"].as_str().unwrap_or_default();
            let want = match k.cmp(&point) {
                std::cmp::Ordering::Less => "completed",
                std::cmp::Ordering::Equal => "failed",
                std::cmp::Ordering::Greater => "skipped",
            };
            assert_eq!(status, want, "{label}: point {k}: {p}");
            if k > point {
                assert!(
                    p["started_at"].is_null(),
                    "{label}: point {k} was started: {p}"
                );
                let error = p["error"].as_str().unwrap_or_default();
                assert!(
                    error.starts_with("not run: deployment d1 failed: "),
                    "{label}: {p}"
                );
            }
        }
        let error = manifest["deployments"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let cause = match fault {
            Fault::Scancel => format!("slurm job {job} ended: JobState=CANCELLED"),
            Fault::KillWorker(r) => format!("server-{r} exited ("),
        };
        assert!(error.starts_with(&cause), "{label}: {error}");
        assert!(
            error.contains(&format!(
                "during point {}",
                points[point]["id"].as_str().unwrap_or_default()
            )),
            "{label}: {error}"
        );
        assert_eq!(
            stderr.matches("[d1] failed").count(),
            1,
            "{label}: {stderr}"
        );
        assert!(!stderr.contains("failed to start"), "{label}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "[d1] failed ({point} completed point(s) kept, {} not run): {cause}",
                2 - point
            )),
            "{label}: {stderr}"
        );
        assert!(c.wait_gone(&job), "{label}: job {job} left behind");
    }
}
