//! The embedded client end to end against a tiny SSE server written here: a real TCP server on
//! port 0 that streams a known chunk timeline (role-only first chunk, fixed gaps, optional
//! multi-token chunks and per-chunk usage, optional mid-stream error or HTTP error). Checks the
//! records, the metrics computed from them, and the shipped tokenizer's exact-length datasets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use orchestrate::client::{self, ChunkTokens, ClientConfig, NoObserver, RequestOutcome};

use orchestrate::dataset::{self, DatasetSpec, Tokenizer};
use orchestrate::load::{Limit, LoadShape, Rate};
use orchestrate::metrics::{SummaryOptions, summarize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How the test server answers.
#[derive(Clone, Copy)]
struct Script {
    gap: Duration,
    tokens_per_chunk: u32,
    usage_per_chunk: bool,
    /// Send an error event after this many content chunks.
    error_after: Option<u32>,
    /// Answer every request with this HTTP status instead.
    status: Option<u16>,
    /// How the SSE body is framed on the wire.
    framing: Wire,
    /// Close a kept-alive connection when its second request arrives, without answering (what
    /// a server's idle timeout does when it races the client's next request).
    drop_reused: bool,
}

/// Body framing of the test server's streams.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    Chunked,
    /// HTTP/1.1 with neither a length nor chunking: the body ends when the server closes.
    UntilClose,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            gap: Duration::from_millis(5),
            tokens_per_chunk: 1,
            usage_per_chunk: true,
            error_after: None,
            status: None,
            framing: Wire::Chunked,
            drop_reused: false,
        }
    }
}

async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<serde_json::Value> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let mut chunk = [0u8; 4096];
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = serde_json::from_slice(&buf[end + 4..end + 4 + len]).ok();
            buf.drain(..end + 4 + len);
            return body;
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn send_event(s: &mut TcpStream, wire: Wire, data: &str) -> std::io::Result<()> {
    let event = format!("data: {data}\n\n");
    match wire {
        Wire::Chunked => {
            s.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
                .await
        }
        Wire::UntilClose => s.write_all(event.as_bytes()).await,
    }
}

async fn serve_conn(mut s: TcpStream, script: Script) {
    let mut buf = Vec::new();
    let mut served = 0;
    while let Some(req) = read_request(&mut s, &mut buf).await {
        served += 1;
        if script.drop_reused && served == 2 {
            return;
        }

        let max = req["max_tokens"].as_u64().unwrap_or(16) as u32;
        if let Some(code) = script.status {
            let body = "{\"error\":\"overloaded\"}";
            let head = format!(
                "HTTP/1.1 {code} Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            continue;
        }
        let head = match script.framing {
            Wire::Chunked => {
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            }
            Wire::UntilClose => "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
        };
        if s.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let usage = |n: u32| {
            if script.usage_per_chunk {
                format!(
                    ",\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{n},\"total_tokens\":{}}}",
                    n + 3
                )
            } else {
                String::new()
            }
        };
        let role = format!(
            "{{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}}}}]{}}}",
            usage(0)
        );
        let _ = send_event(&mut s, script.framing, &role).await;
        let mut sent = 0;
        let mut chunks = 0;
        while sent < max {
            tokio::time::sleep(script.gap).await;
            if script.error_after == Some(chunks) {
                let _ = send_event(
                    &mut s,
                    script.framing,
                    "{\"error\":{\"message\":\"engine died\",\"code\":500}}",
                )
                .await;
                break;
            }
            let k = script.tokens_per_chunk.min(max - sent);
            sent += k;
            chunks += 1;
            let words = vec!["ba"; k as usize].join(" ");
            let chunk = format!(
                "{{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" {words}\"}}}}]{}}}",
                usage(sent)
            );
            if send_event(&mut s, script.framing, &chunk).await.is_err() {
                return;
            }
        }
        let last = format!(
            "{{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{sent},\"total_tokens\":{}}}}}",
            sent + 3
        );
        let _ = send_event(&mut s, script.framing, &last).await;
        let _ = send_event(&mut s, script.framing, "[DONE]").await;
        if script.framing == Wire::UntilClose {
            return;
        }
        if s.write_all(b"0\r\n\r\n").await.is_err() {
            return;
        }
    }
}

async fn server(script: Script) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            s.set_nodelay(true).unwrap();
            tokio::spawn(serve_conn(s, script));
        }
    });
    format!("http://{addr}")
}

