//! The mock server's capacity benchmark (ignored; run by hand, prints figures).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::TcpStream;

use super::client::*;

/// Capacity benchmark (prints figures; not a pass/fail timing test). Run with
/// `cargo test --test it mock_capacity -- --ignored --nocapture`; MOCK_BENCH_STREAMS,
/// MOCK_BENCH_TOKENS, MOCK_BENCH_ITL_MS and MOCK_BENCH_RAMP_S change the load. The server is
/// the `orchestrate mock-server` binary in its own process; the client here is raw TCP that
/// only counts chunks, so the server's figures are what is measured. Results:
#[test]
#[ignore = "benchmark: run by hand, prints figures"]
fn mock_capacity() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let streams = env("MOCK_BENCH_STREAMS", 10_000) as usize;
    let tokens = env("MOCK_BENCH_TOKENS", 300);
    let itl_ms = env("MOCK_BENCH_ITL_MS", 100);
    let ramp_s = env("MOCK_BENCH_RAMP_S", 5);
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("truth.jsonl");
    let (mut child, addr) = cli_spawn(&[
        "--preset",
        "fixed",
        "--itl-ms",
        &itl_ms.to_string(),
        "--ground-truth",
        truth.to_str().unwrap(),
    ]);
    let pid = child.id();
    let cpu0 = proc_cpu_s(pid);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let t0 = Instant::now();
    let peak_rss = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (results, wall) = rt.block_on(async {
        let sampler = {
            let peak = peak_rss.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(proc_rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let mut tasks = Vec::with_capacity(streams);
        for i in 0..streams {
            let start_at = t0 + Duration::from_secs_f64(ramp_s as f64 * i as f64 / streams as f64);
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(start_at.into()).await;
                raw_stream(addr, tokens).await
            }));
        }
        let mut results = Vec::with_capacity(streams);
        for t in tasks {
            results.push(t.await.unwrap());
        }
        sampler.abort();
        (results, t0.elapsed())
    });
    let cpu = proc_cpu_s(pid) - cpu0;
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    assert_eq!(cli_wait(&mut child), 0);

    let total_chunks: u64 = results.iter().map(|r| r.chunks).sum();
    // Steady window: all streams started, none finished.
    let last_start = results.iter().map(|r| r.first).max().unwrap();
    let first_end = results.iter().map(|r| r.last).min().unwrap();
    // Ground truth: per-stream gaps between chunk send times vs the configured step.
    let text = std::fs::read_to_string(&truth).unwrap();
    let mut gaps = Vec::new();
    let (mut ok, mut truth_chunks, mut coalesced, mut truth_tokens) = (0, 0u64, 0u64, 0u64);
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["status"] == "ok" && v["completion_tokens"] == tokens {
            ok += 1;
        }
        let c = v["chunks"].as_array().unwrap();
        for chunk in c {
            let n = chunk[1].as_u64().unwrap();
            truth_chunks += 1;
            truth_tokens += n;
            coalesced += u64::from(n > 1);
        }
        for w in c.windows(2) {
            gaps.push((w[1][0].as_u64().unwrap() - w[0][0].as_u64().unwrap()) as f64 / 1e6);
        }
    }
    gaps.sort_by(f64::total_cmp);
    let q = |p: f64| gaps[((gaps.len() - 1) as f64 * p) as usize];
    println!(
        "mock capacity: {streams} streams x {tokens} tokens, {itl_ms} ms steps, ramp {ramp_s} s"
    );
    println!("  completed streams            {ok}/{streams}");
    println!("  wall time                    {:.1} s", wall.as_secs_f64());
    println!(
        "  chunks received / logged     {total_chunks} / {truth_chunks} ({coalesced} logged chunks carried >1 token)"
    );
    println!(
        "  mean output tokens/s         {:.0}",
        truth_tokens as f64 / wall.as_secs_f64()
    );
    if first_end > last_start {
        println!(
            "  steady window (all running)  {:.1} s at ~{:.0} tokens/s",
            (first_end - last_start).as_secs_f64(),
            streams as f64 * 1000.0 / itl_ms as f64
        );
    }
    println!(
        "  server CPU                   {:.1} s ({:.0}% of one core, {:.1} us per token)",
        cpu,
        100.0 * cpu / wall.as_secs_f64(),
        cpu * 1e6 / truth_tokens as f64
    );
    println!(
        "  server peak RSS              {} MiB",
        peak_rss.load(std::sync::atomic::Ordering::Relaxed) / 1024
    );
    println!(
        "  send gaps (ms) p1 {:.1}  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        q(0.01),
        q(0.5),
        q(0.99),
        q(0.999),
        gaps[gaps.len() - 1]
    );
}

struct RawResult {
    chunks: u64,
    first: Instant,
    last: Instant,
}

/// A streaming completion over a bare socket: count `data: {` events until `[DONE]`.
async fn raw_stream(addr: SocketAddr, tokens: u64) -> RawResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body =
        format!(r#"{{"prompt":"a b c d","max_tokens":{tokens},"ignore_eos":true,"stream":true}}"#);
    let mut s = loop {
        match TcpStream::connect(addr).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    s.set_nodelay(true).unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    // Each SSE event ends with the only "\n\n" it contains; count those, cheaply.
    let (mut chunks, mut first, mut last, mut prev) = (0, None, Instant::now(), 0u8);
    loop {
        let n = s.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        let now = Instant::now();
        let mut events = 0u64;
        for &b in &buf[..n] {
            events += u64::from(b == b'\n' && prev == b'\n');
            prev = b;
        }
        if events > 0 {
            first.get_or_insert(now);
            last = now;
            chunks += events;
        }
        // The last chunk of the response body: "0\r\n\r\n".
        if buf[..n].ends_with(b"\r\n0\r\n\r\n") {
            break;
        }
    }
    // [DONE] is an event too.
    let chunks = chunks.saturating_sub(1);
    RawResult {
        chunks,
        first: first.unwrap_or(last),
        last,
    }
}

fn proc_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn proc_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}
