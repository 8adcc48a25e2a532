//! Trace forms end to end through `orchestrate bench` against the mock server (prefix cache
//! on, the shipped tokenizer and chat template on both sides): `--dataset-name mooncake`
//! with AIPerf's literal lines (`text_input` sent as it is on completions, `messages` as
//! they are on chat, refused on completions), and `--dataset-name weka` replaying Weka's
//! per-session files as agent sessions whose later turns find their context cached.

use serde_json::Value;

use crate::conversation::{by_session, u};
use crate::prefix_measured::{bench, mock, shipped};

fn literal_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("literal.jsonl");
    let lines = [
        r#"{"timestamp": 0, "text_input": "ba be bi bo bu", "output_length": 3}"#,
        r#"{"timestamp": 20, "input_length": 40, "output_length": 2, "hash_ids": [1, 2]}"#,
        r#"{"timestamp": 40, "messages": [{"role": "system", "content": "da de"}, {"role": "user", "content": "di do du"}], "output_length": 4}"#,
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn literal_trace_lines_are_sent_as_they_are() {
    let server = mock(1_000_000, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let path = literal_trace(dir.path());
    let path = path.to_str().unwrap();
    let args = [
        "--endpoint",
        "/v1/chat/completions",
        "--dataset-name",
        "mooncake",
        "--dataset-path",
        path,
        "--mooncake-block-size",
        "20",
        "--num-prompts",
        "3",
        "--ignore-eos",
        "--save-detailed",
    ];
    let (result, records, _) = bench(&server.base, &args).await;
    assert_eq!(result["completed"], 3, "{result}");
    let mut records: Vec<&Value> = records.iter().collect();
    records.sort_by_key(|r| u(&r["index"]));
    // Each at its timestamp; the server counted what the client counted (the messages
    // rendered through the chat template, system message included).
    for (r, at) in records.iter().zip([0, 20_000, 40_000]) {
        assert_eq!(u(&r["scheduled_us"]), at);
        assert_eq!(r["usage"]["prompt_tokens"], r["prompt_len"], "{r}");
    }
    let user_only = u(&records[0]["prompt_len"]);
    assert!(u(&records[2]["prompt_len"]) > user_only, "{}", records[2]);

    // `messages` cannot go to the completions endpoint: refused before any request.
    let completions: Vec<&str> = args[2..].to_vec();
    let out = std::process::Command::new(crate::common::bin())
        .args([
            "bench",
            "--base-url",
            &server.base,
            "--model",
            "mock-model",
            "--tokenizer",
        ])
        .arg(shipped())
        .args(&completions)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--endpoint /v1/chat/completions"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weka_sessions_replay_turn_after_turn_with_their_context_cached() {
    let server = mock(1_000_000, 0).await;
    let sample = crate::common::repo().join("tests/fixtures/traces/weka-sample");
    let args = [
        "--dataset-name",
        "weka",
        "--dataset-path",
        sample.to_str().unwrap(),
        "--mooncake-slowdown-factor",
        "0.05",
        "--num-prompts",
        "9",
        "--max-concurrency",
        "2",
        "--ignore-eos",
    ];
    let (result, records, _) = bench(&server.base, &args).await;
    assert_eq!(result["completed"], 9, "{result}");
    let sessions = by_session(&records);
    let mut sizes: Vec<usize> = sessions.values().map(Vec::len).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [3, 6]);
    for turns in sessions.values() {
        for w in turns.windows(2) {
            // A later turn waits its think time (0.6 s or more, 20 times faster)...
            assert!(u(&w[1]["scheduled_us"]) >= u(&w[0]["end_us"]) + 29_000);
        }
        // ...and the context it shares with the previous call is cached.
        assert!(u(&turns[1]["usage"]["cached_tokens"]) >= 32, "{}", turns[1]);
    }
    assert!(
        result["ideal_prefix_cache_hit_rate"].as_f64().unwrap() > 0.3,
        "{result}"
    );
}