fn shipped_tokenizer() -> Tokenizer {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tokenizer/tokenizer.json");
    Tokenizer::from_file(std::path::Path::new(path)).unwrap()
}

fn prompts(n: usize, output_len: u32) -> Vec<dataset::Prompt> {
    let spec = DatasetSpec::Random {
        input_len: 32,
        output_len,
        range_ratio: 0.0,
        prefix_len: 0,
    };
    dataset::generate(&spec, &shipped_tokenizer(), n, 1).unwrap()
}

fn config(base: &str, concurrency: u32, requests: u64) -> ClientConfig {
    ClientConfig::new(
        base,
        "m",
        LoadShape {
            max_concurrency: Some(concurrency),
            rate: Rate::Unlimited,
            ramp_up: None,
            limit: Limit::Requests(requests),
            warmup: Duration::ZERO,
            cooldown: Duration::ZERO,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_records_every_chunk_and_metrics_match_the_timeline() {
    let base = server(Script::default()).await;
    let cfg = config(&base, 4, 12);
    let outcome = client::run(
        &cfg,
        prompts(5, 10),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.records.len(), 12);
    assert!(outcome.max_in_flight <= 4);
    for r in &outcome.records {
        assert_eq!(r.outcome, RequestOutcome::Completed, "{r:?}");
        // The role-only first chunk is not an output chunk: 10 content chunks of 1 token.
        assert_eq!(r.chunks.len(), 10);
        assert_eq!(r.chunk_tokens, ChunkTokens::Usage);
        assert_eq!(r.usage.completion_tokens, Some(10));
        assert_eq!(r.output_tokens(), 10);
    }
    let s = summarize(&outcome.records, &SummaryOptions::default());
    assert_eq!((s.completed, s.failed), (12, 0));
    assert_eq!(s.total_output_tokens, 120);
    // The server waits 5 ms before each content chunk.
    let itl = s.latency["median_itl_ms"].as_f64().unwrap();
    assert!((4.5..12.0).contains(&itl), "median ITL {itl}");
    let ttft = s.latency["median_ttft_ms"].as_f64().unwrap();
    assert!((4.5..20.0).contains(&ttft), "median TTFT {ttft}");
    assert!(s.max_concurrent_requests <= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_token_chunks_give_per_token_itl_and_per_chunk_icl() {
    let base = server(Script {
        tokens_per_chunk: 4,
        gap: Duration::from_millis(8),
        ..Script::default()
    })
    .await;
    let cfg = config(&base, 2, 4);
    let outcome = client::run(
        &cfg,
        prompts(2, 12),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = &outcome.records[0];
    assert_eq!(
        r.chunks.iter().map(|c| c.tokens).collect::<Vec<_>>(),
        vec![4, 4, 4]
    );
    let s = summarize(&outcome.records, &SummaryOptions::default());
    let itl = s.latency["median_itl_ms"].as_f64().unwrap();
    let icl = s.latency["median_icl_ms"].as_f64().unwrap();
    assert!((icl / itl - 4.0).abs() < 0.01, "itl {itl} icl {icl}");
    assert!((s.mean_tokens_per_chunk - 4.0).abs() < 1e-9);
}

/// The streaming path speaks HTTP/1.1 itself: a body delimited by the connection's close is
/// read to its end (and the connection not reused), and a kept-alive connection the server
/// drops when the next request arrives is replaced by a fresh one instead of failing the
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_delimited_bodies_and_dropped_idle_connections() {
    for script in [
        Script {
            framing: Wire::UntilClose,
            ..Script::default()
        },
        Script {
            drop_reused: true,
            ..Script::default()
        },
    ] {
        let base = server(script).await;
        let outcome = client::run(
            &config(&base, 1, 4),
            prompts(2, 5),
            Arc::new(NoObserver),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(outcome.records.len(), 4);
        for r in &outcome.records {
            assert!(r.outcome.is_completed(), "{:?}", r.outcome);
            assert_eq!(r.output_tokens(), 5, "{r:?}");
            assert_eq!(r.chunks.len(), 5);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_counted_with_reasons() {
    let broken = server(Script {
        error_after: Some(2),
        ..Script::default()
    })
    .await;
    let outcome = client::run(
        &config(&broken, 2, 3),
        prompts(1, 8),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(outcome.records.iter().all(|r| matches!(&r.outcome, RequestOutcome::StreamError { message } if message.contains("engine died"))));
    let s = summarize(&outcome.records, &SummaryOptions::default());
    assert_eq!((s.completed, s.failed), (0, 3));
    assert_eq!(s.outcomes["stream_error"], 3);

    let refusing = server(Script {
        status: Some(503),
        ..Script::default()
    })
    .await;
    let outcome = client::run(
        &config(&refusing, 2, 3),
        prompts(1, 8),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(
        outcome
            .records
            .iter()
            .all(|r| matches!(r.outcome, RequestOutcome::HttpStatus { code: 503, .. }))
    );

    // A first-token deadline shorter than the server's first gap times every request out.
    let slow = server(Script {
        gap: Duration::from_millis(200),
        ..Script::default()
    })
    .await;
    let mut cfg = config(&slow, 2, 2);
    cfg.ttft_timeout = Some(Duration::from_millis(50));
    let start = Instant::now();
    let outcome = client::run(
        &cfg,
        prompts(1, 8),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(start.elapsed() < Duration::from_millis(180));
    assert!(
        outcome
            .records
            .iter()
            .all(|r| matches!(r.outcome, RequestOutcome::TimedOut { .. }))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_ends_in_flight_requests_as_cancelled() {
    let base = server(Script {
        gap: Duration::from_millis(50),
        ..Script::default()
    })
    .await;
    let cancel = CancellationToken::new();
    let stopper = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(120)).await;
        stopper.cancel();
    });
    let outcome = client::run(
        &config(&base, 3, 100),
        prompts(1, 100),
        Arc::new(NoObserver),
        cancel,
    )
    .await
    .unwrap();
    assert_eq!(outcome.records.len(), 3);
    assert!(
        outcome
            .records
            .iter()
            .all(|r| r.outcome == RequestOutcome::Cancelled)
    );
}

#[test]
fn random_prompts_have_exact_lengths_with_the_shipped_tokenizer() {
    let tok = shipped_tokenizer();
    let spec = DatasetSpec::Random {
        input_len: 100,
        output_len: 20,
        range_ratio: 0.5,
        prefix_len: 10,
    };
    let a = dataset::generate(&spec, &tok, 20, 42).unwrap();
    let b = dataset::generate(&spec, &tok, 20, 42).unwrap();
    assert_eq!(a, b, "same seed, same prompts");
    for p in &a {
        assert_eq!(tok.count(&p.text).unwrap() as u32, p.prompt_len);
        // The mock server counts whitespace-separated words by default: the same count.
        assert_eq!(p.text.split_whitespace().count() as u32, p.prompt_len);
        assert!((60..=160).contains(&p.prompt_len), "{}", p.prompt_len);
        assert!((10..=30).contains(&p.output_len));
    }
    let prefix: Vec<&str> = a[0].text.split_whitespace().take(10).collect();
    assert!(a.iter().all(|p| {
        p.text
            .split_whitespace()
            .take(10)
            .eq(prefix.iter().copied())
    }));
}

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn every_dataset_gives_exact_lengths_and_is_reproducible() {
    let tok = shipped_tokenizer();
    let specs = [
        DatasetSpec::ShareGpt {
            path: data("sharegpt-mini.json"),
            input_len: None,
            output_len: None,
        },
        DatasetSpec::ShareGpt {
            path: data("sharegpt-mini.json"),
            input_len: Some(70),
            output_len: Some(9),
        },
        DatasetSpec::Text {
            path: data("corpus"),
            input_len: 120,
            output_len: 11,
        },
        DatasetSpec::SharedPrefix {
            num_groups: 3,
            prompts_per_group: 4,
            system_prompt_len: 40,
            question_len: 8,
            output_len: 5,
        },
        DatasetSpec::Jsonl {
            path: data("prompts.jsonl"),
            output_len: None,
        },
    ];
    let trace_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/traces/mooncake-sample.jsonl");
    let trace = dataset::read_trace(&trace_path).unwrap();
    let specs: Vec<DatasetSpec> = specs
        .into_iter()
        .chain([DatasetSpec::Mooncake {
            path: trace_path.clone(),
            replay: mooncake_replay(1.0),
        }])
        .collect();
    // Lines without output_len need an explicit one.
    let missing = DatasetSpec::Jsonl {
        path: data("prompts.jsonl"),
        output_len: None,
    };
    let err = dataset::generate(&missing, &tok, 5, 3).unwrap_err();
    assert!(err.to_string().contains("output_len"), "{err}");
    for spec in &specs {
        let spec = match spec {
            DatasetSpec::Jsonl { path, .. } => &DatasetSpec::Jsonl {
                path: path.clone(),
                output_len: Some(6),
            },
            other => other,
        };
        let a = dataset::generate(spec, &tok, 10, 3).unwrap();
        let b = dataset::generate(spec, &tok, 10, 3).unwrap();
        assert_eq!(a, b, "{spec:?}");
        assert_eq!(a.len(), 10, "{spec:?}");
        for p in &a {
            assert_eq!(tok.count(&p.text).unwrap() as u32, p.prompt_len, "{spec:?}");
        }
        match spec {
            DatasetSpec::ShareGpt {
                input_len: Some(n),
                output_len: Some(o),
                ..
            } => assert!(a.iter().all(|p| p.prompt_len == *n && p.output_len == *o)),
            DatasetSpec::ShareGpt { .. } => {
                // The data's answer lengths, and the too-short conversation filtered out.
                assert!(a.iter().all(|p| p.prompt_len >= 4 && p.output_len >= 4));
            }
            DatasetSpec::Text { input_len, .. } => {
                assert!(
                    a.iter()
                        .all(|p| p.prompt_len == *input_len && p.output_len == 11)
                );
                assert_ne!(a[0].text, a[1].text);
            }
            DatasetSpec::SharedPrefix { .. } => {
                assert!(a.iter().all(|p| p.prompt_len == 48 && p.output_len == 5));
                let prefixes: std::collections::BTreeSet<String> = a
                    .iter()
                    .map(|p| {
                        p.text
                            .split_whitespace()
                            .take(40)
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect();
                assert!(
                    prefixes.len() <= 3,
                    "{} distinct system prompts",
                    prefixes.len()
                );
            }
            DatasetSpec::Jsonl { .. } => assert!(a.iter().all(|p| p.output_len == 6)),
            DatasetSpec::Mooncake { .. } => {
                for (p, r) in a.iter().zip(&trace) {
                    assert_eq!(
                        (p.prompt_len, p.output_len),
                        (r.input_length, r.output_length)
                    );
                    assert_eq!(p.at_us, Some(r.timestamp_ms * 1000));
                }
            }
            DatasetSpec::Random { .. } | DatasetSpec::Conversation(_) => {}
            DatasetSpec::Weka { .. } => {}
        }
    }
}

#[test]
fn real_bpe_tokenizer_gives_exact_lengths_when_present() {
    // The DeepSeek tokenizer of ../shared (beside the checkout in CI, where it must be there);
    // a checkout without it is covered by the shipped tokenizer's tests.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/tokenizers/deepseek-v4/tokenizer.json");
    if !path.exists() {
        assert!(
            !crate::common::in_ci(),
            "CI=true but {} is missing (CI runs with ../shared beside the checkout)",
            path.display()
        );
        eprintln!("skipped: {} not present", path.display());
        return;
    }
    let tok = Tokenizer::from_file(&path).unwrap();
    let spec = DatasetSpec::Random {
        input_len: 500,
        output_len: 10,
        range_ratio: 0.0,
        prefix_len: 50,
    };
    let prompts = dataset::generate(&spec, &tok, 8, 1).unwrap();
    for p in &prompts {
        assert_eq!(p.prompt_len, 550);
        assert_eq!(tok.count(&p.text).unwrap(), 550);
    }
}

#[test]
fn result_json_has_every_vllm_field() {
    use orchestrate::metrics::{ResultHeader, Slo, SloMetric, result_json};
    let r = |index: u64, outcome: RequestOutcome| client::RequestRecord {
        index,
        prompt_index: 0,
        session: None,
        turn: None,
        scheduled_us: 0,
        dispatched_us: 0,
        sent_us: 10,
        headers_us: Some(100),
        prompt_len: 4,
        output_len: 2,
        usage: client::Usage {
            prompt_tokens: Some(4),
            completion_tokens: Some(2),
            ..Default::default()
        },
        tokenizer_output_tokens: None,
        generated_text: None,
        chunk_tokens: ChunkTokens::Usage,
        chunks: vec![
            client::Chunk {
                t_us: 1000,
                tokens: 1,
            },
            client::Chunk {
                t_us: 2000,
                tokens: 1,
            },
        ],
        first_content_us: None,
        end_us: 2100,
        outcome,
    };
    let records = vec![
        r(0, RequestOutcome::Completed),
        r(1, RequestOutcome::Cancelled),
    ];
    let opts = SummaryOptions {
        goodput: vec![Slo {
            metric: SloMetric::Ttft,
            ms: 500.0,
        }],
        ..SummaryOptions::default()
    };
    let summary = summarize(&records, &opts);
    let header = ResultHeader {
        date: "20260101-000000".into(),
        endpoint_type: "vllm".into(),
        backend: "vllm".into(),
        label: None,
        model_id: "m".into(),
        tokenizer_id: Some("t".into()),
        num_prompts: 2,
        request_rate: serde_json::json!("inf"),
        burstiness: 1.0,
        max_concurrency: Some(2),
        ramp_up: None,
        metadata: vec![("gpu".into(), "h20".into())],
    };
    let value = result_json(&header, &summary, &records, true, &[]);
    let obj = value.as_object().unwrap();
    let keys = std::fs::read_to_string(data("vllm-result-keys.txt")).unwrap();
    for key in keys
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        assert!(obj.contains_key(key), "missing vLLM key `{key}`");
    }
    assert_eq!(obj["request_rate"], "inf");
    assert_eq!(obj["gpu"], "h20", "metadata is top-level");
    assert_eq!(obj["completed"], 1);
    assert_eq!(obj["failed"], 1);
    assert_eq!(obj["latencies"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_bound_runs_reuse_prompts_and_count_incomplete_requests() {
    let base = server(Script {
        gap: Duration::from_millis(20),
        ..Script::default()
    })
    .await;
    // Short answers complete within the issuing window; prompts are reused cyclically.
    let mut cfg = config(&base, 2, 0);
    cfg.shape.limit = Limit::Duration(Duration::from_millis(300));
    let outcome = client::run(
        &cfg,
        prompts(2, 2),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(
        outcome.records.len() > 2,
        "{} requests",
        outcome.records.len()
    );
    assert!(
        outcome
            .records
            .iter()
            .all(|r| r.prompt_index == (r.index % 2) as u32)
    );
    // Long answers: in flight at the cutoff, then the drain window ends them as incomplete.
    cfg.drain_timeout = Some(Duration::from_millis(100));
    let start = Instant::now();
    let outcome = client::run(
        &cfg,
        prompts(2, 500),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(outcome.records.len(), 2);
    assert!(
        outcome
            .records
            .iter()
            .all(|r| r.outcome == RequestOutcome::Incomplete)
    );
    let s = summarize(&outcome.records, &SummaryOptions::default());
    assert_eq!((s.completed, s.failed, s.outcomes["incomplete"]), (0, 2, 2));
    // No rate and no concurrency limit cannot be bounded by time.
    cfg.shape.max_concurrency = None;
    assert!(
        client::run(
            &cfg,
            prompts(1, 2),
            Arc::new(NoObserver),
            CancellationToken::new()
        )
        .await
        .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_runs_follow_the_schedule() {
    let base = server(Script::default()).await;
    let mut cfg = config(&base, 50, 20);
    cfg.shape.rate = Rate::Constant { rps: 100.0 };
    let outcome = client::run(
        &cfg,
        prompts(4, 2),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let mut r = outcome.records.clone();
    r.sort_by_key(|r| r.index);
    for (i, rec) in r.iter().enumerate() {
        assert_eq!(rec.scheduled_us, i as u64 * 10_000);
        assert!(rec.dispatched_us >= rec.scheduled_us);
    }
    let lag = outcome.self_check.dispatch_lag_p50_us;
    assert!(lag < 20_000, "median dispatch lag {lag} us");
}

fn mooncake_replay(speedup: f64) -> dataset::Replay {
    dataset::Replay {
        block_size: 512,
        speedup,
        start: Duration::ZERO,
        duration: None,
    }
}

/// The shipped Mooncake sample replayed at 4x against the test server: every request is
/// scheduled at its trace timestamp / 4 (the rate of the point does not apply), and the
/// trace's shared hash ids give the point a positive ideal prefix-cache hit rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mooncake_replay_follows_the_trace_timestamps_and_keeps_its_prefix_reuse() {
    let tok = shipped_tokenizer();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/traces/mooncake-sample.jsonl");
    let trace = dataset::read_trace(&path).unwrap();
    let spec = DatasetSpec::Mooncake {
        path,
        replay: mooncake_replay(4.0),
    };
    let prompts = dataset::generate(&spec, &tok, 30, 5).unwrap();
    assert_eq!(prompts.len(), 30);
    let ids = dataset::prompt_ids(&prompts, &tok, false).unwrap();
    let base = server(Script::default()).await;
    let mut cfg = config(&base, 50, 30);
    cfg.shape.rate = Rate::Constant { rps: 1.0 };
    let outcome = client::run(
        &cfg,
        prompts,
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let mut r = outcome.records.clone();
    r.sort_by_key(|r| r.index);
    assert_eq!(r.len(), 30);
    for (rec, t) in r.iter().zip(&trace) {
        assert_eq!(
            rec.scheduled_us,
            t.timestamp_ms * 1000 / 4,
            "request {}",
            rec.index
        );
        assert!(rec.dispatched_us >= rec.scheduled_us);
    }
    let blocks = orchestrate::metrics::PromptBlocks::new(16, &ids);
    let ideal = orchestrate::metrics::ideal_hit_rate(&outcome.records, &blocks).unwrap();
    assert!(ideal > 0.3, "ideal prefix-cache hit rate {ideal}");
    // Without shared hash ids there is nothing to reuse.
    let dir = tempfile::tempdir().unwrap();
    let unshared = dir.path().join("unshared.jsonl");
    let lines: Vec<String> = trace
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let hs: Vec<String> = (0..t.hash_ids.len())
                .map(|k| format!("{}", i * 100 + k))
                .collect();
            format!(
                r#"{{"timestamp": {}, "input_length": {}, "output_length": {}, "hash_ids": [{}]}}"#,
                t.timestamp_ms,
                t.input_length,
                t.output_length,
                hs.join(", ")
            )
        })
        .collect();
    std::fs::write(&unshared, lines.join("\n")).unwrap();
    let spec = DatasetSpec::Mooncake {
        path: unshared,
        replay: mooncake_replay(4.0),
    };
    let prompts = dataset::generate(&spec, &tok, 30, 5).unwrap();
    let ids = dataset::prompt_ids(&prompts, &tok, false).unwrap();
    let none = orchestrate::metrics::ideal_hit_rate(
        &outcome.records,
        &orchestrate::metrics::PromptBlocks::new(16, &ids),
    )
    .unwrap();
    assert_eq!(none, 0.0);
}

/// When a one-connection test server sent its two content chunks.
struct SentAt {
    first: Instant,
    second: Instant,
}

/// A blocking server on its own thread: reads one request, raises `request_read`, waits
/// 50 ms, sends the head and a content chunk, waits `gap`, sends a second one, then ends the
/// stream. It runs apart from the client's runtime, so stalling that runtime does not stall it.
fn stall_server(
    gap: Duration,
    request_read: Arc<std::sync::atomic::AtomicBool>,
) -> (String, std::thread::JoinHandle<SentAt>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let body_at = loop {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the client closed before its request");
            got.extend_from_slice(&buf[..n]);
            if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&got[..body_at]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .unwrap();
        while got.len() < body_at + length {
            let n = s.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        request_read.store(true, std::sync::atomic::Ordering::SeqCst);
        let event = |data: &str| {
            let frame = format!("data: {data}\n\n");
            format!("{:x}\r\n{frame}\r\n", frame.len())
        };
        let content = event("{\"choices\":[{\"index\":0,\"text\":\" ba\"}]}");
        std::thread::sleep(Duration::from_millis(50));
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        s.write_all(format!("{head}{content}").as_bytes()).unwrap();
        let first = Instant::now();
        std::thread::sleep(gap);
        s.write_all(content.as_bytes()).unwrap();
        let second = Instant::now();
        s.write_all(format!("{}0\r\n\r\n", event("[DONE]")).as_bytes())
            .unwrap();
        SentAt { first, second }
    });
    (base, server)
}

/// Runs one request against `stall_server(gap)` on a one-thread runtime that a hog task
/// blocks for `stall` as soon as the server has read the request, i.e. while the first chunk
/// arrives. Returns the client's gap between the two chunks, the server's, and the run.
async fn stalled_run(gap: Duration, stall: Duration) -> (Duration, Duration, client::RunOutcome) {
    let request_read = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (base, server) = stall_server(gap, request_read.clone());
    let hog = tokio::spawn(async move {
        let give_up = Instant::now() + Duration::from_secs(10);
        while !request_read.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < give_up {
            tokio::task::yield_now().await;
        }
        // The whole runtime stops here: no read can happen until this returns.
        std::thread::sleep(stall);
    });
    let mut cfg = config(&base, 1, 1);
    cfg.request_timeout = Some(Duration::from_secs(10));
    cfg.server_metrics = None; // the server takes one connection: the request's
    let outcome = client::run(
        &cfg,
        prompts(1, 2),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    hog.await.unwrap();
    let sent = server.join().unwrap();
    let r = &outcome.records[0];
    assert_eq!(r.outcome, RequestOutcome::Completed, "{r:?}");
    assert_eq!(r.chunks.len(), 2, "{r:?}");
    let client_gap = Duration::from_micros(u64::from(r.chunks[1].t_us - r.chunks[0].t_us));
    (client_gap, sent.second - sent.first, outcome)
}

/// A client whose event loop stalls while a chunk arrives still times the chunk when it
/// arrived (the kernel's receive stamp), and says how late it read it.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn a_stalled_client_times_chunks_when_they_arrived() {
    // First chunk 50 ms after the request is read, while the loop is stalled for 150 ms; the
    // second 150 ms after the first, when the loop runs again.
    let (client_gap, server_gap, outcome) =
        stalled_run(Duration::from_millis(150), Duration::from_millis(150)).await;
    let c = &outcome.self_check;
    assert_eq!(c.chunk_time_source, "kernel_receive", "{c:?}");
    let error = client_gap.abs_diff(server_gap);
    assert!(
        error < Duration::from_millis(10),
        "client gap {client_gap:?} vs server gap {server_gap:?}: the first chunk was timed when it was read (stamping at the read would give ~50 ms)"
    );
    assert!(
        c.read_delay_max_us >= 50_000,
        "the first chunk was read ~100 ms after it came: {c:?}"
    );
    assert_eq!(c.merged_chunks, 0, "{c:?}");
    assert!(
        c.loop_lag_max_us >= 100_000,
        "the probe missed the 150 ms stall: {c:?}"
    );
}

/// Two chunks that arrive apart while the client is stalled are read together: they share
/// the later one's time, and the self-check counts the merge and refuses to vouch for the run.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn chunks_merged_by_a_late_read_are_counted_and_flag_the_run() {
    let (client_gap, server_gap, outcome) =
        stalled_run(Duration::from_millis(20), Duration::from_millis(200)).await;
    assert!(server_gap >= Duration::from_millis(20));
    assert_eq!(client_gap, Duration::ZERO, "one read held both chunks");
    let c = &outcome.self_check;
    assert_eq!(c.merged_chunks, 1, "{c:?}");
    assert!(c.client_limited, "{c:?}");
    assert!(
        c.reasons.iter().any(|r| r.contains("1 of 2 output chunks")),
        "{:?}",
        c.reasons
    );
}
