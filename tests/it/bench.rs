//! `orchestrate bench` end to end against the project's mock server (in-process, port 0): chat
//! prompts counted through the chat template (the server's own count agrees), the
//! server-tokenizer fallback over `/tokenize` + `/detokenize`, and the result JSON's detailed
//! lists (`generated_texts`) and ramp-up `rps_change_events`.

use std::path::{Path, PathBuf};
use std::process::Command;

use orchestrate_mock::{self as mock, Curve, MockConfig, Preset, TokenCounter};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::{bin, repo};

/// A fast mock server; stops when the guard drops.
struct Mock {
    base: String,
    cancel: CancellationToken,
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn mock(tokenizer: Option<&Path>) -> Mock {
    let mut c = MockConfig::new(Preset::Fixed);
    c.latency.decode = Curve::constant(1.0);
    if let Some(path) = tokenizer {
        c.tokenizer = TokenCounter::from_file(path).unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    tokio::spawn(mock::serve(c, listener, cancel.clone()));
    Mock { base, cancel }
}

fn shipped() -> PathBuf {
    repo().join("data/tokenizer/tokenizer.json")
}

/// Run `orchestrate bench` with `args` (blocking, off the runtime); the result JSON and the
/// per-request records.
async fn bench(base: &str, args: &[&str]) -> (Value, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["bench", "--base-url", base, "--model", "mock-model"])
        .args(["--save-result", "--save-detailed", "--disable-tqdm"])
        .args(["--result-filename", "r.json", "--result-dir"])
        .arg(dir.path())
        .args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "bench failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let records = std::fs::read_to_string(dir.path().join("r.requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (result, records)
}

fn lens(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_input_lengths_count_the_template_and_match_the_server() {
    // The mock renders the chat template beside its tokenizer, as vLLM does.
    let server = mock(Some(&shipped())).await;
    let tok = shipped().display().to_string();
    let (result, records) = bench(
        &server.base,
        &[
            "--endpoint",
            "/v1/chat/completions",
            "--tokenizer",
            &tok,
            "--random-input-len",
            "40",
            "--random-range-ratio",
            "0.5",
            "--random-output-len",
            "6",
            "--ignore-eos",
            "--num-prompts",
            "12",
            "--max-concurrency",
            "4",
        ],
    )
    .await;
    let template = result["chat_template"].as_str().unwrap();
    assert!(template.ends_with("tokenizer_config.json"), "{template}");
    assert_eq!(result["warnings"], serde_json::json!([]));
    assert_eq!(records.len(), 12);
    for r in &records {
        let client = r["prompt_len"].as_u64().unwrap();
        assert!((20..=60).contains(&client), "{r}");
        assert_eq!(r["usage"]["prompt_tokens"].as_u64(), Some(client), "{r}");
    }
    // vLLM's detailed lists: generated_texts has each answer, as many words as tokens.
    let texts = result["generated_texts"].as_array().unwrap();
    let outputs = lens(&result["output_lens"]);
    let mut by_index = records.clone();
    by_index.sort_by_key(|r| r["index"].as_u64());
    assert_eq!(texts.len(), 12);
    for ((t, n), r) in texts.iter().zip(&outputs).zip(&by_index) {
        assert_eq!(
            t.as_str().unwrap().split_whitespace().count() as u64,
            *n,
            "{t}"
        );
        assert_eq!(
            Some(*n),
            r["output_len"].as_u64(),
            "--ignore-eos: the requested length"
        );
        assert_eq!(r["generated_text"], *t, "the JSONL line carries it too");
    }
    for key in ["input_lens", "ttfts", "itls", "errors", "start_times"] {
        assert_eq!(result[key].as_array().unwrap().len(), 12, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_without_a_template_warns_and_counts_raw_text() {
    let server = mock(None).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(shipped(), dir.path().join("tokenizer.json")).unwrap();
    let tok = dir.path().display().to_string();
    let (result, records) = bench(
        &server.base,
        &[
            "--endpoint",
            "/v1/chat/completions",
            "--tokenizer",
            &tok,
            "--random-input-len",
            "16",
            "--random-output-len",
            "2",
            "--num-prompts",
            "3",
        ],
    )
    .await;
    assert_eq!(result["chat_template"], Value::Null);
    let w = result["warnings"][0].as_str().unwrap();
    assert!(w.contains("no chat template"), "{w}");
    assert!(records.iter().all(|r| r["prompt_len"] == 16));
    assert!(result.get("rps_change_events").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tokenizer_fallback_builds_exact_prompts() {
    // No --tokenizer and a model id not in the HF cache: /tokenize + /detokenize.
    let server = mock(None).await;
    let (result, records) = bench(
        &server.base,
        &[
            "--random-input-len",
            "32",
            "--random-prefix-len",
            "8",
            "--random-output-len",
            "3",
            "--num-prompts",
            "5",
        ],
    )
    .await;
    let tok = result["tokenizer_id"].as_str().unwrap();
    assert!(tok.ends_with("/tokenize"), "{tok}");
    assert_eq!(lens(&result["input_lens"]), vec![40; 5]);
    for r in &records {
        assert_eq!(r["prompt_len"], 40);
        assert_eq!(
            r["usage"]["prompt_tokens"], 40,
            "the server counts the same"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ramp_up_runs_write_rps_change_events() {
    let server = mock(None).await;
    let tok = shipped().display().to_string();
    let (result, _) = bench(
        &server.base,
        &[
            "--tokenizer",
            &tok,
            "--random-input-len",
            "8",
            "--random-output-len",
            "2",
            "--num-prompts",
            "30",
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "40",
            "--ramp-up-end-rps",
            "50",
        ],
    )
    .await;
    let events = result["rps_change_events"].as_array().unwrap();
    let rates: Vec<u64> = events.iter().map(|e| e["rps"].as_u64().unwrap()).collect();
    assert_eq!(rates, (40..=50).collect::<Vec<_>>());
    let stamps: Vec<&str> = events
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    assert!(chrono::NaiveDateTime::parse_from_str(stamps[0], "%Y-%m-%dT%H:%M:%S%.f").is_ok());
    assert_eq!(result["ramp_up_strategy"], "linear");
}

/// Values that would make a benchmark meaningless are bad input (exit 2) before anything is
/// sent: a zero timeout fails every request at once, a ramp from 0 requests per second never
/// sends its first one.
#[test]
fn zero_timeouts_and_ramp_rates_are_rejected_with_exit_2() {
    let cases: [&[&str]; 5] = [
        &["--request-timeout", "0s"],
        &["--ttft-timeout", "0"],
        &["--stall-timeout", "0s"],
        &[
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "0",
            "--ramp-up-end-rps",
            "5",
        ],
        &[
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps=-2",
            "--ramp-up-end-rps",
            "5",
        ],
    ];
    for case in cases {
        let out = Command::new(bin())
            .args(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m"])
            .arg("--tokenizer")
            .arg(shipped())
            .args(case)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case:?}: {stderr}");
        assert!(
            stderr.contains("longer than 0s") || stderr.contains("must be positive"),
            "{case:?}: {stderr}"
        );
    }
}
