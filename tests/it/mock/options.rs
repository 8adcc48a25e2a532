//! The mock server's failure and checking options: startup delay, error rate, crash after N
//! requests, clients that hang up, and the ground-truth chunk log.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use orchestrate_mock::MockError;
use serde_json::{Value, json};

use super::client::*;

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
    // Every chunk the client saw is in the log with the same number of tokens (normally
    // [1, 2, 2, 2]).
    let words = chunk_words(&events);
    assert_eq!(
        chunks.iter().map(|c| c.1 as usize).collect::<Vec<_>>(),
        words
    );
    let arrival = chat["arrival_ns"].as_u64().unwrap();
    let role = chat["role_ns"].as_u64().unwrap();
    let end = chat["end_ns"].as_u64().unwrap();
    assert!(arrival <= role && role <= chunks[0].0 && chunks.last().unwrap().0 <= end);
    assert!(chunks.windows(2).all(|w| w[0].0 <= w[1].0));
    // The log's span from first to last chunk agrees with what this client saw (60 ms at
    // 10 ms steps); a loopback client lags the send by well under 30 ms.
    let server_span = (chunks.last().unwrap().0 - chunks[0].0) as f64 / 1e6;
    let client_span = (*client_tokens.last().unwrap() - client_tokens[0]).as_secs_f64() * 1e3;
    // The engine keeps an absolute step schedule, and a late-stamped first chunk (its
    // connection task ran late) shortens the span: under load it can fall a few ms short.
    assert!(server_span >= 50.0, "{server_span} ms");
    assert!(
        (server_span - client_span).abs() < 30.0,
        "{server_span} vs {client_span} ms"
    );
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
async fn a_client_that_goes_away_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truth.jsonl");
    let mut config = fast(2.0);
    config.ground_truth = Some(path.clone());
    let server = Server::start(config).await;
    let a = server.addr;
    {
        let mut s = connect(a).await;
        let body = json!({"prompt": "x", "max_tokens": 2000, "ignore_eos": true, "stream": true});
        let resp = s
            .send_request(build(a, "POST", "/v1/completions", Some(&body)))
            .await
            .unwrap();
        let mut body = resp.into_body();
        body.frame().await.unwrap().unwrap();
        // Dropping the body and the connection here hangs up mid-stream (4 s of output left).
    }
    let t0 = Instant::now();
    let l = "{model_name=\"mock-model\"}";
    loop {
        let (_, m) = call(a, "GET", "/metrics", None).await;
        let m = String::from_utf8(m.to_vec()).unwrap();
        if metric(&m, &format!("vllm:num_requests_running{l}")) == 0.0 {
            assert!(metric(&m, &format!("vllm:generation_tokens_total{l}")) < 1000.0);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "the sequence kept running"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Keep-alive: two requests on one connection.
    let mut s = connect(a).await;
    for _ in 0..2 {
        let resp = s
            .send_request(build(
                a,
                "POST",
                "/v1/completions",
                Some(&json!({"prompt": "x", "max_tokens": 2})),
            ))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap();
    }
    server.stop().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["status"], "cancelled", "{first}");
    assert!(first["end_ns"].is_null());
    assert_eq!(text.lines().count(), 3);
}
