//! The mock inference server end to end: `orchestrate::mock::serve` on port 0 driven by a
//! minimal hyper client (OpenAI protocol, SSE framing, usage, lengths, chunking, metrics,
//! startup delay, error injection, crash, ground-truth log, wall-clock latency behaviour),
//! and the `orchestrate mock-server` binary (listening line, signals, exit codes).
//! Precise latency-curve checks live in the virtual-clock unit tests (src/mock/simulate.rs).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use orchestrate::mock::{self, Curve, MockConfig, MockError, Preset, TokenCounter};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

struct Server {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), MockError>>,
}

impl Server {
    async fn start(config: MockConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(mock::serve(config, listener, cancel.clone()));
        Self { addr, cancel, task }
    }

    async fn stop(self) -> Result<(), MockError> {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("serve stops within 10 s")
            .unwrap()
    }
}

/// A fast fixed-step server: `step_ms` per step whatever the batch, no prefill cost.
fn fast(step_ms: f64) -> MockConfig {
    let mut c = MockConfig::new(Preset::Fixed);
    c.latency.decode = Curve::constant(step_ms);
    c
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Sender {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

fn build(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Request<Full<Bytes>> {
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("x-request-id", "client-42")
        .body(Full::new(body))
        .unwrap()
}

/// One request; the whole body.
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Bytes) {
    let mut s = connect(addr).await;
    let resp = s
        .send_request(build(addr, method, path, body))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

async fn call_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (status, bytes) = call(addr, "POST", path, Some(body)).await;
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// An SSE event as the client saw it: arrival time and payload (`None` for `[DONE]`).
#[derive(Debug)]
struct Event {
    at: Instant,
    data: Option<Value>,
}

/// A streaming request: (sent time, status, events in order).
async fn stream(addr: SocketAddr, path: &'static str, body: Value) -> (Instant, u16, Vec<Event>) {
    let mut s = connect(addr).await;
    let sent = Instant::now();
    let resp = s
        .send_request(build(addr, "POST", path, Some(&body)))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        let at = Instant::now();
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buf.extend_from_slice(data);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let text = std::str::from_utf8(&event).unwrap().trim_end();
            let payload = text.strip_prefix("data: ").expect("SSE data line");
            let data = (payload != "[DONE]").then(|| serde_json::from_str(payload).unwrap());
            events.push(Event { at, data });
        }
    }
    assert!(buf.is_empty(), "trailing bytes: {buf:?}");
    (sent, status, events)
}

fn usage_of(events: &[Event]) -> Option<&Value> {
    events
        .iter()
        .filter_map(|e| e.data.as_ref())
        .find(|d| d["choices"].as_array().is_some_and(Vec::is_empty))
        .map(|d| &d["usage"])
}

/// Token-bearing events (non-empty choices with text or content).
fn token_events(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| {
            e.data.as_ref().is_some_and(|d| {
                let c = &d["choices"][0];
                c["text"].as_str().is_some_and(|t| !t.is_empty())
                    || c["delta"]["content"]
                        .as_str()
                        .is_some_and(|t| !t.is_empty())
            })
        })
        .collect()
}

