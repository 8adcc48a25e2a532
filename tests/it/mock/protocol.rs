//! The OpenAI protocol as the mock server speaks it: completions and chat, streaming and
//! not, usage, lengths, chunking, errors, token counting, and the vLLM metrics.

use std::time::{Duration, Instant};

use orchestrate_mock::TokenCounter;
use serde_json::json;

use super::client::*;

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
    let words = chunk_words(&events);
    assert_eq!(words.iter().sum::<usize>(), 5);
    assert!(
        words.len() >= 2,
        "tokens are streamed, not sent at once: {events:?}"
    );
    let last = tokens.last().unwrap().data.as_ref().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(
        tokens[..tokens.len() - 1]
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
    assert_eq!(chunk_words(&events).iter().sum::<usize>(), 3);
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
    let words = chunk_words(&events);
    assert_eq!(words.iter().sum::<usize>(), 4);
    for (i, e) in tokens.iter().enumerate() {
        let d = e.data.as_ref().unwrap();
        assert_eq!(
            d["usage"]["completion_tokens"],
            words[..=i].iter().sum::<usize>(),
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
    let words = chunk_words(&events);
    // Normally [1, 4, 4, 1]: the first token alone, then 4 a chunk, the rest last; a
    // server that falls behind may put more in one chunk, never fewer (the exact sequence
    // is a unit test in crates/mock/src/stream.rs).
    assert!((2..=4).contains(&words.len()), "{words:?}");
    assert!(
        words[1..words.len() - 1].iter().all(|&w| w >= 4),
        "{words:?}"
    );
    assert_eq!(words.iter().sum::<usize>(), 10);
    let cumulative: Vec<u64> = words
        .iter()
        .scan(0u64, |acc, &w| {
            *acc += w as u64;
            Some(*acc)
        })
        .collect();
    assert_eq!(counts, cumulative);
    server.stop().await.unwrap();
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
        "vllm:kv_cache_usage_perc",
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
    // The KV-cache gauge moves with load: one of the batch's slots taken, then none.
    assert!(metric(&during, &format!("vllm:kv_cache_usage_perc{l}")) > 0.0);
    assert_eq!(
        metric(&before, &format!("vllm:kv_cache_usage_perc{l}")),
        0.0
    );
    long.await.unwrap();
    let (_, after) = call(a, "GET", "/metrics", None).await;
    let after = String::from_utf8(after.to_vec()).unwrap();
    assert_eq!(metric(&after, &format!("vllm:prompt_tokens_total{l}")), 3.0);
    assert_eq!(
        metric(&after, &format!("vllm:generation_tokens_total{l}")),
        100.0
    );
    // The gauge is sampled once per engine step (as vLLM's are): allow it a moment.
    let t0 = Instant::now();
    loop {
        let (_, now) = call(a, "GET", "/metrics", None).await;
        let now = String::from_utf8(now.to_vec()).unwrap();
        if metric(&now, &format!("vllm:num_requests_running{l}")) == 0.0 {
            assert_eq!(metric(&now, &format!("vllm:kv_cache_usage_perc{l}")), 0.0);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "running stays above 0"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
    // vLLM's /detokenize shape.
    let (status, v) = call_json(server.addr, "/detokenize", &json!({"tokens": [1, 2, 3]})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, json!({"prompt": "hello , world"}));
    let (status, _) = call_json(server.addr, "/detokenize", &json!({"ids": [1]})).await;
    assert_eq!(status, 400);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn chat_prompts_are_counted_through_the_chat_template_beside_the_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "user": 2, "bot": 3},
                  "unk_token": "[UNK]"}
    });
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        json!({"chat_template": "{% for m in messages %}{{ m.role }} {{ m.content }} {% endfor %}{% if add_generation_prompt %}bot{% endif %}"}).to_string(),
    )
    .unwrap();
    let mut config = fast(1.0);
    config.tokenizer = TokenCounter::from_file(&path).unwrap();
    let server = Server::start(config).await;
    let messages = json!([{"role": "user", "content": "hello hello"}]);
    // "user hello hello bot": 4 tokens, where the contents alone are 2.
    let (_, v) = call_json(server.addr, "/tokenize", &json!({"messages": messages})).await;
    assert_eq!(v["count"], 4, "{v}");
    let (_, v) = call_json(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 1}),
    )
    .await;
    assert_eq!(v["usage"]["prompt_tokens"], 4, "{v}");
    server.stop().await.unwrap();
}
