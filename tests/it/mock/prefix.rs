//! The mock server's prefix cache end to end: `cached_tokens` in streaming and whole
//! responses of both endpoints, vLLM's prefix-cache counters on /metrics, a TTFT that pays
//! only for the uncached part, and no trace of any of it with the cache off.

use serde_json::json;

use super::client::{Server, call_json, fast, metric, stream, token_events, usage_of};

/// `n` distinct words starting at `from`: "p0 p1 ...".
fn words(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("p{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn repeated_prompt_hits_reports_cached_tokens_and_prefills_faster() {
    let mut config = fast(2.0);
    config.latency.prefill = "0:0,1000:100".parse().unwrap();
    config.prefix_cache.block_tokens = 16;
    config.prefix_cache.capacity_tokens = 100_000;
    let server = Server::start(config).await;
    let prompt = words(0, 2000);
    let ask = |prompt: String| {
        let body = json!({"prompt": prompt, "max_tokens": 2, "stream": true,
            "stream_options": {"include_usage": true}});
        async move {
            let (sent, _, events) = stream(server.addr, "/v1/completions", body).await;
            let ttft = (token_events(&events)[0].at - sent).as_secs_f64() * 1e3;
            let usage = usage_of(&events).unwrap().clone();
            (ttft, usage)
        }
    };
    let (cold, u) = ask(prompt.clone()).await;
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0);
    let (warm, u) = ask(prompt.clone()).await;
    // 2000 tokens = 125 blocks of 16; the last block is recomputed.
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 1984);
    assert_eq!(u["prompt_tokens"], 2000);
    assert!(cold > 190.0, "{cold} ms");
    assert!(warm < 100.0, "{warm} ms");
    // A prompt sharing its first 1000 words hits only the whole blocks of that prefix.
    let (_, u) = ask(format!("{} {}", words(0, 1000), words(5000, 1000))).await;
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 992);
    // Chat, whole response: the same accounting.
    let chat = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 2});
    let (status, v) = call_json(server.addr, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200);
    let first = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    let (_, v) = call_json(server.addr, "/v1/chat/completions", &chat).await;
    let second = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert_eq!(
        (first, second),
        (Some(1984), Some(1984)),
        "same tokens as the completion"
    );
    let (_, text) = super::client::call(server.addr, "GET", "/metrics", None).await;
    let text = String::from_utf8(text.to_vec()).unwrap();
    let queries = metric(
        &text,
        "vllm:prefix_cache_queries_total{model_name=\"mock-model\"}",
    );
    let hits = metric(
        &text,
        "vllm:prefix_cache_hits_total{model_name=\"mock-model\"}",
    );
    assert_eq!(queries, 4.0 * 2000.0 + 2000.0);
    assert_eq!(hits, 1984.0 + 992.0 + 1984.0 + 1984.0);
    let prompt_total = metric(&text, "vllm:prompt_tokens_total{model_name=\"mock-model\"}");
    assert_eq!(prompt_total, queries, "cached tokens are prompt tokens too");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn tiny_capacity_evicts_and_cache_off_reports_nothing() {
    let mut config = fast(1.0);
    config.prefix_cache.block_tokens = 4;
    config.prefix_cache.capacity_tokens = 40;
    let server = Server::start(config).await;
    let cached = |prompt: String| async move {
        let body = json!({"prompt": prompt, "max_tokens": 1});
        let (_, v) = call_json(server.addr, "/v1/completions", &body).await;
        v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64()
    };
    assert_eq!(cached(words(0, 40)).await, Some(0));
    assert_eq!(cached(words(0, 40)).await, Some(36));
    // 40 other tokens fill the 40-token cache: the first prompt is gone.
    assert_eq!(cached(words(100, 40)).await, Some(0));
    assert_eq!(cached(words(0, 40)).await, Some(0));
    server.stop().await.unwrap();

    let server = Server::start(fast(1.0)).await;
    let body = json!({"prompt": words(0, 40), "max_tokens": 1});
    for _ in 0..2 {
        let (_, v) = call_json(server.addr, "/v1/completions", &body).await;
        assert!(v["usage"].get("prompt_tokens_details").is_none(), "{v}");
    }
    let (_, text) = super::client::call(server.addr, "GET", "/metrics", None).await;
    assert!(!String::from_utf8_lossy(&text).contains("prefix_cache"));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn cli_flags_set_block_size_and_capacity() {
    let (mut child, addr) = super::client::cli_spawn(&[
        "--preset",
        "fixed",
        "--prefix-cache-tokens",
        "1000",
        "--block-size",
        "4",
    ]);
    let body = json!({"prompt": words(0, 10), "max_tokens": 1});
    let (_, first) = call_json(addr, "/v1/completions", &body).await;
    let (_, second) = call_json(addr, "/v1/completions", &body).await;
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // 10 tokens: two whole blocks of 4 below the last token.
    assert_eq!(second["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
    let out = std::process::Command::new(crate::common::bin())
        .args([
            "mock-server",
            "--block-size",
            "0",
            "--prefix-cache-tokens",
            "64",
        ])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("block size"), "{err}");
}
