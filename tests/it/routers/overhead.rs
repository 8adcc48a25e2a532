//! The routers' added latency per request, measured (ignored by default; prints a table):
//! the same streamed completion through each router and by hand against the same 1P1D
//! mock workers (the router's protocol played by the test client), sequentially.
//!
//! `cargo test --test it router_added_latency -- --ignored --nocapture`

use std::net::SocketAddr;
use std::time::Instant;

use serde_json::{Value, json};

use super::pd::{Kind, router, wait_for_workers, workers};
use super::venv::routers;
use crate::mock::client::*;

const WARMUP: usize = 5;
const REQUESTS: usize = 50;
const WORKER_ARGS: &[&str] = &[
    "--preset",
    "fixed",
    "--itl-ms",
    "5",
    "--kv-transfer-ms-per-token",
    "0",
];

fn body() -> Value {
    json!({"model": "mock-model", "prompt": "a b c d e f g h i j", "max_tokens": 10,
           "ignore_eos": true, "stream": true})
}

/// One request as `kind`'s router would send it, by the test client; its e2e ms.
async fn by_hand(kind: Kind, p: SocketAddr, bootstrap: u16, d: SocketAddr, room: u64) -> f64 {
    let t0 = Instant::now();
    match kind {
        Kind::Sglang => {
            let mut b = body();
            b["bootstrap_host"] = json!("127.0.0.1");
            b["bootstrap_port"] = json!(bootstrap);
            b["bootstrap_room"] = json!(room);
            let (pr, dr) = tokio::join!(
                stream(p, "/v1/completions", b.clone()),
                stream(d, "/v1/completions", b.clone())
            );
            assert_eq!((pr.1, dr.1), (200, 200));
        }
        Kind::Vllm => {
            let mut b = body();
            b["max_tokens"] = json!(1);
            b["stream"] = json!(false);
            b["kv_transfer_params"] = json!({"do_remote_decode": true});
            let (status, answer) = call_json(p, "/v1/completions", &b).await;
            assert_eq!(status, 200, "{answer}");
            let mut b = body();
            b["kv_transfer_params"] = answer["kv_transfer_params"].clone();
            let (_, status, _) = stream(d, "/v1/completions", b).await;
            assert_eq!(status, 200);
        }
    }
    t0.elapsed().as_secs_f64() * 1000.0
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by hand, see the module doc"]
async fn router_added_latency() {
    let Some(r) = routers() else { return };
    let dir = tempfile::tempdir().unwrap();
    println!(
        "| router | direct p50 / p90 (ms) | via router p50 / p90 (ms) | added p50 (ms) | added mean (ms) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for kind in [Kind::Sglang, Kind::Vllm] {
        let prefill = workers("prefill", 1, WORKER_ARGS);
        let decode = workers("decode", 1, WORKER_ARGS);
        let log = dir.path().join(format!("{kind:?}.log"));
        let (mut proc, addr) = router(&r, kind, &prefill, &decode, &log);
        wait_for_workers(&mut proc, addr, 1, 1, &log).await;
        let (p, d) = (prefill[0].addr, decode[0].addr);
        let bootstrap = prefill[0].bootstrap.unwrap();
        let (mut direct, mut routed) = (Vec::new(), Vec::new());
        for i in 0..WARMUP + REQUESTS {
            let hand = by_hand(kind, p, bootstrap, d, i as u64).await;
            let t0 = Instant::now();
            let (_, status, events) = stream(addr, "/v1/completions", body()).await;
            let via = t0.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(status, 200);
            assert_eq!(chunk_words(&events).iter().sum::<usize>(), 10);
            if i >= WARMUP {
                direct.push(hand);
                routed.push(via);
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let added_mean = mean(&routed) - mean(&direct);
        let (d50, d90) = (quantile(&mut direct, 0.5), quantile(&mut direct, 0.9));
        let (r50, r90) = (quantile(&mut routed, 0.5), quantile(&mut routed, 0.9));
        println!(
            "| {kind:?} | {d50:.1} / {d90:.1} | {r50:.1} / {r90:.1} | {:.1} | {added_mean:.1} |",
            r50 - d50
        );
        drop(proc);
    }
}
