//! The trace-replay performance bench (ignored: run by hand, prints figures). It generates a
//! Mooncake-format trace with realistic hash-id reuse (popular system prompts, sessions
//! whose turns extend their previous turn's blocks, Poisson arrivals), times the synthesis
//! of its prompts (target: under 10 s for 100,000 requests), then replays it at its own
//! timestamps through `orchestrate bench` against the in-process mock server and reports the
//! client's dispatch lag (sent minus scheduled; target: p99 under 1 ms at 2,000 req/s).
//! Bounded in count (`TRACE_BENCH_REQUESTS`) and so in time (the trace lasts requests /
//! rate, 50 s by default). docs/performance.md has the figures and the command:
//!
//! `cargo test --release --test it trace_replay_figures -- --ignored --nocapture`
//! (`TRACE_BENCH_RPS`, `TRACE_BENCH_BLOCK`, `TRACE_BENCH_MAX_BLOCKS` change the trace;
//! `TRACE_BENCH_TOKENIZER=path/tokenizer.json` times the synthesis with another tokenizer
//! and `TRACE_BENCH_SYNTH_ONLY=1` stops after it).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use orchestrate::dataset::{self, DatasetSpec, Replay, Tokenizer};
use orchestrate_mock::{self as mock, Curve, MockConfig, Preset};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Zipf};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::prefix_measured::{bench, shipped};

/// A setting from the environment, or its default.
fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The shape of the generated trace.
struct Shape {
    requests: usize,
    rps: f64,
    block: u32,
    /// Longest context of a session, in blocks (a longer one starts a new session).
    max_blocks: usize,
}

/// A Mooncake JSONL trace: 64 system prompts of 1-4 blocks picked with Zipf popularity;
/// half the requests continue one of the 2,000 most recent sessions (its blocks, then 1-3
/// new ones), the others start a session (a system prompt, then 1-4 new blocks); the last
/// block is partial; outputs of 1-16 tokens; Poisson arrivals at `rps`, in whole ms.
fn synthetic_trace(s: &Shape, seed: u64) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next_id: u64 = 0;
    let mut fresh = |n: usize| -> Vec<u64> {
        let ids = (next_id..next_id + n as u64).collect();
        next_id += n as u64;
        ids
    };
    let systems: Vec<Vec<u64>> = (0..64)
        .map(|_| {
            let n = rng.random_range(1..=4);
            fresh(n)
        })
        .collect();
    let popular = Zipf::new(systems.len() as f64, 1.1).expect("zipf parameters");
    let gaps = Exp::new(s.rps).expect("exponential rate");
    let mut sessions: Vec<Vec<u64>> = Vec::new();
    let mut t = 0.0f64;
    let mut out = String::with_capacity(s.requests * 120);
    for _ in 0..s.requests {
        t += gaps.sample(&mut rng);
        let cont = !sessions.is_empty() && rng.random_bool(0.5);
        let hash_ids = if cont {
            let i = rng.random_range(0..sessions.len());
            let mut ids = sessions[i].clone();
            let more = rng.random_range(1..=3);
            if ids.len() + more > s.max_blocks {
                ids.truncate(systems[0].len().min(ids.len()));
            }
            ids.extend(fresh(more));
            sessions[i] = ids.clone();
            ids
        } else {
            let sys = &systems[popular.sample(&mut rng) as usize - 1];
            let mut ids = sys.clone();
            let own = rng.random_range(1..=4);
            ids.extend(fresh(own));
            if sessions.len() < 2000 {
                sessions.push(ids.clone());
            } else {
                let i = rng.random_range(0..sessions.len());
                sessions[i] = ids.clone();
            }
            ids
        };
        let full = hash_ids.len() as u32 * s.block;
        let input = full - rng.random_range(0..s.block / 2);
        let output = rng.random_range(1..=16);
        let _ = writeln!(
            out,
            r#"{{"timestamp": {}, "input_length": {input}, "output_length": {output}, "hash_ids": {hash_ids:?}}}"#,
            (t * 1000.0) as u64
        );
    }
    out
}

/// Percentile `p` of sorted values.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50 / p99 / max of `values` in ms, as text.
fn spread(mut values: Vec<u64>) -> String {
    values.sort_unstable();
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(pct(&values, 50.0)),
        ms(pct(&values, 99.0)),
        ms(values.last().copied().unwrap_or(0))
    )
}

