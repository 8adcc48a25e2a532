//! The mock server's prefill/decode roles driven by hand, in both routers' wire protocols:
//! SGLang's (the same request with `bootstrap_*` to both workers) and vLLM's NIXL (prefill
//! with `kv_transfer_params.do_remote_decode`, then decode with the answer's params). The
//! decode worker's first token waits for the prefill and the KV transfer time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use orchestrate_mock::{self as mock, Curve, MockConfig, Role, Sockets};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::client::*;

/// An in-process PD worker; stops when dropped.
struct Worker {
    addr: SocketAddr,
    bootstrap: Option<SocketAddr>,
    cancel: CancellationToken,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn worker(mut config: MockConfig, role: Role) -> Worker {
    config.disaggregation.role = role;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = http.local_addr().unwrap();
    let (bootstrap, baddr) = if role == Role::Prefill {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        (Some(l), Some(a))
    } else {
        (None, None)
    };
    let cancel = CancellationToken::new();
    let sockets = Sockets {
        http,
        bootstrap,
        gang: None,
    };
    tokio::spawn(mock::serve_on(config, sockets, cancel.clone()));
    Worker {
        addr,
        bootstrap: baddr,
        cancel,
    }
}

/// Prefill: 5 ms steps plus 200 ms for any prompt. Decode: 5 ms steps, 1 ms of KV transfer
/// per prompt token.
async fn pair() -> (Worker, Worker) {
    let mut p = fast(5.0);
    p.latency.prefill = Curve::constant(200.0);
    let mut d = fast(5.0);
    d.disaggregation.kv_transfer_ms_per_token = 1.0;
    d.disaggregation.kv_wait_timeout = Duration::from_millis(300);
    (
        worker(p, Role::Prefill).await,
        worker(d, Role::Decode).await,
    )
}

fn words(n: usize) -> String {
    vec!["w"; n].join(" ")
}

async fn prompt_tokens_computed(addr: SocketAddr) -> f64 {
    let (_, body) = call(addr, "GET", "/metrics", None).await;
    metric(
        &String::from_utf8_lossy(&body),
        "vllm:prompt_tokens_total{model_name=\"mock-model\"}",
    )
}

fn first_token_ms(sent: Instant, events: &[Event]) -> f64 {
    let first = token_events(events)[0].at;
    (first - sent).as_secs_f64() * 1000.0
}

#[tokio::test]
async fn sglang_protocol_decode_waits_for_the_prefill_room_and_the_transfer() {
    let (p, d) = pair().await;
    let body = json!({
        "prompt": words(100), "max_tokens": 10, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true},
        "bootstrap_host": "127.0.0.1", "bootstrap_port": p.bootstrap.unwrap().port(),
        "bootstrap_room": 4242u64,
    });
    // As the router does: both at once; decode's stream is the answer.
    let (prefill, (sent, status, events)) = tokio::join!(
        stream(p.addr, "/v1/completions", body.clone()),
        stream(d.addr, "/v1/completions", body.clone()),
    );
    assert_eq!((prefill.1, status), (200, 200));
    assert_eq!(
        chunk_words(&prefill.2).iter().sum::<usize>(),
        1,
        "prefill answers 1 token"
    );
    assert_eq!(chunk_words(&events).iter().sum::<usize>(), 10);
    assert_eq!(usage_of(&events).unwrap()["prompt_tokens"], 100);
    // 205 ms prefill step + 100 ms transfer, then one 5 ms decode step.
    let ttft = first_token_ms(sent, &events);
    assert!(ttft >= 300.0, "decode TTFT {ttft:.0} ms");
    assert_eq!(
        prompt_tokens_computed(d.addr).await,
        1.0,
        "decode computes 1 token"
    );
    // The room was handed out: a second decode of the same room waits, then fails.
    let (status, v) = call_json(d.addr, "/v1/completions", &body).await;
    assert_eq!(status, 500, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no prefill for room s:4242"),
        "{v}"
    );
    // A prefill worker says where its bootstrap server is, as SGLang's /server_info does.
    let (_, info) = call(p.addr, "GET", "/server_info", None).await;
    let info: Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(info["disaggregation_mode"], "prefill");
    assert_eq!(
        info["disaggregation_bootstrap_port"],
        p.bootstrap.unwrap().port()
    );
}