fn text_of(events: &[Event]) -> String {
    token_events(events)
        .iter()
        .map(|e| {
            let c = &e.data.as_ref().unwrap()["choices"][0];
            c["text"]
                .as_str()
                .or(c["delta"]["content"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn completions_stream_and_whole() {
    let server = Server::start(fast(2.0)).await;
    let a = server.addr;
    let (status, v) = call_json(
        a,
        "/v1/completions",
        &json!({"model": "mock-model", "prompt": "one two three four", "max_tokens": 7, "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 4, "total_tokens": 11, "completion_tokens": 7})
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        v["choices"][0]["text"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count(),
        7
    );

    let body = json!({"prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": true, "stream": true,
                      "stream_options": {"include_usage": true}});
    let (_, status, events) = stream(a, "/v1/completions", body.clone()).await;
    assert_eq!(status, 200);
    assert!(events.last().unwrap().data.is_none(), "ends with [DONE]");
    let tokens = token_events(&events);
    assert_eq!(tokens.len(), 5, "one token per chunk: {events:?}");
    let last = tokens.last().unwrap().data.as_ref().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(
        tokens[..4]
            .iter()
            .all(|e| e.data.as_ref().unwrap()["choices"][0]["finish_reason"].is_null())
    );
    assert_eq!(
        usage_of(&events).unwrap(),
        &json!({"prompt_tokens": 3, "total_tokens": 8, "completion_tokens": 5})
    );
    assert_eq!(text_of(&events).split_whitespace().count(), 5);

    // Without include_usage: no usage chunk.
    let body = json!({"prompt": "x", "max_tokens": 3, "ignore_eos": true, "stream": true});
    let (_, _, events) = stream(a, "/v1/completions", body.clone()).await;
    assert!(usage_of(&events).is_none());
    assert_eq!(token_events(&events).len(), 3);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn chat_streams_role_first_then_content_with_usage() {
    let server = Server::start(fast(2.0)).await;
    let body = json!({"model": "mock-model", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "say three words"}]}],
        "max_completion_tokens": 4, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let (_, status, events) = stream(server.addr, "/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 200);
    let first = events[0].data.as_ref().unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let tokens = token_events(&events);
    assert_eq!(tokens.len(), 4);
    for (i, e) in tokens.iter().enumerate() {
        let d = e.data.as_ref().unwrap();
        assert_eq!(
            d["usage"]["completion_tokens"],
            i + 1,
            "continuous usage: {d}"
        );
    }
    assert_eq!(
        usage_of(&events).unwrap(),
        &json!({"prompt_tokens": 5, "total_tokens": 9, "completion_tokens": 4})
    );
    let (status, v) = call_json(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["completion_tokens"], 2);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn lengths_follow_max_min_tokens_and_ignore_eos() {
    let server = Server::start(fast(1.0)).await;
    let mut lengths = Vec::new();
    for i in 0..12 {
        // Alternate the vLLM and SGLang spellings of the minimum.
        let key = if i % 2 == 0 {
            "min_tokens"
        } else {
            "min_new_tokens"
        };
        let (status, v) = call_json(
            server.addr,
            "/v1/completions",
            &json!({"prompt": "p", "max_tokens": 30, key: 20}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let n = v["usage"]["completion_tokens"].as_u64().unwrap();
        let reason = v["choices"][0]["finish_reason"].as_str().unwrap();
        assert_eq!(reason, if n == 30 { "length" } else { "stop" });
        lengths.push(n);
    }
    assert!(lengths.iter().all(|n| (20..=30).contains(n)), "{lengths:?}");
    assert!(
        lengths.iter().any(|&n| n < 30),
        "an EOS before max_tokens: {lengths:?}"
    );
    let (_, v) = call_json(server.addr, "/v1/completions", &json!({"prompt": "p"})).await;
    assert!(
        v["usage"]["completion_tokens"].as_u64().unwrap() <= 16,
        "default max_tokens 16"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn tokens_per_chunk_groups_tokens_after_the_first() {
    let mut config = fast(2.0);
    config.tokens_per_chunk = 4;
    let server = Server::start(config).await;
    let body = json!({"prompt": "p", "max_tokens": 10, "ignore_eos": true, "stream": true,
                      "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let (_, _, events) = stream(server.addr, "/v1/completions", body.clone()).await;
    let counts: Vec<u64> = token_events(&events)
        .iter()
        .map(|e| {
            e.data.as_ref().unwrap()["usage"]["completion_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(counts, vec![1, 5, 9, 10]);
    let words: Vec<usize> = token_events(&events)
        .iter()
        .map(|e| {
            e.data.as_ref().unwrap()["choices"][0]["text"]
                .as_str()
                .unwrap()
                .split_whitespace()
                .count()
        })
        .collect();
    assert_eq!(words, vec![1, 4, 4, 1]);
    server.stop().await.unwrap();
}

fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name_and_labels} in\n{text}"))
}

#[tokio::test]
async fn metrics_use_vllm_names_and_move() {
    let server = Server::start(fast(2.0)).await;
    let a = server.addr;
    let (status, before) = call(a, "GET", "/metrics", None).await;
    assert_eq!(status, 200);
    let before = String::from_utf8(before.to_vec()).unwrap();
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
    ] {
        assert!(before.contains(name), "{name} missing");
    }
    let l = "{model_name=\"mock-model\"}";
    assert_eq!(
        metric(&before, &format!("vllm:prompt_tokens_total{l}")),
        0.0
    );
    // A long request keeps running while we look.
    let long = tokio::spawn(stream(
        a,
        "/v1/completions",
        json!({"prompt": "a b c", "max_tokens": 100, "ignore_eos": true, "stream": true}),
    ));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let (_, during) = call(a, "GET", "/metrics", None).await;
    let during = String::from_utf8(during.to_vec()).unwrap();
    assert_eq!(
        metric(&during, &format!("vllm:num_requests_running{l}")),
        1.0
    );
    long.await.unwrap();
    let (_, after) = call(a, "GET", "/metrics", None).await;
    let after = String::from_utf8(after.to_vec()).unwrap();
    assert_eq!(metric(&after, &format!("vllm:prompt_tokens_total{l}")), 3.0);
    assert_eq!(
        metric(&after, &format!("vllm:generation_tokens_total{l}")),
        100.0
    );
    assert_eq!(
        metric(&after, &format!("vllm:num_requests_running{l}")),
        0.0
    );
    assert_eq!(
        metric(
            &after,
            "vllm:request_success_total{finished_reason=\"length\",model_name=\"mock-model\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &after,
            &format!("vllm:time_to_first_token_seconds_count{l}")
        ),
        1.0
    );
    assert_eq!(
        metric(
            &after,
            &format!("vllm:inter_token_latency_seconds_count{l}")
        ),
        99.0
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn health_is_503_until_the_startup_delay_passes() {
    let mut config = fast(2.0);
    config.startup_delay = Duration::from_millis(300);
    let t0 = Instant::now();
    let server = Server::start(config).await;
    let (status, _) = call(server.addr, "GET", "/health", None).await;
    assert_eq!(status, 503);
    let (status, body) = call(
        server.addr,
        "POST",
        "/v1/completions",
        Some(&json!({"prompt": "x"})),
    )
    .await;
    assert_eq!(status, 503, "{body:?}");
    let healthy = loop {
        let (status, _) = call(server.addr, "GET", "/health", None).await;
        if status == 200 {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "never became healthy"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(healthy >= Duration::from_millis(300), "{healthy:?}");
    let (status, v) = call(server.addr, "GET", "/v1/models", None).await;
    let v: Value = serde_json::from_slice(&v).unwrap();
    assert_eq!(status, 200);
    assert_eq!(v["data"][0]["id"], "mock-model");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn error_rate_answers_some_requests_with_500() {
    let mut config = fast(1.0);
    config.error_rate = 0.5;
    config.seed = 11;
    let server = Server::start(config).await;
    let (mut ok, mut failed) = (0, 0);
    for _ in 0..40 {
        let (status, v) = call_json(
            server.addr,
            "/v1/completions",
            &json!({"prompt": "x", "max_tokens": 1}),
        )
        .await;
        match status {
            200 => ok += 1,
            500 => {
                assert_eq!(v["error"]["type"], "InternalServerError", "{v}");
                assert_eq!(v["error"]["code"], 500);
                failed += 1;
            }
            s => panic!("status {s}: {v}"),
        }
    }
    assert!(
        (8..=32).contains(&failed) && ok + failed == 40,
        "{ok} ok, {failed} failed"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn bad_requests_get_openai_errors() {
    let server = Server::start(fast(1.0)).await;
    let a = server.addr;
    let (status, v) = call_json(
        a,
        "/v1/completions",
        &json!({"model": "gpt-9", "prompt": "x"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["type"].as_str()),
        (404, Some("NotFoundError"))
    );
    let (status, v) = call_json(
        a,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 5, "min_tokens": 9}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    let (status, _) = call(a, "GET", "/v1/nothing", None).await;
    assert_eq!(status, 404);
    let (status, _) = call(a, "GET", "/v1/completions", None).await;
    assert_eq!(status, 405);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn crash_after_n_requests_stops_serve_with_an_error() {
    let mut config = fast(1.0);
    config.crash_after = Some(2);
    let server = Server::start(config).await;
    for _ in 0..2 {
        let (status, _) = call_json(
            server.addr,
            "/v1/completions",
            &json!({"prompt": "x", "max_tokens": 2}),
        )
        .await;
        assert_eq!(status, 200);
    }
    let mut s = connect(server.addr).await;
    let third = s
        .send_request(build(
            server.addr,
            "POST",
            "/v1/completions",
            Some(&json!({"prompt": "x"})),
        ))
        .await;
    assert!(third.is_err(), "the connection is cut, no response");
    let err = tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            MockError::Crashed {
                crash_after: 2,
                request: 3
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn ground_truth_log_records_every_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truth.jsonl");
    let mut config = fast(10.0);
    config.ground_truth = Some(path.clone());
    config.tokens_per_chunk = 2;
    let server = Server::start(config).await;
    let body = json!({"messages": [{"role": "user", "content": "a b"}], "max_tokens": 7,
                      "ignore_eos": true, "stream": true});
    let (sent, _, events) = stream(server.addr, "/v1/chat/completions", body.clone()).await;
    let client_tokens: Vec<Instant> = token_events(&events).iter().map(|e| e.at).collect();
    let (status, _) = call_json(
        server.addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 3}),
    )
    .await;
    assert_eq!(status, 200);
    server.stop().await.unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let chat = lines.iter().find(|l| l["endpoint"] == "chat").unwrap();
    assert_eq!(chat["id"], events[0].data.as_ref().unwrap()["id"]);
    assert_eq!(chat["x_request_id"], "client-42");
    assert_eq!(
        (chat["status"].as_str(), chat["stream"].as_bool()),
        (Some("ok"), Some(true))
    );
    assert_eq!(chat["prompt_tokens"], 2);
    assert_eq!(chat["completion_tokens"], 7);
    let chunks: Vec<(u64, u64)> = chat["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c[0].as_u64().unwrap(), c[1].as_u64().unwrap()))
        .collect();
    assert_eq!(
        chunks.iter().map(|c| c.1).collect::<Vec<_>>(),
        vec![1, 2, 2, 2]
    );
    assert_eq!(chunks.len(), client_tokens.len());
    let arrival = chat["arrival_ns"].as_u64().unwrap();
    let role = chat["role_ns"].as_u64().unwrap();
    let end = chat["end_ns"].as_u64().unwrap();
    assert!(arrival <= role && role <= chunks[0].0 && chunks.last().unwrap().0 <= end);
    assert!(chunks.windows(2).all(|w| w[0].0 <= w[1].0));
    // The log's gaps agree with what this client saw (10 ms steps, 2 tokens a chunk).
    for (i, w) in chunks.windows(2).enumerate() {
        let server_gap = (w[1].0 - w[0].0) as f64 / 1e6;
        let client_gap = (client_tokens[i + 1] - client_tokens[i]).as_secs_f64() * 1e3;
        assert!(
            (server_gap - client_gap).abs() < 15.0,
            "chunk {i}: {server_gap} vs {client_gap} ms"
        );
    }
    // Client-side TTFT is at least the server-side one.
    let server_ttft = (chunks[0].0 - arrival) as f64 / 1e6;
    let client_ttft = (client_tokens[0] - sent).as_secs_f64() * 1e3;
    assert!(
        client_ttft + 1.0 >= server_ttft,
        "{client_ttft} vs {server_ttft}"
    );
    let whole = lines
        .iter()
        .find(|l| l["endpoint"] == "completions")
        .unwrap();
    assert_eq!(whole["stream"], false);
    assert_eq!(whole["chunks"].as_array().unwrap().len(), 1);
    assert_eq!(whole["chunks"][0][1], whole["completion_tokens"]);
}

#[tokio::test]
async fn hf_tokenizer_counts_prompts_and_serves_tokenize() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, ",": 2, "world": 3},
                  "unk_token": "[UNK]"}
    });
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let mut config = fast(1.0);
    config.tokenizer = TokenCounter::from_file(&path).unwrap();
    let server = Server::start(config).await;
    let (status, v) = call_json(server.addr, "/tokenize", &json!({"prompt": "hello, world"})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["tokens"], json!([1, 2, 3]));
    assert_eq!(v["count"], 3);
    let (_, v) = call_json(
        server.addr,
        "/v1/completions",
        &json!({"prompt": "hello, world", "max_tokens": 1}),
    )
    .await;
    assert_eq!(
        v["usage"]["prompt_tokens"], 3,
        "the tokenizer, not whitespace (2 words)"
    );
    server.stop().await.unwrap();
}

/// Mean gap between token chunks of one streamed request.
fn mean_itl_ms(events: &[Event]) -> f64 {
    let t = token_events(events);
    (t.last().unwrap().at - t[0].at).as_secs_f64() * 1e3 / (t.len() - 1) as f64
}

#[tokio::test]
async fn more_running_streams_make_every_token_slower() {
    let mut config = MockConfig::new(Preset::Fixed);
    // 4 ms alone, 4 + 0.5 ms per extra sequence: 19.5 ms with 32 streams.
    config.latency.decode = Curve::linear(3.5, 0.5);
    let server = Server::start(config).await;
    let body = json!({"prompt": "p", "max_tokens": 20, "ignore_eos": true, "stream": true});
    let (_, _, alone) = stream(server.addr, "/v1/completions", body.clone()).await;
    let crowd: Vec<_> = (0..32)
        .map(|_| tokio::spawn(stream(server.addr, "/v1/completions", body.clone())))
        .collect();
    let mut crowded = Vec::new();
    for h in crowd {
        crowded.push(mean_itl_ms(&h.await.unwrap().2));
    }
    let crowded = crowded.iter().sum::<f64>() / crowded.len() as f64;
    let alone = mean_itl_ms(&alone);
    assert!(alone < 10.0, "alone {alone} ms");
    assert!(
        crowded > alone * 2.0,
        "32 streams {crowded} ms vs alone {alone} ms"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn requests_over_max_batch_queue_for_a_slot() {
    let mut config = fast(5.0);
    config.latency.max_batch = 2;
    let server = Server::start(config).await;
    let body = json!({"prompt": "p", "max_tokens": 20, "ignore_eos": true, "stream": true});
    let tasks: Vec<_> = (0..4)
        .map(|_| tokio::spawn(stream(server.addr, "/v1/completions", body.clone())))
        .collect();
    let mut ttfts = Vec::new();
    for t in tasks {
        let (sent, _, events) = t.await.unwrap();
        ttfts.push((token_events(&events)[0].at - sent).as_secs_f64() * 1e3);
    }
    ttfts.sort_by(f64::total_cmp);
    // Two start at once; two wait for a whole generation (20 steps x 5 ms).
    assert!(ttfts[1] < 60.0, "{ttfts:?}");
    assert!(ttfts[2] > 90.0, "{ttfts:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn ttft_grows_with_prompt_length() {
    let mut config = fast(2.0);
    config.latency.prefill = "0:0,1000:100".parse().unwrap();
    let server = Server::start(config).await;
    let ttft = |words: usize| {
        let body = json!({"prompt": vec!["w"; words].join(" "), "max_tokens": 2, "stream": true});
        async move {
            let (sent, _, events) = stream(server.addr, "/v1/completions", body.clone()).await;
            (token_events(&events)[0].at - sent).as_secs_f64() * 1e3
        }
    };
    let short = ttft(10).await;
    let long = ttft(2000).await;
    assert!(short < 40.0, "{short} ms");
    assert!(long > 190.0, "{long} ms");
    server.stop().await.unwrap();
}

mod cli {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    use super::*;

    fn spawn(args: &[&str]) -> (std::process::Child, SocketAddr) {
        let mut child = Command::new(crate::common::bin())
            .arg("mock-server")
            .args(["--port", "0", "--preset", "fixed", "--itl-ms", "1"])
            .args(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        // Keep reading so the server never writes into a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("first stderr line: {line:?}"))
            .parse()
            .unwrap();
        (child, addr)
    }

    fn wait(child: &mut std::process::Child) -> i32 {
        let t0 = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                panic!("mock-server did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[tokio::test]
    async fn serves_until_sigterm_then_exits_0() {
        let (mut child, addr) = spawn(&[]);
        let (status, _) = call(addr, "GET", "/health", None).await;
        assert_eq!(status, 200);
        let (status, v) = call_json(
            addr,
            "/v1/completions",
            &json!({"prompt": "x", "max_tokens": 3}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert_eq!(wait(&mut child), 0);
    }

    #[tokio::test]
    async fn crash_after_exits_1() {
        let (mut child, addr) = spawn(&["--crash-after", "1"]);
        let (status, _) = call_json(
            addr,
            "/v1/completions",
            &json!({"prompt": "x", "max_tokens": 1}),
        )
        .await;
        assert_eq!(status, 200);
        let mut s = connect(addr).await;
        let _ = s
            .send_request(build(
                addr,
                "POST",
                "/v1/completions",
                Some(&json!({"prompt": "x"})),
            ))
            .await;
        assert_eq!(wait(&mut child), 1);
    }

    #[test]
    fn bad_flags_exit_2_with_a_message() {
        let out = Command::new(crate::common::bin())
            .args(["mock-server", "--preset", "h100"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("unknown preset `h100`") && err.contains("h20-vllm-tp16"),
            "{err}"
        );
        let out = Command::new(crate::common::bin())
            .args(["mock-server", "--decode-ms", "1:x"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
    }

    #[test]
    fn simulate_prints_the_preset_table() {
        let out = Command::new(crate::common::bin())
            .args([
                "mock-server",
                "--preset",
                "h20-vllm-tp16",
                "--simulate",
                "1000:1000",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let table = String::from_utf8(out.stdout).unwrap();
        assert_eq!(table.lines().count(), 2 + 8, "{table}");
        assert!(
            table.lines().nth(2).unwrap().starts_with("| 1 |"),
            "{table}"
        );
    }
}
