//! Why achieved over ideal matters: two mock-server replicas with a prefix cache behind the
//! real sglang-router (regular mode, `--worker-urls`), the same shared-prefix workload sent
//! through it once with `round_robin` and once with `cache_aware` routing. The workload's
//! ideal hit rate is the same both times; round robin spreads each group's prompts over both
//! replicas, so each replica computes the group's prefix once, and achieved/ideal falls well
//! below 1; cache-aware routing keeps a prefix on the replica that holds it, near 1.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::pd::{free_port, workers};
use super::venv::{Routers, routers};
use crate::mock::client::*;

/// Replicas that hold every prompt of the run (1 ms steps, 16-token blocks, the shipped
/// tokenizer, as the client counts).
fn worker_args(tokenizer: &str) -> Vec<&str> {
    vec![
        "--preset",
        "fixed",
        "--itl-ms",
        "1",
        "--prefix-cache-tokens",
        "100000",
        "--block-size",
        "16",
        "--tokenizer",
        tokenizer,
    ]
}

/// 8 groups of 4 prompts sharing a 256-token system prompt, one request at a time.
const WORKLOAD: &[&str] = &[
    "--dataset-name",
    "generated-shared-prefix",
    "--gsp-num-groups",
    "8",
    "--gsp-prompts-per-group",
    "4",
    "--gsp-system-prompt-len",
    "256",
    "--gsp-question-len",
    "32",
    "--gsp-output-len",
    "2",
    "--num-prompts",
    "32",
    "--max-concurrency",
    "1",
    "--ignore-eos",
];

/// sglang-router in front of `urls` with `policy`; its output in `log`.
fn router(r: &Routers, policy: &str, urls: &[String], log: &Path) -> (Proc, SocketAddr) {
    let port = free_port();
    let mut cmd = Command::new(&r.python);
    cmd.args(["-m", "sglang_router.launch_router", "--worker-urls"])
        .args(urls)
        .args(["--policy", policy])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--prometheus-port", &free_port().to_string()]);
    let file = std::fs::File::create(log).unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn sglang-router: {e}"));
    let proc = Proc {
        name: format!("sglang-router {policy}"),
        child,
        stderr: Arc::new(Mutex::new(String::new())),
    };
    (proc, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// Poll the router's `/health` until it answers 200 (at most 60 s).
async fn wait_healthy(router: &mut Proc, addr: SocketAddr, log: &Path) {
    let t0 = Instant::now();
    loop {
        if let Some(status) = router.child.try_wait().unwrap() {
            panic!(
                "router exited with {status}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if tokio::net::TcpStream::connect(addr).await.is_ok()
            && call(addr, "GET", "/health", None).await.0 == 200
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the router never became healthy:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The workload through a fresh pair of replicas behind `policy`: the result JSON.
async fn through(r: &Routers, policy: &str, dir: &Path) -> Value {
    let tokenizer = crate::common::repo().join("data/tokenizer/tokenizer.json");
    let tokenizer = tokenizer.to_str().unwrap();
    let replicas = workers("none", 2, &worker_args(tokenizer));
    let urls: Vec<String> = replicas
        .iter()
        .map(|w| format!("http://{}", w.addr))
        .collect();
    let log = dir.join(format!("{policy}.log"));
    let (mut proc, addr) = router(r, policy, &urls, &log);
    wait_healthy(&mut proc, addr, &log).await;
    let (result, _, _) = crate::prefix_measured::bench(&format!("http://{addr}"), WORKLOAD).await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_aware_routing_gets_the_ideal_hit_rate_and_round_robin_does_not() {
    let Some(r) = routers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rr = through(&r, "round_robin", dir.path()).await;
    let ca = through(&r, "cache_aware", dir.path()).await;
    let get = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    // The same prompts in the same order: the same ideal (24 of 32 prompts find their
    // group's 256 tokens sent before).
    let ideal = get(&rr, "ideal_prefix_cache_hit_rate");
    assert_eq!(get(&ca, "ideal_prefix_cache_hit_rate"), ideal);
    assert!((0.6..0.75).contains(&ideal), "ideal {ideal}");
    let (rr_ratio, ca_ratio) = (
        get(&rr, "prefix_cache_hit_vs_ideal"),
        get(&ca, "prefix_cache_hit_vs_ideal"),
    );
    assert!(ca_ratio > 0.95, "cache_aware achieved/ideal {ca_ratio}");
    assert!(rr_ratio < 0.85, "round_robin achieved/ideal {rr_ratio}");
    assert!(
        ca_ratio > rr_ratio + 0.2,
        "cache_aware {ca_ratio} vs round_robin {rr_ratio}"
    );
}
