//! The prefix cache measured and reasoning models timed, end to end: `orchestrate bench`
//! against the mock server (in-process, port 0, the shipped tokenizer on both sides). The
//! three hit rates (client-side from `cached_tokens`, the server's from its `/metrics`, the
//! workload's ideal) and achieved/ideal each move the right way between a shared-prefix and
//! a random workload and between a large and a too-small cache; a reasoning model gets its
//! time to first output token and reasoning token count.

use std::path::PathBuf;
use std::process::Command;

use orchestrate_mock::{self as mock, Curve, MockConfig, Preset, TokenCounter};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::{bin, repo};

/// A fast mock server with the shipped tokenizer; stops when the guard drops.
pub(crate) struct Mock {
    pub(crate) base: String,
    cancel: CancellationToken,
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

pub(crate) fn shipped() -> PathBuf {
    repo().join("data/tokenizer/tokenizer.json")
}

pub(crate) async fn mock(cache_tokens: u64, reasoning_tokens: u32) -> Mock {
    let mut c = MockConfig::new(Preset::Fixed);
    c.latency.decode = Curve::constant(1.0);
    c.tokenizer = TokenCounter::from_file(&shipped()).unwrap();
    c.prefix_cache.block_tokens = 16;
    c.prefix_cache.capacity_tokens = cache_tokens;
    c.reasoning_tokens = reasoning_tokens;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    tokio::spawn(mock::serve(c, listener, cancel.clone()));
    Mock { base, cancel }
}

/// `orchestrate bench` with the shipped tokenizer (off the runtime): the result JSON, the
/// records and the text printed.
pub(crate) async fn bench(base: &str, args: &[&str]) -> (Value, Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["bench", "--base-url", base, "--model", "mock-model"])
        .args(["--save-result", "--disable-tqdm", "--tokenizer"])
        .arg(shipped())
        .args(["--result-filename", "r.json", "--result-dir"])
        .arg(dir.path())
        .args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let records = std::fs::read_to_string(dir.path().join("r.requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (result, records, stdout)
}

/// 4 groups of 8 prompts sharing a 512-token system prompt, one request at a time (so the
/// send order is the order the server sees).
const SHARED: &[&str] = &[
    "--dataset-name",
    "generated-shared-prefix",
    "--gsp-num-groups",
    "4",
    "--gsp-prompts-per-group",
    "8",
    "--gsp-system-prompt-len",
    "512",
    "--gsp-question-len",
    "32",
    "--gsp-output-len",
    "2",
    "--num-prompts",
    "32",
    "--max-concurrency",
    "1",
    "--ignore-eos",
];

const RANDOM: &[&str] = &[
    "--random-input-len",
    "544",
    "--random-output-len",
    "2",
    "--num-prompts",
    "32",
    "--max-concurrency",
    "1",
    "--ignore-eos",
];

fn rate(v: &Value, key: &str) -> Option<f64> {
    v[key].as_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hit_rates_follow_the_workload_and_the_cache() {
    // A cache that holds everything, on a shared-prefix workload.
    let big = mock(1_000_000, 0).await;
    let (shared, records, text) = bench(&big.base, SHARED).await;
    let ideal = rate(&shared, "ideal_prefix_cache_hit_rate").unwrap();
    let client = rate(&shared, "prefix_cache_hit_rate").unwrap();
    let server = rate(&shared, "server_prefix_cache_hit_rate").unwrap();
    // 28 of 32 prompts find their group's 512 tokens (32 blocks) sent before: ~0.8.
    assert!((0.7..0.9).contains(&ideal), "ideal {ideal}");
    assert!((0.7..0.9).contains(&client), "client {client}");
    // The mock's counters count the same tokens as the usage it sends.
    assert!(
        (server - client).abs() < 1e-9,
        "server {server} client {client}"
    );
    let ratio = rate(&shared, "prefix_cache_hit_vs_ideal").unwrap();
    assert!((0.95..1.05).contains(&ratio), "achieved/ideal {ratio}");
    assert_eq!(shared["prefix_block_tokens"], 16);
    let cached: u64 = records
        .iter()
        .map(|r| r["usage"]["cached_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(shared["cached_prompt_tokens"].as_u64(), Some(cached));
    assert!(text.contains("Prefix cache hit rate (ideal):"), "{text}");
    assert!(text.contains("Achieved / ideal:"), "{text}");

    // A random workload has nothing to reuse: every rate near 0 and no ratio.
    let (random, _, _) = bench(&big.base, RANDOM).await;
    for key in [
        "ideal_prefix_cache_hit_rate",
        "prefix_cache_hit_rate",
        "server_prefix_cache_hit_rate",
    ] {
        let r = rate(&random, key).unwrap();
        assert!(r < 0.05, "{key} {r}");
    }
    assert!(random["prefix_cache_hit_vs_ideal"].is_null(), "{random}");
    drop(big);

    // A cache smaller than two system prompts: the same workload (same ideal), but the
    // server keeps losing what the next group needs.
    let small = mock(600, 0).await;
    let (evicted, _, _) = bench(&small.base, SHARED).await;
    assert_eq!(rate(&evicted, "ideal_prefix_cache_hit_rate"), Some(ideal));
    let client_small = rate(&evicted, "prefix_cache_hit_rate").unwrap();
    let server_small = rate(&evicted, "server_prefix_cache_hit_rate").unwrap();
    assert!(client_small < client - 0.2, "{client_small} vs {client}");
    assert!(server_small < server - 0.2, "{server_small} vs {server}");
    let ratio_small = rate(&evicted, "prefix_cache_hit_vs_ideal").unwrap();
    assert!(ratio_small < 0.75, "achieved/ideal {ratio_small}");
    drop(small);

    // No cache: the server reports nothing, which stays unknown (null), never 0.
    let none = mock(0, 0).await;
    let (unknown, records, _) = bench(&none.base, SHARED).await;
    assert_eq!(rate(&unknown, "ideal_prefix_cache_hit_rate"), Some(ideal));
    for key in [
        "prefix_cache_hit_rate",
        "server_prefix_cache_hit_rate",
        "prefix_cache_hit_vs_ideal",
        "cached_prompt_tokens",
    ] {
        assert!(unknown[key].is_null(), "{key}: {}", unknown[key]);
    }
    assert!(records[0]["usage"].get("cached_tokens").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_model_gets_time_to_first_output_token() {
    let server = mock(0, 5).await;
    let chat = [
        "--endpoint",
        "/v1/chat/completions",
        "--random-input-len",
        "20",
        "--random-output-len",
        "12",
        "--num-prompts",
        "8",
        "--max-concurrency",
        "2",
        "--ignore-eos",
    ];
    let (result, records, text) = bench(&server.base, &chat).await;
    assert_eq!(result["reasoning_requests"], 8);
    assert_eq!(result["total_reasoning_tokens"], 40);
    let ttft = result["mean_ttft_ms"].as_f64().unwrap();
    let ttfot = result["mean_ttfot_ms"].as_f64().unwrap();
    // Five reasoning tokens, one 1 ms decode step each, come before the answer.
    assert!(ttfot >= ttft + 3.0, "TTFOT {ttfot} ms, TTFT {ttft} ms");
    assert!(result["p99_ttfot_ms"].as_f64().unwrap() >= ttfot);
    for r in &records {
        let first = r["chunks"][0][0].as_u64().unwrap();
        let content = r["first_content_us"].as_u64().unwrap();
        assert!(content > first, "{r}");
        assert_eq!(r["usage"]["reasoning_tokens"], 5);
        // Reasoning tokens are output tokens: the count is whole.
        assert_eq!(r["usage"]["completion_tokens"], 12);
    }
    assert!(text.contains("Time to First Output Token"), "{text}");
    assert!(text.contains("Requests that reasoned:"), "{text}");

    // Completions never reason: no TTFOT figures, no reasoning.
    let completions = [
        "--random-input-len",
        "20",
        "--random-output-len",
        "4",
        "--num-prompts",
        "4",
        "--ignore-eos",
    ];
    let (plain, records, text) = bench(&server.base, &completions).await;
    assert_eq!(plain["reasoning_requests"], 0);
    assert!(plain["total_reasoning_tokens"].is_null());
    assert!(plain.get("mean_ttfot_ms").is_none(), "{plain}");
    assert!(!text.contains("Time to First Output Token"), "{text}");
    for r in &records {
        assert_eq!(r["first_content_us"], r["chunks"][0][0], "{r}");
    }
}
