//! Two prefill and two decode mock-server processes behind each real router: the router
//! lists them, streams pass through with the right token counts, every request reaches one
//! prefill and one decode worker, and the first token waits for prefill + KV transfer.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::venv::{Routers, routers};
use crate::mock::client::*;

/// Prefill workers: 5 ms steps + 100 ms for any prompt in the step.
const PREFILL_ARGS: &[&str] = &["--preset", "fixed", "--itl-ms", "5", "--prefill-ms", "100"];
/// Decode workers: 5 ms steps, 0.5 ms of KV transfer per prompt token.
const DECODE_ARGS: &[&str] = &[
    "--preset",
    "fixed",
    "--itl-ms",
    "5",
    "--kv-transfer-ms-per-token",
    "0.5",
];
const PROMPT_WORDS: usize = 200;
const OUTPUT_TOKENS: usize = 20;
const REQUESTS: usize = 8;

pub(crate) struct Worker {
    /// Keeps the process alive; killed on drop.
    pub _proc: Proc,
    pub addr: SocketAddr,
    pub bootstrap: Option<u16>,
}

/// `n` mock workers of `role` on auto ports.
pub(crate) fn workers(role: &str, n: usize, extra: &[&str]) -> Vec<Worker> {
    (0..n)
        .map(|i| {
            let mut args = vec![
                "--port",
                "0",
                "--model",
                "mock-model",
                "--disaggregation",
                role,
            ];
            if role == "prefill" {
                args.extend(["--disaggregation-bootstrap-port", "0"]);
            }
            args.extend(extra);
            let lines = if role == "prefill" { 2 } else { 1 };
            let (proc, first) = Proc::mock(&format!("{role} {i}"), &args, lines);
            Worker {
                _proc: proc,
                addr: addr_after(&first[0], "listening on http://"),
                bootstrap: (role == "prefill")
                    .then(|| addr_after(&first[1], "bootstrap on http://").port()),
            }
        })
        .collect()
}

/// A port free right now (the routers take no port 0).
/// A free port for a router's side listener (e.g. its Prometheus port), as `port: auto` picks
/// one: below the ephemeral range (the kernel's `:0` pick can be taken by any outgoing
/// connection before the router binds it) and claimed against other test processes.
pub(crate) fn free_port() -> u16 {
    orchestrate::plan::PlanContext::new().free_port().unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Sglang,
    Vllm,
}