#[tokio::test]
async fn nixl_protocol_prefill_returns_kv_transfer_params_that_decode_consumes() {
    let (p, d) = pair().await;
    let base = json!({"prompt": words(100), "max_tokens": 10, "ignore_eos": true});
    let mut first = base.clone();
    first["max_tokens"] = json!(1);
    first["kv_transfer_params"] = json!({"do_remote_decode": true, "do_remote_prefill": false,
        "remote_engine_id": null, "remote_block_ids": null, "remote_host": null, "remote_port": null});
    let t0 = Instant::now();
    let (status, answer) = call_json(p.addr, "/v1/completions", &first).await;
    let prefill_ms = t0.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(status, 200, "{answer}");
    assert!(prefill_ms >= 200.0, "prefill took {prefill_ms:.0} ms");
    let params = answer["kv_transfer_params"].clone();
    assert_eq!(params["do_remote_prefill"], true);
    assert_eq!(params["do_remote_decode"], false);
    assert_eq!(params["remote_host"], "127.0.0.1");
    assert_eq!(params["remote_port"], p.bootstrap.unwrap().port());
    assert_eq!(params["remote_request_id"], answer["id"]);
    assert_eq!(
        params["remote_block_ids"].as_array().unwrap().len(),
        7,
        "100 tokens / 16"
    );
    assert!(
        params["remote_engine_id"]
            .as_str()
            .unwrap()
            .starts_with("mock-")
    );
    let mut second = base.clone();
    second["stream"] = json!(true);
    second["kv_transfer_params"] = params;
    let (sent, status, events) = stream(d.addr, "/v1/completions", second.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(chunk_words(&events).iter().sum::<usize>(), 10);
    let ttft = first_token_ms(sent, &events);
    assert!(
        ttft >= 100.0,
        "decode TTFT {ttft:.0} ms: the 100 ms transfer comes first"
    );
    // The decode worker computed only the last prompt token; the prefill worker all 100.
    assert_eq!(prompt_tokens_computed(d.addr).await, 1.0);
    assert_eq!(prompt_tokens_computed(p.addr).await, 100.0);
    // Without handoff fields a decode worker serves the whole request (as vLLM does).
    let plain = json!({"prompt": words(100), "max_tokens": 2});
    assert_eq!(call_json(d.addr, "/v1/completions", &plain).await.0, 200);
    assert_eq!(prompt_tokens_computed(d.addr).await, 101.0);
    // The blocks were read once; an unreachable prefill fails the request with its address.
    let (status, v) = call_json(d.addr, "/v1/completions", &second).await;
    assert_eq!(status, 500, "{v}");
    second["kv_transfer_params"]["remote_port"] = json!(1);
    let (status, v) = call_json(d.addr, "/v1/completions", &second).await;
    assert_eq!(status, 500, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bootstrap server 127.0.0.1:1"),
        "{v}"
    );
}

#[tokio::test]
async fn cli_prefill_worker_prints_its_bootstrap_address() {
    let (_p, lines) = Proc::mock(
        "prefill",
        &[
            "--port",
            "0",
            "--preset",
            "fixed",
            "--disaggregation",
            "prefill",
            "--disaggregation-bootstrap-port",
            "0",
        ],
        2,
    );
    let http = addr_after(&lines[0], "listening on http://");
    let bootstrap = addr_after(&lines[1], "bootstrap on http://");
    let (status, _) = call(bootstrap, "GET", "/health", None).await;
    assert_eq!(status, 200);
    let (_, info) = call(http, "GET", "/server_info", None).await;
    let info: Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(info["disaggregation_bootstrap_port"], bootstrap.port());
}