/// CPU time of the calling thread (the machine may be shared: wall time is not the cost).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Synthesis: the prompts of the whole trace (what `orchestrate bench` builds before its
/// first request), then their token ids for the ideal prefix-cache hit rate, with the
/// shipped tokenizer or `TRACE_BENCH_TOKENIZER` (a `tokenizer.json`).
fn time_synthesis(path: &Path, block: u32, requests: usize) {
    let file = std::env::var_os("TRACE_BENCH_TOKENIZER").map_or_else(shipped, Into::into);
    let tok = Tokenizer::from_file(&file).expect("tokenizer");
    println!(
        "tokenizer {} (counts add up across spaces: {})",
        file.display(),
        tok.splits_at_spaces()
    );
    let spec = DatasetSpec::Mooncake {
        path: path.to_path_buf(),
        replay: Replay {
            block_size: block,
            speedup: 1.0,
            start: Duration::ZERO,
            duration: None,
        },
    };
    let (t, c) = (Instant::now(), thread_cpu());
    let prompts = dataset::generate(&spec, &tok, requests, 0).expect("prompts");
    let (synth, synth_cpu) = (t.elapsed(), thread_cpu() - c);
    let tokens: u64 = prompts.iter().map(|p| u64::from(p.prompt_len)).sum();
    let (t, c) = (Instant::now(), thread_cpu());
    let ids = dataset::prompt_ids(&prompts, &tok, false).expect("prompt ids");
    let (idt, id_cpu) = (t.elapsed(), thread_cpu() - c);
    assert_eq!(ids.len(), prompts.len());
    println!(
        "synthesis: {} prompts, {tokens} prompt tokens, {:.2} s wall, {:.2} s CPU (target < 10 s); token ids for the ideal hit rate: {:.2} s wall, {:.2} s CPU",
        prompts.len(),
        synth.as_secs_f64(),
        synth_cpu.as_secs_f64(),
        idt.as_secs_f64(),
        id_cpu.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[ignore = "benchmark: prints figures"]
async fn trace_replay_figures() {
    let shape = Shape {
        requests: env_or("TRACE_BENCH_REQUESTS", 100_000),
        rps: env_or("TRACE_BENCH_RPS", 2000.0),
        block: env_or("TRACE_BENCH_BLOCK", 64),
        max_blocks: env_or("TRACE_BENCH_MAX_BLOCKS", 24),
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    std::fs::write(&trace, synthetic_trace(&shape, 7)).unwrap();
    println!(
        "trace: {} requests at {} req/s (Poisson), block {} tokens, sessions up to {} blocks",
        shape.requests, shape.rps, shape.block, shape.max_blocks
    );
    let (path, block, n) = (trace.clone(), shape.block, shape.requests);
    tokio::task::spawn_blocking(move || time_synthesis(&path, block, n))
        .await
        .unwrap();
    if std::env::var_os("TRACE_BENCH_SYNTH_ONLY").is_some() {
        return;
    }

    // The mock: 1 ms steps, a prefix cache that holds the hot blocks.
    let mut c = MockConfig::new(Preset::Fixed);
    c.latency.decode = Curve::constant(1.0);
    c.prefix_cache.block_tokens = 16;
    c.prefix_cache.capacity_tokens = 2_000_000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    let server = tokio::spawn(mock::serve(c, listener, cancel.clone()));

    // The replay lasts requests / rate; the client ends it with the trace.
    let block = shape.block.to_string();
    let requests = shape.requests.to_string();
    let args = [
        "--ignore-eos",
        "--dataset-name",
        "mooncake",
        "--dataset-path",
        trace.to_str().unwrap(),
        "--mooncake-block-size",
        &block,
        "--num-prompts",
        &requests,
    ];
    let t = Instant::now();
    let (result, records, _) = bench(&base, &args).await;
    let wall = t.elapsed();
    cancel.cancel();
    let _ = server.await;
    let field = |r: &Value, k: &str| r[k].as_u64().unwrap_or(0);
    let sent: Vec<u64> = records
        .iter()
        .map(|r| field(r, "sent_us").saturating_sub(field(r, "scheduled_us")))
        .collect();
    let released: Vec<u64> = records
        .iter()
        .map(|r| field(r, "dispatched_us").saturating_sub(field(r, "scheduled_us")))
        .collect();
    let last = records.iter().map(|r| field(r, "scheduled_us")).max();
    println!(
        "replay: {} requests in {:.1} s wall (the client's synthesis included; {} completed, {} failed), trace span {:.1} s",
        records.len(),
        wall.as_secs_f64(),
        result["completed"],
        result["failed"],
        last.unwrap_or(0) as f64 / 1e6
    );
    println!(
        "dispatch lag, sent - scheduled: {} (target p99 < 1 ms)",
        spread(sent)
    );
    println!("dispatch lag, released - scheduled: {}", spread(released));
    println!(
        "prefix cache hit rate: ideal {}, client {}, achieved/ideal {}; client CPU busy {}, client-limited {}",
        result["ideal_prefix_cache_hit_rate"],
        result["prefix_cache_hit_rate"],
        result["prefix_cache_hit_vs_ideal"],
        result["self_check"]["cpu_busy_fraction"],
        result["self_check"]["client_limited"]
    );
    assert_eq!(records.len(), shape.requests);
}