/// Start `kind`'s router in front of the workers, its stdout and stderr in `log`.
pub(crate) fn router(
    r: &Routers,
    kind: Kind,
    prefill: &[Worker],
    decode: &[Worker],
    log: &Path,
) -> (Proc, SocketAddr) {
    let port = free_port();
    let mut cmd = match kind {
        Kind::Sglang => {
            let mut c = Command::new(&r.python);
            c.args(["-m", "sglang_router.launch_router", "--pd-disaggregation"]);
            c
        }
        Kind::Vllm => {
            let mut c = Command::new(&r.vllm_router);
            c.arg("--vllm-pd-disaggregation");
            c
        }
    };
    for p in prefill {
        cmd.args(["--prefill", &format!("http://{}", p.addr)]);
        if kind == Kind::Sglang {
            cmd.arg(p.bootstrap.unwrap().to_string());
        }
    }
    for d in decode {
        cmd.args(["--decode", &format!("http://{}", d.addr)]);
    }
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--prometheus-port", &free_port().to_string()])
        .args([
            "--prefill-policy",
            "round_robin",
            "--decode-policy",
            "round_robin",
        ]);
    let file = std::fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {kind:?} router: {e}"));
    let proc = Proc {
        name: format!("{kind:?} router"),
        child,
        stderr: Arc::new(Mutex::new(String::new())),
    };
    (proc, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Poll `GET /workers` until `stats` reports the counts (at most 60 s); the last answer.
pub(crate) async fn wait_for_workers(
    router: &mut Proc,
    addr: SocketAddr,
    prefill: u64,
    decode: u64,
    log: &Path,
) -> Value {
    let t0 = Instant::now();
    loop {
        if let Some(status) = router.child.try_wait().unwrap() {
            panic!("router exited with {status}:\n{}", log_text(log));
        }
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await
        {
            drop(s);
            let (status, body) = call(addr, "GET", "/workers", None).await;
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let stats = &v["stats"];
            if status == 200
                && stats["prefill_count"].as_u64() == Some(prefill)
                && stats["decode_count"].as_u64() == Some(decode)
            {
                return v;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "router never reported {prefill} prefill / {decode} decode workers:\n{}",
            log_text(log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn words(n: usize) -> String {
    vec!["w"; n].join(" ")
}

/// A counter of a worker's `/metrics` (`vllm:NAME_total{model_name="mock-model"}`).
async fn counter(addr: SocketAddr, name: &str) -> f64 {
    let (_, body) = call(addr, "GET", "/metrics", None).await;
    metric(
        &String::from_utf8_lossy(&body),
        &format!("vllm:{name}_total{{model_name=\"mock-model\"}}"),
    )
}

/// `name` of each worker.
async fn counters(workers: &[Worker], name: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for w in workers {
        out.push(counter(w.addr, name).await);
    }
    out
}

/// 2P2D behind `kind`'s router, `REQUESTS` streamed completions, all checks.
async fn two_p_two_d(kind: Kind) {
    let Some(r) = routers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("router.log");
    let prefill = workers("prefill", 2, PREFILL_ARGS);
    let decode = workers("decode", 2, DECODE_ARGS);
    let (mut proc, addr) = router(&r, kind, &prefill, &decode, &log);
    let listed = wait_for_workers(&mut proc, addr, 2, 2, &log).await;
    assert_eq!(listed["workers"].as_array().unwrap().len(), 4, "{listed}");
    let body = json!({
        "model": "mock-model", "prompt": words(PROMPT_WORDS), "max_tokens": OUTPUT_TOKENS,
        "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true},
    });
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        let body = body.clone();
        set.spawn(async move { stream(addr, "/v1/completions", body).await });
    }
    let mut ttfts = Vec::new();
    while let Some(done) = set.join_next().await {
        let (sent, status, events) = done.unwrap();
        assert_eq!(status, 200, "{events:?}\n{}", log_text(&log));
        assert_eq!(
            chunk_words(&events).iter().sum::<usize>(),
            OUTPUT_TOKENS,
            "{events:?}"
        );
        let usage = usage_of(&events).unwrap_or_else(|| panic!("no usage chunk: {events:?}"));
        assert_eq!(usage["completion_tokens"], OUTPUT_TOKENS);
        assert_eq!(usage["prompt_tokens"], PROMPT_WORDS);
        ttfts.push((token_events(&events)[0].at - sent).as_secs_f64() * 1000.0);
    }
    // Prefill step 105 ms, then 200 x 0.5 ms of transfer, before the decode's first step.
    let min = ttfts.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        min >= 205.0,
        "{kind:?}: first token after {min:.0} ms, before prefill + transfer: {ttfts:?}"
    );
    // Every request went through exactly one prefill (1 token) and one decode worker, and
    // round robin used all four.
    let p = counters(&prefill, "generation_tokens").await;
    let d = counters(&decode, "generation_tokens").await;
    assert_eq!(
        p.iter().sum::<f64>(),
        REQUESTS as f64,
        "prefill tokens {p:?}"
    );
    assert_eq!(
        d.iter().sum::<f64>(),
        (REQUESTS * OUTPUT_TOKENS) as f64,
        "decode tokens {d:?}"
    );
    assert!(
        p.iter().chain(&d).all(|&n| n > 0.0),
        "round robin skipped a worker: {p:?} {d:?}"
    );
    let text = log_text(&log);
    if kind == Kind::Vllm {
        assert!(
            !text.to_lowercase().contains("no kv_transfer_params"),
            "{text}"
        );
    }
    drop(proc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_router_2p2d_over_mock_workers() {
    two_p_two_d(Kind::Sglang).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_router_2p2d_over_mock_workers() {
    two_p_two_d(Kind::Vllm).await;
}
